// The transport conformance scenarios: each runs on every rank of a group,
// against any Transport, and throws (std::runtime_error or chorus::Error) on
// the first thing that contradicts the contract in transport.hpp. The same
// code runs in threads over the local transport and in processes over TCP
// and UCX (tests/transport/transport_worker.cpp).
#pragma once

#include "transport/transport.hpp"

#include <functional>
#include <string>
#include <vector>

namespace chorus::conformance {

struct Scenario {
  std::string name;
  std::function<void(transport::Transport&)> run;
};

// Scenarios every transport must pass, whatever the group size (>= 2).
const std::vector<Scenario>& scenarios();
const Scenario* find_scenario(const std::string& name);

// The scenario in which the last rank dies mid-transfer. `die` is called on
// the last rank while messages to and from it are in flight (a process
// raises SIGKILL; a thread aborts its transport). Every other rank checks
// that all its pending requests with that rank fail within 5 seconds, with
// an error naming it.
void peer_death(transport::Transport& t, const std::function<void()>& die);

// The last rank sends one small message to every other rank and, once the
// sends are done, leaves (`leave` ends the process cleanly). The others
// first see it gone (a receive it never sends fails), then still receive
// the message it sent before leaving: a peer's last words are not lost.
void last_message_outlives_sender(transport::Transport& t, const std::function<void()>& leave);
// Rank 2 (of 3) aborts after every rank has exchanged a message with it;
// ranks 0 and 1 wait for a message from it that never comes and must fail
// naming its abort's reason (the abort notice), not a lost connection.
void abort_notice_names_the_reason(transport::Transport& t);

}  // namespace chorus::conformance
