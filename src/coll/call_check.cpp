#include "coll/call_check.hpp"

#include <fmt/format.h>

#include <cstring>
#include <type_traits>

namespace chorus::coll {

std::string_view to_string(CollectiveKind kind) noexcept {
  switch (kind) {
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce: return "reduce";
    case CollectiveKind::allgather: return "allgather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::alltoall: return "alltoall";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::allgatherv: return "allgatherv";
    case CollectiveKind::reduce_scatter_v: return "reduce_scatter_v";
    case CollectiveKind::alltoallv: return "alltoallv";
    case CollectiveKind::gather: return "gather";
    case CollectiveKind::gatherv: return "gatherv";
    case CollectiveKind::scatter: return "scatter";
    case CollectiveKind::scatterv: return "scatterv";
  }
  return "unknown collective";
}

bool reduces(CollectiveKind kind) noexcept {
  return kind == CollectiveKind::allreduce || kind == CollectiveKind::reduce ||
         kind == CollectiveKind::reduce_scatter || kind == CollectiveKind::reduce_scatter_v;
}

std::string describe(const CallSignature& s, std::string_view algorithm_name) {
  const auto kind = static_cast<CollectiveKind>(s.kind);
  const auto type = static_cast<DataType>(s.datatype);
  const auto op = static_cast<ReduceOp>(s.op);
  if (kind == CollectiveKind::barrier) return fmt::format("barrier({})", algorithm_name);
  std::string text = fmt::format("{}(", to_string(kind));
  if (s.layout != 0)
    text += fmt::format("total count={}, counts #{:016x}, ", s.count, s.layout);
  else if (kind != CollectiveKind::gatherv && kind != CollectiveKind::scatterv &&
           kind != CollectiveKind::alltoallv)
    text += fmt::format("count={}, ", s.count);
  text += to_string(type);
  if (reduces(kind)) text += fmt::format(", {}", to_string(op));
  if (s.root >= 0) text += fmt::format(", root={}", s.root);
  return text + fmt::format(", {})", algorithm_name);
}

namespace {
// The rounds of a dissemination exchange over p ranks: ceil(log2 p).
int rounds_for(int p) {
  int rounds = 0;
  for (int reach = 1; reach < p; reach *= 2) ++rounds;
  return rounds;
}
}  // namespace

MessageCallCheck::MessageCallCheck(const Collective& collective, const CallSignature& mine,
                     std::string_view (*name_algorithm)(std::uint8_t))
    : collective_(collective), name_algorithm_(name_algorithm) {
  static_assert(std::is_trivially_copyable_v<SignatureExtremes>);
  const int p = collective.transport.size();
  rounds_ = rounds_for(p);
  seen_ = SignatureExtremes::of(mine, collective.transport.rank());
  outgoing_.resize(static_cast<std::size_t>(rounds_));
  if (rounds_ > 0) start_round();
}

MessageCallCheck::~MessageCallCheck() = default;

void MessageCallCheck::start_round() {
  transport::Transport& t = collective_.transport;
  const int p = t.size(), r = t.rank(), reach = 1 << round_;
  const auto tag = collective_.message_tag(1, static_cast<unsigned>(round_), kCheckSegment);
  receive_ = t.irecv((r - reach % p + p) % p, tag, &incoming_, sizeof incoming_);
  outgoing_[static_cast<std::size_t>(round_)] = seen_;
  sends_.push_back(t.isend((r + reach) % p, tag, &outgoing_[static_cast<std::size_t>(round_)],
                           sizeof(SignatureExtremes)));
}

bool MessageCallCheck::sends_done() const noexcept {
  for (const auto& s : sends_)
    if (!s->done()) return false;
  return true;
}

void MessageCallCheck::poll() {
  while (round_ < rounds_ && receive_->done()) {
    if (const Error* e = receive_->error()) throw *e;
    if (receive_->received_bytes() != sizeof incoming_)
      throw Error(ErrorCode::mismatched_collective,
                  fmt::format("rank {}: the call check from rank {} has {} bytes, not {}: the "
                              "ranks run different versions of chorus or different collectives",
                              collective_.transport.rank(), receive_->peer(),
                              receive_->received_bytes(), sizeof incoming_));
    seen_.add(incoming_);
    if (++round_ < rounds_) start_round();
  }
  for (const auto& s : sends_)
    if (const Error* e = s->error()) throw *e;
  if (round_ == rounds_) throw_if_mismatched();
}

Error mismatch_error(std::uint64_t sequence, const SignatureExtremes& seen,
                     std::string_view (*name_algorithm)(std::uint8_t)) {
  return Error(ErrorCode::mismatched_collective,
               fmt::format("ranks called different collectives as call #{}: rank {} called {}, "
                           "rank {} called {}",
                           sequence, seen.low_rank, describe(seen.low, name_algorithm(seen.low.algorithm)),
                           seen.high_rank, describe(seen.high, name_algorithm(seen.high.algorithm))));
}

void MessageCallCheck::throw_if_mismatched() const {
  if (seen_.agree()) return;
  throw mismatch_error(collective_.sequence, seen_, name_algorithm_);
}

void MessageCallCheck::finish(transport::Deadline deadline) {
  transport::Transport& t = collective_.transport;
  while (round_ < rounds_) {
    // poll() replaces receive_ when a round ends: hold this round's request.
    const transport::RequestPtr current = receive_;
    t.wait(*current, deadline, [this] { poll(); });
    poll();
  }
  for (const auto& s : sends_) t.wait(*s, deadline);
  throw_if_mismatched();
}

}  // namespace chorus::coll
