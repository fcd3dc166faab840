// chorus._torch: a c10d ProcessGroup over a Chorus Communicator, the
// torch.distributed backend "chorus" (registered by python/chorus/torch.py).
//
// Every operation posts one async Chorus collective and returns a Work
// whose Future is completed by Chorus's worker thread when the collective
// ends (as Gloo's worker does), so DDP's reducer and communication hooks
// run unchanged. Tensors that Chorus cannot use in place (non-contiguous,
// lists of tensors) go through a contiguous copy, copied back before the
// Work completes. Errors at posting (a wrong device, dtype or op) throw at
// once; errors of the collective (a dead peer, mismatched calls) end the
// Work with an exception that Python sees as RuntimeError.
//
// Rendezvous: the Chorus communicator is bootstrapped through torch's store
// (Communicator::connect with an all-gather over store keys), so there is
// no second store. A subgroup (new_group) gets its own prefixed store from
// torch and connects through it: torch calls the creator on the subgroup's
// members only, so a Chorus split of the world (collective over every rank)
// cannot be used here.
#include <chorus/chorus.hpp>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace chorus_torch {

using c10d::OpType;

std::string backend_error(const std::string& what, const std::string& why) {
  return "chorus backend: " + what + ": " + why;
}

// Chorus's element type of a tensor; bool travels as uint8 (0 or 1).
chorus::DataType datatype_of(const at::Tensor& t, const std::string& what) {
  switch (t.scalar_type()) {
    case at::kFloat: return chorus::DataType::float32;
    case at::kDouble: return chorus::DataType::float64;
    case at::kHalf: return chorus::DataType::float16;
    case at::kBFloat16: return chorus::DataType::bfloat16;
    case at::kChar: return chorus::DataType::int8;
    case at::kByte: return chorus::DataType::uint8;
    case at::kBool: return chorus::DataType::uint8;
    case at::kInt: return chorus::DataType::int32;
    case at::kLong: return chorus::DataType::int64;
    default:
      throw std::invalid_argument(backend_error(
          what, std::string("tensors of dtype ") + c10::toString(t.scalar_type()) +
                    " are not supported (float32, float64, float16, bfloat16, int8, uint8, "
                    "int32, int64 and bool are)"));
  }
}

void check_tensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) throw std::invalid_argument(backend_error(what, "an undefined tensor"));
  if (!t.device().is_cpu())
    throw std::invalid_argument(backend_error(
        what, "got a tensor on " + t.device().str() +
                  "; Chorus works on CPU tensors only (move it with .cpu())"));
  if (t.is_sparse()) throw std::invalid_argument(backend_error(what, "sparse tensors are not supported"));
  datatype_of(t, what);
}

void check_single(const std::vector<at::Tensor>& tensors, const std::string& what) {
  if (tensors.size() != 1)
    throw std::invalid_argument(backend_error(
        what, "expects one tensor per rank, got " + std::to_string(tensors.size())));
  check_tensor(tensors[0], what);
}

void check_same(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  check_tensor(b, what);
  if (a.scalar_type() != b.scalar_type())
    throw std::invalid_argument(backend_error(what, std::string("tensors of dtypes ") +
                                                        c10::toString(a.scalar_type()) + " and " +
                                                        c10::toString(b.scalar_type()) + " mixed"));
  if (a.numel() != b.numel())
    throw std::invalid_argument(backend_error(
        what, "tensors of " + std::to_string(a.numel()) + " and " + std::to_string(b.numel()) +
                  " elements where their sizes must match"));
}

// The reduction a torch ReduceOp asks for on `t`; PREMUL_SUM scales a copy
// of the input first (see premultiplied).
chorus::ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const std::string& what) {
  const bool is_bool = t.scalar_type() == at::kBool;
  const bool is_float = at::isFloatingType(t.scalar_type());
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return is_bool ? chorus::ReduceOp::max : chorus::ReduceOp::sum;  // bool: logical or
    case c10d::ReduceOp::AVG:
      if (!is_float)
        throw std::invalid_argument(backend_error(
            what, std::string("ReduceOp.AVG needs a floating-point tensor, got ") +
                      c10::toString(t.scalar_type()) + " (sum and divide instead)"));
      return chorus::ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? chorus::ReduceOp::min : chorus::ReduceOp::prod;  // bool: logical and
    case c10d::ReduceOp::MIN: return chorus::ReduceOp::min;
    case c10d::ReduceOp::MAX: return chorus::ReduceOp::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (is_float)
        throw std::invalid_argument(backend_error(
            what, std::string("bitwise ReduceOps need an integer or bool tensor, got ") +
                      c10::toString(t.scalar_type())));
      return op.op_ == c10d::ReduceOp::BAND  ? chorus::ReduceOp::band
             : op.op_ == c10d::ReduceOp::BOR ? chorus::ReduceOp::bor
                                             : chorus::ReduceOp::bxor;
    default:
      throw std::invalid_argument(backend_error(what, "unknown ReduceOp " + std::to_string(op.op_)));
  }
}

