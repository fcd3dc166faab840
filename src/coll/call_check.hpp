// Proof that every rank made the same call, so that a mismatch (another
// count, dtype, op, root, algorithm or collective) is an error on every rank
// instead of a silently wrong result.
//
// Each rank contributes its call's signature. MessageCallCheck: a dissemination exchange of
// ceil(log2 p) rounds of one small message each gives every rank the smallest
// and the largest signature of all ranks (and who made them). They are equal
// exactly when all ranks agree. The rounds run beside the algorithm: the
// collective's waits call poll(), so the check adds messages but no latency
// step, and it finishes even when the algorithm itself cannot (a mismatch may
// leave a rank waiting for a message that will never come). Every rank ends
// with the same verdict and the same message.
//
// Its messages use segment kCheckSegment of the call's tag space, which the
// algorithms leave free. When every rank is on one host, HostCallCheck
// (coll/shared_memory.hpp) does the same through the host segment: each rank
// writes its signature into its slot and reads the others', no messages.
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::coll {

enum class CollectiveKind : std::uint8_t {
  allreduce,
  broadcast,
  reduce,
  allgather,
  reduce_scatter,
  alltoall,
  barrier,
  allgatherv,
  reduce_scatter_v,
  alltoallv,
  gather,
  gatherv,
  scatter,
  scatterv,
};
inline constexpr int kCollectiveKinds = 14;
// Whether the collective combines values with an op (and so names one).
bool reduces(CollectiveKind kind) noexcept;
std::string_view to_string(CollectiveKind kind) noexcept;

struct CallSignature {
  std::uint8_t kind = 0;       // CollectiveKind
  std::uint8_t datatype = 0;   // DataType
  std::uint8_t op = 0;         // ReduceOp
  std::uint8_t algorithm = 0;  // which algorithm runs it (a name index)
  std::int32_t root = -1;      // -1 when the collective has none
  std::uint64_t count = 0;     // elements; v-forms: 0, or the sum of the counts
  std::uint64_t layout = 0;    // allgatherv, reduce_scatter_v: a hash of the counts
  auto operator<=>(const CallSignature&) const = default;
};

// "allreduce(count=1000, float32, sum, ring)"; `algorithm_name` names
// signature.algorithm. The v-forms whose ranks pass the same counts show
// their total and the counts' hash; those whose counts differ per rank
// (gatherv, scatterv, alltoallv) show none: their sizes are checked message
// by message instead.
std::string describe(const CallSignature& signature, std::string_view algorithm_name);

// What a collective's waits poll (Collective::check): the proof, running
// beside the algorithm, that every rank made the same call. Two kinds:
// MessageCallCheck below (messages through the transport), and
// HostCallCheck (coll/shared_memory.hpp: signatures in the host segment,
// when every rank is on one host).
class CallCheck {
 public:
  virtual ~CallCheck() = default;
  // Moves the check forward without blocking. Throws the mismatch Error
  // once the check has shown one, or a peer's failure.
  virtual void poll() = 0;
  // Blocks until the check is over (bounded by `deadline`); throws the
  // mismatch Error if the ranks disagree.
  virtual void finish(transport::Deadline deadline) = 0;
  virtual bool finished() const noexcept = 0;
};

// The smallest and the largest signature among some ranks, and who made
// them (the lowest rank on ties): equal exactly when those ranks agree, and
// merged from any subsets in any order to the same answer, so that every
// rank that has seen all of them names the same two calls. Every kind of
// check keeps one (and MessageCallCheck sends it as it is).
struct SignatureExtremes {
  CallSignature low, high;
  std::int32_t low_rank = 0, high_rank = 0;

  static SignatureExtremes of(const CallSignature& s, int rank) { return {s, s, rank, rank}; }
  void add(const CallSignature& s, int rank) {
    if (s < low || (s == low && rank < low_rank)) low = s, low_rank = rank;
    if (high < s || (s == high && rank < high_rank)) high = s, high_rank = rank;
  }
  void add(const SignatureExtremes& e) {
    add(e.low, e.low_rank);
    add(e.high, e.high_rank);
  }
  bool agree() const noexcept { return low == high; }
};

// The Error every kind of check throws for call #`sequence` when the
// extremes differ; the same text on every rank.
Error mismatch_error(std::uint64_t sequence, const SignatureExtremes& seen,
                     std::string_view (*name_algorithm)(std::uint8_t));

class MessageCallCheck final : public CallCheck {
 public:
  // Starts the exchange (posts round 0). `name_algorithm` turns an algorithm
  // index into its name for messages.
  MessageCallCheck(const Collective& collective, const CallSignature& mine,
                   std::string_view (*name_algorithm)(std::uint8_t));
  MessageCallCheck(const MessageCallCheck&) = delete;
  MessageCallCheck& operator=(const MessageCallCheck&) = delete;
  ~MessageCallCheck() override;

  void poll() override;
  void finish(transport::Deadline deadline) override;
  bool finished() const noexcept override { return round_ == rounds_ && sends_done(); }
 private:
  void start_round();
  bool sends_done() const noexcept;
  void throw_if_mismatched() const;

  const Collective& collective_;
  std::string_view (*name_algorithm_)(std::uint8_t);
  int rounds_ = 0, round_ = 0;
  SignatureExtremes seen_;
  SignatureExtremes incoming_;
  std::vector<SignatureExtremes> outgoing_;  // one per round: a send's buffer must live until it is done
  transport::RequestPtr receive_;
  std::vector<transport::RequestPtr> sends_;
};

}  // namespace chorus::coll
