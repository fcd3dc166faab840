// What creating communicators shares with split(): exchanging address
// blobs of any length over a fixed-size all-gather.
#pragma once

#include <chorus/communicator.hpp>

#include "bootstrap/launch.hpp"

namespace chorus {

// Lengths first, then every blob padded to the longest; a rank that sends
// an address over 16 MiB fails every rank with peer_failure.
bootstrap::BlobAllgather blobs_over(const Communicator::Allgather& allgather, int size);

}  // namespace chorus