// PREMUL_SUM's factor (dist._make_nccl_premul_sum's); an op without one is
// refused rather than summed unscaled.
double premul_factor(const c10d::ReduceOp& op, const std::string& what) {
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (s == nullptr)
    throw std::invalid_argument(backend_error(what, "ReduceOp.PREMUL_SUM arrived without its factor"));
  return s->tensor_factors.empty() ? s->double_factor : s->tensor_factors[0].item<double>();
}

// A tensor as Chorus sees it: `buffer` is contiguous and of Chorus's dtype;
// when it is a copy, copy_back() writes it into the caller's tensor.
struct Operand {
  at::Tensor original;
  at::Tensor buffer;
  static Operand of(const at::Tensor& t) { return {t, t.is_contiguous() ? t : t.contiguous()}; }
  void copy_back() const {
    if (!original.is_same(buffer)) original.copy_(buffer);
  }
  void* data() const { return buffer.data_ptr(); }
  std::size_t count() const { return static_cast<std::size_t>(buffer.numel()); }
};

class ChorusWork : public c10d::Work {
 public:
  ChorusWork(int rank, OpType type, std::string what, std::vector<at::Tensor> outputs)
      : Work(rank, type), what_(std::move(what)), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(tensor_list_type())) {}

  // Completes this Work (and its Future) when `work` ends, after `after`
  // (the copies back into the caller's tensors) when it ended well. `after`
  // also holds every tensor the collective reads or writes (the lambdas
  // capture them even where they do not use them), so none is freed while
  // Chorus still uses it.
  static c10::intrusive_ptr<c10d::Work> attach(c10::intrusive_ptr<ChorusWork> self,
                                               chorus::Work work, std::function<void()> after) {
    self->work_ = std::make_shared<chorus::Work>(std::move(work));
    std::weak_ptr<chorus::Work> handle = self->work_;
    self->work_->on_complete([self, handle, after = std::move(after)] {
      const auto work = handle.lock();
      std::exception_ptr failure;
      if (auto error = work->error()) {
        failure = std::make_exception_ptr(std::runtime_error(
            "chorus backend: " + self->what_ + " failed: " + std::string(error->what())));
      } else {
        self->source_ = work->source();
        try {
          if (after) after();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      if (failure)
        self->future_->setError(failure);
      else
        self->future_->markCompleted(c10::IValue(self->outputs_));
      self->finish(failure);
    });
    return self;
  }

  static const c10::TypePtr& tensor_list_type() {
    static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
    return type;
  }

  int sourceRank() const override { return source_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
  std::shared_ptr<chorus::Work> work_;
  int source_ = -1;
};

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  // Allreduces up to this size run on the caller's thread (reduce_into).
  static constexpr std::size_t kInlineBytes = 16 << 10;

  ProcessGroupChorus(chorus::Communicator comm)
      : ProcessGroup(comm.rank(), comm.size()), comm_(std::move(comm)) {
    init();
  }

  const std::string getBackendName() const override { return "chorus"; }
  chorus::Communicator& communicator() { return comm_; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    check_single(tensors, "allreduce");
    return reduce_into("allreduce", OpType::ALLREDUCE, tensors[0], opts.reduceOp, -1);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    const std::string what = "allreduce_coalesced";
    if (tensors.empty()) throw std::invalid_argument(backend_error(what, "no tensors"));
    for (const auto& t : tensors) {
      check_tensor(t, what);
      if (t.scalar_type() != tensors[0].scalar_type())
        throw std::invalid_argument(backend_error(what, "tensors of different dtypes"));
    }
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : tensors) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    const chorus::ReduceOp op = reduce_op_of(opts.reduceOp, flat, what);
    flat = premultiplied(opts.reduceOp, flat, what);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::ALLREDUCE, what, tensors);
    return ChorusWork::attach(work,
                              comm_.allreduce_async(flat.data_ptr(), flat.data_ptr(),
                                                    static_cast<std::size_t>(flat.numel()),
                                                    datatype_of(flat, what), op),
                              [flat, tensors] {
                                std::int64_t offset = 0;
                                for (const auto& t : tensors) {
                                  t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
                                  offset += t.numel();
                                }
                              });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    check_single(tensors, "reduce");
    check_root(opts.rootRank, "reduce");
    return reduce_into("reduce", OpType::REDUCE, tensors[0], opts.reduceOp,
                       static_cast<int>(opts.rootRank));
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    check_single(tensors, "broadcast");
    check_root(opts.rootRank, "broadcast");
    const Operand t = Operand::of(tensors[0]);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::BROADCAST, "broadcast", tensors);
    return ChorusWork::attach(
        work,
        comm_.broadcast_async(t.data(), t.count(), datatype_of(t.buffer, "broadcast"),
                              static_cast<int>(opts.rootRank)),
        [t] { t.copy_back(); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    const std::string what = "allgather";
    check_single(inputs, what);
    check_list(outputs, inputs[0], what);
    const Operand in = Operand::of(inputs[0]);
    at::Tensor flat = at::empty({size_ * inputs[0].numel()}, inputs[0].options());
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::ALLGATHER, what, outputs[0]);
    auto list = outputs[0];
    return ChorusWork::attach(
        work,
        comm_.allgather_async(in.data(), flat.data_ptr(), in.count(), datatype_of(flat, what)),
        [in, flat, list] { unpack(flat, list); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    const std::string what = "_allgather_base";
    check_tensor(input, what);
    check_tensor(output, what);
    check_blocks(output, input, what);
    const Operand in = Operand::of(input), out = Operand::of(output);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::_ALLGATHER_BASE, what,
                                                std::vector<at::Tensor>{output});
    return ChorusWork::attach(
        work, comm_.allgather_async(in.data(), out.data(), in.count(), datatype_of(input, what)),
        [in, out] { out.copy_back(); });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const std::string what = "gather";
    check_single(inputs, what);
    check_root(opts.rootRank, what);
    const int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> list;
    if (rank_ == root) {
      check_list(outputs, inputs[0], what);
      list = outputs[0];
    } else if (!outputs.empty() && !outputs[0].empty()) {
      throw std::invalid_argument(backend_error(what, "only the root passes output tensors"));
    }
    const Operand in = Operand::of(inputs[0]);
    at::Tensor flat =
        rank_ == root ? at::empty({size_ * inputs[0].numel()}, inputs[0].options()) : at::Tensor();
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::GATHER, what, list);
    return ChorusWork::attach(
        work,
        comm_.gather_async(in.data(), flat.defined() ? flat.data_ptr() : nullptr, in.count(),
                           datatype_of(inputs[0], what), root),
        [in, flat, list] {
          if (flat.defined()) unpack(flat, list);
        });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const std::string what = "scatter";
    check_single(outputs, what);
    check_root(opts.rootRank, what);
    const int root = static_cast<int>(opts.rootRank);
    at::Tensor flat;
    if (rank_ == root) {
      check_list(inputs, outputs[0], what);
      flat = pack(inputs[0]);
    } else if (!inputs.empty() && !inputs[0].empty()) {
      throw std::invalid_argument(backend_error(what, "only the root passes input tensors"));
    }
    const Operand out = Operand::of(outputs[0]);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::SCATTER, what, outputs);
    return ChorusWork::attach(
        work,
        comm_.scatter_async(flat.defined() ? flat.data_ptr() : nullptr, out.data(), out.count(),
                            datatype_of(outputs[0], what), root),
        [flat, out] { out.copy_back(); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const std::string what = "reduce_scatter";
    check_single(outputs, what);
    check_list(inputs, outputs[0], what);
    at::Tensor flat = pack(inputs[0]);
    return scatter_reduced(what, OpType::REDUCE_SCATTER, flat, outputs[0], opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    const std::string what = "_reduce_scatter_base";
    check_tensor(input, what);
    check_tensor(output, what);
    check_blocks(input, output, what);
    // Chorus leaves an out-of-place send as it was: the input is used as is.
    return scatter_reduced(what, OpType::_REDUCE_SCATTER_BASE, input.contiguous(), output,
                           opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override {
    const std::string what = "alltoall_base";
    check_tensor(input, what);
    check_tensor(output, what);
    if (input.scalar_type() != output.scalar_type())
      throw std::invalid_argument(backend_error(what, "input and output dtypes differ"));
    const Operand in = Operand::of(input), out = Operand::of(output);
    const chorus::DataType type = datatype_of(input, what);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::ALLTOALL_BASE, what,
                                                std::vector<at::Tensor>{output});
    if (output_splits.empty() && input_splits.empty()) {
      if (input.numel() != output.numel() || input.numel() % size_ != 0)
        throw std::invalid_argument(backend_error(
            what, "without split sizes, input and output need the same number of elements, "
                  "divisible by the group size " + std::to_string(size_) + " (got " +
                      std::to_string(input.numel()) + " and " + std::to_string(output.numel()) + ")"));
      return ChorusWork::attach(
          work,
          comm_.alltoall_async(in.data(), out.data(), in.count() / static_cast<std::size_t>(size_), type),
          [in, out] { out.copy_back(); });
    }
    auto [send_counts, send_displs] = split_counts(input, input_splits, what + " input");
    auto [recv_counts, recv_displs] = split_counts(output, output_splits, what + " output");
    return ChorusWork::attach(work,
                              comm_.alltoallv_async(in.data(), send_counts, send_displs,
                                                    out.data(), recv_counts, recv_displs, type),
                              [in, out] { out.copy_back(); });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    const std::string what = "alltoall";
    if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
      throw std::invalid_argument(backend_error(
          what, "needs " + std::to_string(size_) + " input and output tensors, got " +
                    std::to_string(inputs.size()) + " and " + std::to_string(outputs.size())));
    std::vector<std::size_t> send_counts, recv_counts;
    for (int j = 0; j < size_; ++j) {
      check_tensor(inputs[j], what);
      check_tensor(outputs[j], what);
      if (inputs[j].scalar_type() != inputs[0].scalar_type() ||
          outputs[j].scalar_type() != inputs[0].scalar_type())
        throw std::invalid_argument(backend_error(what, "tensors of different dtypes"));
      send_counts.push_back(static_cast<std::size_t>(inputs[j].numel()));
      recv_counts.push_back(static_cast<std::size_t>(outputs[j].numel()));
    }
    at::Tensor send = pack(inputs);
    at::Tensor recv = at::empty({static_cast<int64_t>(sum(recv_counts))}, inputs[0].options());
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::ALLTOALL, what, outputs);
    return ChorusWork::attach(
        work,
        comm_.alltoallv_async(send.data_ptr(), send_counts, {}, recv.data_ptr(), recv_counts, {},
                              datatype_of(inputs[0], what)),
        [send, recv, outputs] { unpack(recv, outputs); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::BARRIER, "barrier",
                                                std::vector<at::Tensor>{});
    return ChorusWork::attach(work, comm_.barrier_async(), nullptr);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override {
    const std::string what = "send to rank " + std::to_string(dst);
    check_single(tensors, what);
    check_tag(tag, what);
    const Operand t = Operand::of(tensors[0]);
    auto work = c10::make_intrusive<ChorusWork>(rank_, OpType::SEND, what, tensors);
    return ChorusWork::attach(
        work,
        comm_.send_async(t.data(), t.count(), datatype_of(t.buffer, what), dst,
                         static_cast<std::uint32_t>(tag)),
        [t] {});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override {
    return receive(tensors, src, tag, "receive from rank " + std::to_string(src), OpType::RECV);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    return receive(tensors, chorus::Communicator::kAnySource, tag, "receive from any rank",
                   OpType::RECVANYSOURCE);
  }

 private:
  c10::intrusive_ptr<c10d::Work> receive(std::vector<at::Tensor>& tensors, int src, int tag,
                                         const std::string& what, OpType type) {
    check_single(tensors, what);
    check_tag(tag, what);
    const Operand t = Operand::of(tensors[0]);
    auto work = c10::make_intrusive<ChorusWork>(rank_, type, what, tensors);
    return ChorusWork::attach(work,
                              comm_.recv_async(t.data(), t.count(), datatype_of(t.buffer, what),
                                               src, static_cast<std::uint32_t>(tag)),
                              [t] { t.copy_back(); });
  }

  // allreduce (root < 0) or reduce to `root`, in place in `tensor`.
  c10::intrusive_ptr<c10d::Work> reduce_into(const std::string& what, OpType type,
                                             at::Tensor& tensor, const c10d::ReduceOp& reduce_op,
                                             int root) {
    const chorus::ReduceOp op = reduce_op_of(reduce_op, tensor, what);
    Operand t = Operand::of(tensor);
    t.buffer = premultiplied(reduce_op, t.buffer, what);
    const chorus::DataType dtype = datatype_of(tensor, what);
    auto work = c10::make_intrusive<ChorusWork>(rank_, type, what, std::vector<at::Tensor>{tensor});
    chorus::Work posted;  // empty: already ended
    if (root < 0 && t.count() * chorus::size_of(dtype) <= kInlineBytes) {
      // Small: run on this thread (in call order, after what is queued).
      // Handing a call to Chorus's worker and back costs more than the
      // collective itself, and there is nothing worth overlapping.
      try {
        comm_.allreduce(t.data(), t.data(), t.count(), dtype, op);
      } catch (const chorus::Error& e) {
        throw std::runtime_error("chorus backend: " + what + " failed: " + e.what());
      }
    } else {
      posted = root < 0 ? comm_.allreduce_async(t.data(), t.data(), t.count(), dtype, op)
                        : comm_.reduce_async(t.data(), rank_ == root ? t.data() : nullptr,
                                             t.count(), dtype, op, root);
    }
    const bool writes = root < 0 || rank_ == root;
    return ChorusWork::attach(work, std::move(posted), [t, writes] {
      if (writes) t.copy_back();
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter_reduced(const std::string& what, OpType type,
                                                 at::Tensor flat, at::Tensor& output,
                                                 const c10d::ReduceOp& reduce_op) {
    const chorus::ReduceOp op = reduce_op_of(reduce_op, flat, what);
    flat = premultiplied(reduce_op, flat, what);
    const Operand out = Operand::of(output);
    auto work = c10::make_intrusive<ChorusWork>(rank_, type, what, std::vector<at::Tensor>{output});
    return ChorusWork::attach(
        work,
        comm_.reduce_scatter_async(flat.data_ptr(), out.data(), out.count(),
                                   datatype_of(output, what), op),
        [flat, out] { out.copy_back(); });
  }

  // What this rank contributes: `buffer` itself, or for PREMUL_SUM a new
  // tensor of it times the factor (so the caller's data changes only when
  // the result is written back).
  static at::Tensor premultiplied(const c10d::ReduceOp& op, const at::Tensor& buffer,
                                  const std::string& what) {
    return op.op_ == c10d::ReduceOp::PREMUL_SUM ? buffer * premul_factor(op, what) : buffer;
  }

  void check_root(int64_t root, const std::string& what) const {
    if (root < 0 || root >= size_)
      throw std::invalid_argument(backend_error(
          what, "root " + std::to_string(root) + " is not a rank of this group of " +
                    std::to_string(size_)));
  }

  static void check_tag(int tag, const std::string& what) {
    if (tag < 0)
      throw std::invalid_argument(backend_error(what, "tag " + std::to_string(tag) + " is negative"));
  }

  // outputs/inputs hold one list of size() tensors, each like `like`.
  void check_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                  const std::string& what) const {
    if (lists.size() != 1 || static_cast<int>(lists[0].size()) != size_)
      throw std::invalid_argument(backend_error(
          what, "needs one list of " + std::to_string(size_) + " tensors (the group size)"));
    for (const auto& t : lists[0]) check_same(like, t, what);
  }

  // `big` holds size() blocks of `block`.
  void check_blocks(const at::Tensor& big, const at::Tensor& block, const std::string& what) const {
    if (big.scalar_type() != block.scalar_type())
      throw std::invalid_argument(backend_error(what, "input and output dtypes differ"));
    if (big.numel() != block.numel() * size_)
      throw std::invalid_argument(backend_error(
          what, "the large tensor has " + std::to_string(big.numel()) + " elements, not " +
                    std::to_string(size_) + " x " + std::to_string(block.numel())));
  }

  // Element counts and offsets of `t`'s blocks along dim 0 by `splits`.
  std::pair<std::vector<std::size_t>, std::vector<std::size_t>> split_counts(
      const at::Tensor& t, const std::vector<int64_t>& splits, const std::string& what) const {
    const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    const int64_t row = rows > 0 ? t.numel() / rows : 0;
    std::vector<std::size_t> counts, displs;
    if (splits.empty()) {
      if (rows % size_ != 0)
        throw std::invalid_argument(backend_error(
            what, std::to_string(rows) + " rows do not split evenly over " + std::to_string(size_) + " ranks"));
      for (int j = 0; j < size_; ++j) counts.push_back(static_cast<std::size_t>(rows / size_ * row));
    } else {
      if (static_cast<int>(splits.size()) != size_)
        throw std::invalid_argument(backend_error(
            what, std::to_string(splits.size()) + " split sizes for a group of " + std::to_string(size_)));
      int64_t total = 0;
      for (int64_t s : splits) {
        if (s < 0) throw std::invalid_argument(backend_error(what, "a negative split size"));
        counts.push_back(static_cast<std::size_t>(s * row));
        total += s;
      }
      if (total != rows)
        throw std::invalid_argument(backend_error(
            what, "split sizes add up to " + std::to_string(total) + ", the tensor has " +
                      std::to_string(rows) + " rows"));
    }
    std::size_t offset = 0;
    for (std::size_t c : counts) {
      displs.push_back(offset);
      offset += c;
    }
    return {counts, displs};
  }

  static std::size_t sum(const std::vector<std::size_t>& v) {
    std::size_t s = 0;
    for (auto x : v) s += x;
    return s;
  }

  static at::Tensor pack(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    return at::cat(flat);
  }

  static void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
    std::int64_t offset = 0;
    for (const auto& t : tensors) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }

  chorus::Communicator comm_;
};

// Torch's store as Communicator::connect's key-value store (torch gives each
// process group a store of its own, under its own prefix). TCPStore's calls
// are serialized inside it, so Chorus's thread may use it beside torch's.
chorus::Communicator::KeyValueStore key_value_store(c10::intrusive_ptr<c10d::Store> store) {
  chorus::Communicator::KeyValueStore kv;
  kv.set = [store](const std::string& key, std::span<const std::byte> value) {
    const auto* begin = reinterpret_cast<const std::uint8_t*>(value.data());
    store->set(key, std::vector<std::uint8_t>(begin, begin + value.size()));
  };
  kv.get = [store](const std::string& key, std::chrono::milliseconds timeout) {
    store->wait({key}, timeout);
    const std::vector<std::uint8_t> value = store->get(key);
    const auto* begin = reinterpret_cast<const std::byte*>(value.data());
    return std::vector<std::byte>(begin, begin + value.size());
  };
  kv.add = [store](const std::string& key, std::int64_t delta) { return store->add(key, delta); };
  kv.has = [store](const std::string& key) { return store->check({key}); };
  return kv;
}

c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::duration<float> timeout) {
  chorus::Options options;
  // Torch's timeout bounds every wait, as it does Gloo's.
  options.timeout = std::chrono::duration<double>(timeout.count());
  chorus::Communicator comm =
      chorus::Communicator::connect(rank, size, key_value_store(store), options);
  return c10::make_intrusive<ProcessGroupChorus>(std::move(comm));
}

}  // namespace chorus_torch

PYBIND11_MODULE(_torch, m) {
  m.doc() = "Chorus as a torch.distributed backend (import chorus.torch to register it)";
  m.def("create_process_group", &chorus_torch::create_process_group, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "A ProcessGroup of backend 'chorus' over torch's store (what "
        "dist.Backend.register_backend calls)");
  m.def(
      "transport_name",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        auto* chorus_pg = dynamic_cast<chorus_torch::ProcessGroupChorus*>(pg.get());
        if (chorus_pg == nullptr) throw std::invalid_argument("not a chorus process group");
        return std::string(chorus_pg->communicator().transport_name());
      },
      "The transport ('ucx', 'tcp') a chorus process group runs over");
}
