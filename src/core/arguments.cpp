#include "core/call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace chorus::core {
namespace {

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

void check_arguments(coll::CollectiveKind kind, const CallArgs& a, int me, int p, Call& checked) {
  using coll::BlockLayout;
  using coll::CollectiveKind;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, fmt::format("{}: {}", coll::to_string(kind), why));
  };
  // Written in place: operands returned by value went through a temporary
  // that the caller read back in 16-byte loads over this function's narrower
  // stores, a stalled store-to-load forward on every call.
  coll::Operands& call = checked.operands;
  coll::CallSignature& signature = checked.signature;
  call.send = a.send;
  call.recv = a.recv;
  call.count = a.count;
  call.type = a.type;
  call.op = a.op;
  signature = {};
  signature.kind = static_cast<std::uint8_t>(kind);
  if (kind == CollectiveKind::barrier) {
    call.count = 0;
    return;
  }
  if (!is_valid(a.type))
    throw bad(fmt::format("datatype {} is not a chorus::DataType", static_cast<int>(a.type)));
  if (coll::reduces(kind)) {
    if (!is_valid(a.op)) throw bad(fmt::format("op {} is not a chorus::ReduceOp", static_cast<int>(a.op)));
    if (!is_supported(a.type, a.op))
      throw bad(fmt::format("op {} is not defined for {}", to_string(a.op), to_string(a.type)));
  } else {
    call.op = ReduceOp::sum;  // not part of the call: kept out of the signature
  }
  const bool rooted = kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce ||
                      kind == CollectiveKind::gather || kind == CollectiveKind::gatherv ||
                      kind == CollectiveKind::scatter || kind == CollectiveKind::scatterv;
  if (rooted && (a.root < 0 || a.root >= p))
    throw bad(fmt::format("root {} is not a rank of this communicator (0..{})", a.root, p - 1));
  const bool at_root = me == a.root;
  const std::size_t esize = size_of(a.type);
  const auto ranks = static_cast<std::size_t>(p);
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  // Multiplied with overflow checks, not compared with kMax divided: two
  // divisions a call were a fifth of these checks' time (perf, 8-byte reduce).
  std::size_t block = 0, all = 0;
  if (__builtin_mul_overflow(a.count, esize, &block))
    throw bad(fmt::format("count {} of {} overflows the address space", a.count, to_string(a.type)));
  // Other than allreduce's, `count` times p must fit too (the uniform forms'
  // buffers of p blocks).
  if (kind == CollectiveKind::allreduce) all = block;
  else if (__builtin_mul_overflow(block, ranks, &all))
    throw bad(fmt::format("count {} of {} on {} ranks overflows the address space", a.count,
                          to_string(a.type), p));
  auto need = [&](const void* buffer, const char* what, std::size_t bytes) {
    if (bytes > 0 && buffer == nullptr)
      throw bad(fmt::format("{} is null but holds {} bytes", what, bytes));
  };
  // `part` must be `slot` (in place) or lie apart from `whole`.
  auto slot_or_apart = [&](const void* part, std::size_t part_bytes, const void* whole,
                           std::size_t whole_bytes, const void* slot, const char* rule) {
    if (part != slot && overlaps(part, part_bytes, whole, whole_bytes)) throw bad(rule);
  };
  // A v-form's counts and displacements into `blocks`: p entries each (no
  // displacements: blocks back to back); sets `extent` to the bytes the
  // blocks span. Assigned in place: a reused layout keeps its vectors.
  auto layout = [&](BlockLayout& blocks, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, const char* counts_name,
                    const char* displs_name, std::size_t& extent) {
    if (counts.size() != ranks)
      throw bad(fmt::format("{} has {} entries for {} ranks", counts_name, counts.size(), p));
    if (!displs.empty() && displs.size() != ranks)
      throw bad(fmt::format("{} has {} entries for {} ranks (or give none: blocks back to back)",
                            displs_name, displs.size(), p));
    blocks.counts.assign(counts.begin(), counts.end());
    if (!displs.empty()) {
      blocks.displs.assign(displs.begin(), displs.end());
    } else {
      blocks.displs.resize(ranks);
      std::size_t next = 0;  // (an overflow is refused below, by the counts)
      for (std::size_t j = 0; j < ranks; ++j) blocks.displs[j] = next, next += counts[j];
    }
    extent = 0;
    std::size_t total = 0;
    for (std::size_t j = 0; j < ranks; ++j) {
      const std::size_t n = blocks.counts[j], at = blocks.displs[j];
      if (n > kMax / esize || at > kMax / esize - n || total > kMax / esize - n)
        throw bad(fmt::format("{}[{}] = {} at {} of {} overflows the address space", counts_name,
                              j, n, at, to_string(a.type)));
      total += n;
      if (n > 0) extent = std::max(extent, (at + n) * esize);
    }
  };
  // Ranks must pass the same counts to allgatherv and reduce_scatter_v: the
  // call check compares their hash.
  auto sign_counts = [&](const std::vector<std::size_t>& counts) {
    std::uint64_t hash = 1469598103934665603ull, total = 0;  // FNV-1a
    for (std::size_t n : counts) {
      total += n;
      for (int byte = 0; byte < 8; ++byte) hash = (hash ^ ((n >> (8 * byte)) & 0xFF)) * 1099511628211ull;
    }
    signature.count = total;
    signature.layout = hash == 0 ? 1 : hash;
  };
  // The root's buffer of p blocks in gather(v) (recv) and scatter(v)
  // (send): equal blocks of count, or as counts and displs say; the root's
  // own block must be `count` elements, and its other buffer (`own`) is
  // that block (in place) or apart from them all.
  // `blocks`: where a v-form's layout goes; null for the uniform forms,
  // whose layout is not made (their rows need none, or make it: registry.cpp).
  auto root_blocks = [&](const void* whole, const char* whole_name, const void* own,
                         const char* own_name, std::span<const std::size_t> counts,
                         std::span<const std::size_t> displs, const char* counts_name,
                         const char* displs_name, BlockLayout* blocks) {
    std::size_t extent = all;
    if (blocks != nullptr) layout(*blocks, counts, displs, counts_name, displs_name, extent);
    // (Checked here rather than by need() and slot_or_apart(): their
    // messages are formatted only when thrown, not on every call.)
    if (extent > 0 && whole == nullptr)
      throw bad(fmt::format("{} buffer (at the root) is null but holds {} bytes", whole_name, extent));
    const std::size_t root_count = blocks ? blocks->counts[static_cast<std::size_t>(me)] : a.count;
    if (root_count != a.count)
      throw bad(fmt::format("the root's own block is {} elements ({}[{}]) but its {} count is {}",
                            root_count, counts_name, me, own_name, a.count));
    const auto* slot = static_cast<const std::byte*>(whole) +
                       (blocks ? blocks->offset(me, esize) : block * static_cast<std::size_t>(me));
    if (own != slot && overlaps(own, block, whole, extent))
      throw bad(fmt::format("{} overlaps {} without being the root's block of it (in place "
                            "means {} == {} + the root's displacement)",
                            own_name, whole_name, own_name, whole_name));
  };
  // The v-forms' layouts, made only for them (borrowed from this thread's:
  // coll::VFormLayoutsPtr).
  coll::VFormLayoutsPtr v_forms;
  auto layouts = [&]() -> coll::VFormLayouts& {
    if (!v_forms) v_forms = coll::borrow_v_form_layouts();
    return *v_forms;
  };
  const auto* send_bytes = static_cast<const std::byte*>(a.send);
  auto* recv_bytes = static_cast<std::byte*>(a.recv);
  const std::size_t my_block = static_cast<std::size_t>(me) * block;
  signature.count = a.count;
  switch (kind) {
    case CollectiveKind::allreduce:
      if (block > 0 && a.send == nullptr)
        throw bad(fmt::format("send buffer is null but count is {}", a.count));
      if (block > 0 && a.recv == nullptr)
        throw bad(fmt::format("recv buffer is null but count is {}", a.count));
      if (a.send != a.recv && overlaps(a.send, block, a.recv, block))
        throw bad("send and recv buffers overlap without being the same (in place means send == recv)");
      break;
    case CollectiveKind::broadcast:
      need(a.recv, "buffer", block);
      call.send = a.recv;
      break;
    case CollectiveKind::reduce:
      need(a.send, "send buffer", block);
      if (at_root) need(a.recv, "recv buffer (at the root)", block);
      if (at_root && a.send != a.recv && overlaps(a.send, block, a.recv, block))
        throw bad("send and recv buffers overlap without being the same (in place means send == recv)");
      break;
    case CollectiveKind::allgather:
      need(a.send, "send buffer", block);
      need(a.recv, "recv buffer", all);
      slot_or_apart(a.send, block, a.recv, all, recv_bytes + my_block,
                    "send overlaps recv without being this rank's block of it (in place means "
                    "send == recv + rank * count)");
      break;
    case CollectiveKind::allgatherv: {
      std::size_t extent = 0;
      layout(layouts().recv_blocks, a.recv_counts, a.recv_displs, "recv_counts", "recv_displs", extent);
      const std::size_t mine = layouts().recv_blocks.bytes(me, esize);
      need(a.send, "send buffer", mine);
      need(a.recv, "recv buffer", extent);
      slot_or_apart(a.send, mine, a.recv, extent, recv_bytes + layouts().recv_blocks.offset(me, esize),
                    "send overlaps recv without being this rank's block of it (in place means "
                    "send == recv + recv_displs[rank])");
      call.count = layouts().recv_blocks.counts[static_cast<std::size_t>(me)];
      sign_counts(layouts().recv_blocks.counts);
      break;
    }
    case CollectiveKind::reduce_scatter:
      need(a.send, "send buffer", all);
      need(a.recv, "recv buffer", block);
      slot_or_apart(a.recv, block, a.send, all, send_bytes + my_block,
                    "recv overlaps send without being this rank's block of it (in place means "
                    "recv == send + rank * count)");
      break;
    case CollectiveKind::reduce_scatter_v: {
      std::size_t extent = 0;
      layout(layouts().recv_blocks, a.recv_counts, {}, "recv_counts", "", extent);
      const std::size_t mine = layouts().recv_blocks.bytes(me, esize);
      need(a.send, "send buffer", extent);
      need(a.recv, "recv buffer", mine);
      slot_or_apart(a.recv, mine, a.send, extent, send_bytes + layouts().recv_blocks.offset(me, esize),
                    "recv overlaps send without being this rank's block of it (in place means "
                    "recv == send + the counts of the ranks before this one)");
      sign_counts(layouts().recv_blocks.counts);
      call.count = static_cast<std::size_t>(signature.count);
      break;
    }
    case CollectiveKind::alltoall:
      need(a.send, "send buffer", all);
      need(a.recv, "recv buffer", all);
      if (overlaps(a.send, all, a.recv, all)) throw bad("send and recv buffers overlap");
      break;
    case CollectiveKind::alltoallv: {
      std::size_t send_extent = 0, recv_extent = 0;
      layout(layouts().send_blocks, a.send_counts, a.send_displs, "send_counts", "send_displs", send_extent);
      layout(layouts().recv_blocks, a.recv_counts, a.recv_displs, "recv_counts", "recv_displs", recv_extent);
      need(a.send, "send buffer", send_extent);
      need(a.recv, "recv buffer", recv_extent);
      if (overlaps(a.send, send_extent, a.recv, recv_extent)) throw bad("send and recv buffers overlap");
      const auto self = static_cast<std::size_t>(me);
      if (layouts().send_blocks.counts[self] != layouts().recv_blocks.counts[self])
        throw bad(fmt::format("rank {} sends itself {} elements (send_counts[{}]) but expects {} "
                              "(recv_counts[{}])",
                              me, layouts().send_blocks.counts[self], me, layouts().recv_blocks.counts[self], me));
      call.count = 0;
      for (std::size_t n : layouts().send_blocks.counts) call.count += n;
      signature.count = 0;  // counts differ per rank: checked message by message
      break;
    }
    case CollectiveKind::gather:
    case CollectiveKind::gatherv:
      need(a.send, "send buffer", block);
      if (at_root)
        root_blocks(a.recv, "recv", a.send, "send", a.recv_counts, a.recv_displs, "recv_counts",
                    "recv_displs", kind == CollectiveKind::gather ? nullptr : &layouts().recv_blocks);
      if (kind == CollectiveKind::gatherv) signature.count = 0;  // checked message by message
      break;
    case CollectiveKind::scatter:
    case CollectiveKind::scatterv:
      need(a.recv, "recv buffer", block);
      if (at_root)
        root_blocks(a.send, "send", a.recv, "recv", a.send_counts, a.send_displs, "send_counts",
                    "send_displs", kind == CollectiveKind::scatter ? nullptr : &layouts().send_blocks);
      if (kind == CollectiveKind::scatterv) signature.count = 0;  // checked message by message
      break;
    case CollectiveKind::barrier:
      break;
  }
  call.layouts = std::move(v_forms);
  call.root = rooted ? a.root : -1;
  signature.root = call.root;
  signature.datatype = static_cast<std::uint8_t>(a.type);
  signature.op = static_cast<std::uint8_t>(call.op);
}

}  // namespace chorus::core
