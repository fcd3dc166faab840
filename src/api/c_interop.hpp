// For Chorus's sibling libraries (libchorus_mpi) that add C entry points of
// their own: the C handle is private to libchorus, so they create it here.
// Exported from libchorus but not installed: not a public interface.
#pragma once

#include <chorus/chorus.h>
#include <chorus/communicator.hpp>

#include <functional>

namespace chorus::c_interop {

// *comm = a C handle owning make()'s communicator; what make() throws
// becomes the result and chorus_get_last_error(NULL)'s message. Never throws.
CHORUS_API chorus_result_t init_comm(chorus_comm_t* comm,
                                     const std::function<Communicator()>& make) noexcept;

}  // namespace chorus::c_interop
