// Chorus: MPI-style collective operations. Include this one header.
#pragma once

#include <chorus/error.hpp>
#include <chorus/types.hpp>
#include <chorus/version.hpp>
