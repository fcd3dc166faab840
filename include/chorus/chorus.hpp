// Chorus: MPI-style collective operations. Include this one header.
#pragma once

#include <chorus/algorithm.hpp>
#include <chorus/communicator.hpp>
#include <chorus/error.hpp>
#include <chorus/types.hpp>
#include <chorus/version.hpp>
