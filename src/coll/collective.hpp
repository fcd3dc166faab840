// What every collective algorithm receives: the transport, this call's tag
// space, and its deadline. Algorithms see no sockets, stores or endpoints.
//
// Tags: every message of one collective call carries the call's sequence
// number (its low 16 bits) in the top of the 40-bit transport tag, so that
// two calls in flight never mix; the rest says which message of the call it
// is (phase, step, segment), laid out by message_tag().
#pragma once

#include "transport/transport.hpp"

#include <cstdint>

namespace chorus::coll {

struct Collective {
  transport::Transport& transport;
  std::uint32_t sequence;  // this call's number on its communicator
  transport::Deadline deadline;

  // phase < 2, step < 2048, segment < 4096.
  transport::Tag message_tag(unsigned phase, unsigned step, unsigned segment) const {
    return (static_cast<transport::Tag>(sequence & 0xFFFFu) << 24) |
           (static_cast<transport::Tag>(phase & 1u) << 23) |
           (static_cast<transport::Tag>(step & 0x7FFu) << 12) | (segment & 0xFFFu);
  }
};

}  // namespace chorus::coll
