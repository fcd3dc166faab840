// chorus._chorus: Chorus's Communicator for Python programs that do not use
// torch: collectives on any object exporting the buffer protocol (numpy
// arrays, bytearray, array.array), blocking and async, in place and not.
//
// Buffers must be C-contiguous; their format gives the element type
// (numpy's float32, float64, float16, int8/16/32/64 and unsigned, bool).
// Blocking calls release the GIL while they run. An async call's Work keeps
// its buffers alive until it is waited on or dropped; the caller must not
// touch them before it completes (as with the C++ API).
#include <chorus/chorus.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

struct Buffer {
  py::buffer owner;  // keeps the exporter alive
  void* data = nullptr;
  std::size_t count = 0;
  chorus::DataType type{};
  bool readonly = false;
};

chorus::DataType datatype_of(const py::buffer_info& info, const std::string& what) {
  std::string format = info.format;
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<'))
    format = format.substr(1);
  const auto n = info.itemsize;
  if (format.size() == 1) {
    switch (format[0]) {
      case 'f': return chorus::DataType::float32;
      case 'd': return chorus::DataType::float64;
      case 'e': return chorus::DataType::float16;
      case 'b': return chorus::DataType::int8;
      case 'B':
      case '?': return chorus::DataType::uint8;
      case 'i': case 'l': case 'q': case 'h':
        if (n == 4) return chorus::DataType::int32;
        if (n == 8) return chorus::DataType::int64;
        break;
      case 'I': case 'L': case 'Q': case 'H':
        if (n == 4) return chorus::DataType::uint32;
        if (n == 8) return chorus::DataType::uint64;
        break;
      default: break;
    }
  }
  throw std::invalid_argument("chorus: " + what + ": buffers of format '" + info.format +
                              "' (item size " + std::to_string(n) +
                              ") are not supported (float16/32/64, int8/32/64, uint8/32/64, bool)");
}

Buffer buffer_of(const py::buffer& object, const std::string& what, bool writable) {
  py::buffer_info info = object.request(writable);
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected)
      throw std::invalid_argument("chorus: " + what +
                                  ": the buffer is not C-contiguous (pass numpy.ascontiguousarray(x))");
    expected *= info.shape[d];
  }
  return {object, info.ptr, static_cast<std::size_t>(info.size), datatype_of(info, what),
          info.readonly};
}

chorus::ReduceOp op_of(const std::string& name) {
  if (auto op = chorus::parse_reduce_op(name)) return *op;
  throw std::invalid_argument("chorus: unknown reduction '" + name +
                              "' (sum, prod, min, max, avg, band, bor, bxor)");
}

void same_type(const Buffer& a, const Buffer& b, const std::string& what) {
  if (a.type != b.type)
    throw std::invalid_argument("chorus: " + what + ": send is " + std::string(chorus::to_string(a.type)) +
                                " but recv is " + std::string(chorus::to_string(b.type)));
}

// An async call: the Chorus Work and the buffers it uses.
struct PyWork {
  chorus::Work work;
  std::vector<py::object> keep;
  bool wait(std::optional<double> timeout) {
    bool done;
    {
      py::gil_scoped_release release;
      done = timeout ? work.wait(std::chrono::duration<double>(*timeout)) : work.wait();
    }
    return done;
  }
};

class PyCommunicator {
 public:
  explicit PyCommunicator(chorus::Communicator c) : comm_(std::move(c)) {}
  chorus::Communicator& comm() { return comm_; }

  // call(false) runs the blocking form on this thread with the GIL released
  // (no hand-off to Chorus's worker: the latency of a small call is
  // allreduce_perf's); call(true) posts the async form, returned as a
  // PyWork that keeps `keep` alive.
  template <class Call>
  py::object run(bool async, std::vector<py::object> keep, Call&& call) {
    if (!async) {
      py::gil_scoped_release release;
      call(false);
      return py::none();
    }
    return py::cast(PyWork{call(true), std::move(keep)});
  }

 private:
  chorus::Communicator comm_;
};

chorus::Options options_of(std::optional<double> timeout, const std::string& transport,
                           const std::string& algorithms) {
  chorus::Options o;
  if (timeout) o.timeout = std::chrono::duration<double>(*timeout);
  o.transport = transport;
  o.algorithms = algorithms;
  return o;
}

// send/recv: recv None means in place (send is written).
std::pair<Buffer, Buffer> send_recv(const py::buffer& send, const std::optional<py::buffer>& recv,
                                    const std::string& what) {
  if (!recv) {
    Buffer b = buffer_of(send, what, true);
    return {b, b};
  }
  Buffer s = buffer_of(send, what, false), r = buffer_of(*recv, what, true);
  same_type(s, r, what);
  return {s, r};
}

}  // namespace

PYBIND11_MODULE(_chorus, m) {
  m.doc() = "Chorus collectives on buffer-protocol objects (numpy arrays)";
  static py::exception<chorus::Error> error_type(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const chorus::Error& e) {
      py::object instance = py::handle(error_type.ptr())(e.what());
      instance.attr("code") = std::string(chorus::to_string(e.code()));
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });
  m.attr("ANY_SOURCE") = chorus::Communicator::kAnySource;

  py::class_<PyWork>(m, "Work", "The handle of an async call; keeps its buffers alive")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Blocks until the call ends (or `timeout` seconds pass: returns False); raises its error")
      .def("test", [](const PyWork& w) { return w.work.test(); }, "Whether the call has ended")
      .def_property_readonly(
          "error",
          [](const PyWork& w) -> std::optional<std::string> {
            if (auto e = w.work.error()) return std::string(e->what());
            return std::nullopt;
          },
          "The error message, once the call has failed; None otherwise")
      .def_property_readonly("source", [](const PyWork& w) { return w.work.source(); },
                             "A receive's sender, once it has ended well; -1 otherwise");

  py::class_<PyCommunicator>(m, "Communicator")
      .def_static(
          "from_env",
          [](std::optional<double> timeout, const std::string& transport, const std::string& algorithms) {
            py::gil_scoped_release release;
            return PyCommunicator(chorus::Communicator::from_env(options_of(timeout, transport, algorithms)));
          },
          py::arg("timeout") = py::none(), py::arg("transport") = "", py::arg("algorithms") = "",
          "Rank, size and store from the environment (CHORUS_RANK/SIZE/STORE, torchrun's, "
          "Open MPI's or Slurm's variables)")
      .def_static(
          "connect",
          [](int rank, int size, const std::string& store, std::optional<double> timeout,
             const std::string& transport, const std::string& algorithms) {
            py::gil_scoped_release release;
            return PyCommunicator(chorus::Communicator::connect(
                rank, size, store, options_of(timeout, transport, algorithms)));
          },
          py::arg("rank"), py::arg("size"), py::arg("store"), py::arg("timeout") = py::none(),
          py::arg("transport") = "", py::arg("algorithms") = "",
          "This process is `rank` of `size`, meeting at `store` (tcp://host:port, file:///dir)")
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.comm().rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.comm().size(); })
      .def_property_readonly("transport",
                             [](PyCommunicator& c) { return std::string(c.comm().transport_name()); })
      .def(
          "allreduce",
          [](PyCommunicator& c, const py::buffer& send, const std::optional<py::buffer>& recv,
             const std::string& op, bool async) {
            auto [s, r] = send_recv(send, recv, "allreduce");
            if (s.count != r.count)
              throw std::invalid_argument("chorus: allreduce: send has " + std::to_string(s.count) +
                                          " elements but recv has " + std::to_string(r.count));
            const auto reduce = op_of(op);
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().allreduce_async(s.data, r.data, s.count, s.type, reduce)
                              : (c.comm().allreduce(s.data, r.data, s.count, s.type, reduce), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum",
          py::arg("async_op") = false, "recv = op over all ranks of send (in place when recv is None)")
      .def(
          "broadcast",
          [](PyCommunicator& c, const py::buffer& buffer, int root, bool async) {
            Buffer b = buffer_of(buffer, "broadcast", true);
            return c.run(async, {b.owner}, [&, b = b](bool async_op) {
              return async_op ? c.comm().broadcast_async(b.data, b.count, b.type, root)
                              : (c.comm().broadcast(b.data, b.count, b.type, root), chorus::Work());
            });
          },
          py::arg("buffer"), py::arg("root") = 0, py::arg("async_op") = false)
      .def(
          "reduce",
          [](PyCommunicator& c, const py::buffer& send, const std::optional<py::buffer>& recv,
             const std::string& op, int root, bool async) {
            auto [s, r] = send_recv(send, recv, "reduce");
            const auto reduce = op_of(op);
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().reduce_async(s.data, r.data, s.count, s.type, reduce, root)
                              : (c.comm().reduce(s.data, r.data, s.count, s.type, reduce, root), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum", py::arg("root") = 0,
          py::arg("async_op") = false, "recv at root = op over all ranks of send")
      .def(
          "allgather",
          [](PyCommunicator& c, const py::buffer& send, const py::buffer& recv, bool async) {
            Buffer s = buffer_of(send, "allgather", false), r = buffer_of(recv, "allgather", true);
            same_type(s, r, "allgather");
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().allgather_async(s.data, r.data, s.count, s.type)
                              : (c.comm().allgather(s.data, r.data, s.count, s.type), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("async_op") = false,
          "recv (size blocks of len(send)) gets rank j's send in block j")
      .def(
          "reduce_scatter",
          [](PyCommunicator& c, const py::buffer& send, const py::buffer& recv,
             const std::string& op, bool async) {
            Buffer s = buffer_of(send, "reduce_scatter", false),
                   r = buffer_of(recv, "reduce_scatter", true);
            same_type(s, r, "reduce_scatter");
            const auto reduce = op_of(op);
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().reduce_scatter_async(s.data, r.data, r.count, s.type, reduce)
                              : (c.comm().reduce_scatter(s.data, r.data, r.count, s.type, reduce), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("async_op") = false,
          "recv gets block `rank` of send reduced over all ranks")
      .def(
          "alltoall",
          [](PyCommunicator& c, const py::buffer& send, const py::buffer& recv, bool async) {
            Buffer s = buffer_of(send, "alltoall", false), r = buffer_of(recv, "alltoall", true);
            same_type(s, r, "alltoall");
            const auto size = static_cast<std::size_t>(c.comm().size());
            if (s.count % size != 0 || r.count != s.count)
              throw std::invalid_argument(
                  "chorus: alltoall: send has " + std::to_string(s.count) + " and recv " +
                  std::to_string(r.count) + " elements; both need the same count, a multiple of " +
                  std::to_string(size) + " ranks");
            const std::size_t block = s.count / size;
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().alltoall_async(s.data, r.data, block, s.type)
                              : (c.comm().alltoall(s.data, r.data, block, s.type), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("async_op") = false,
          "Block j of send goes to rank j, into block `rank` of its recv")
      .def(
          "gather",
          [](PyCommunicator& c, const py::buffer& send, const std::optional<py::buffer>& recv,
             int root, bool async) {
            Buffer s = buffer_of(send, "gather", false);
            Buffer r = recv ? buffer_of(*recv, "gather", true) : Buffer{};
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().gather_async(s.data, r.data, s.count, s.type, root)
                              : (c.comm().gather(s.data, r.data, s.count, s.type, root), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0,
          py::arg("async_op") = false, "The root's recv gets rank j's send in block j")
      .def(
          "scatter",
          [](PyCommunicator& c, const std::optional<py::buffer>& send, const py::buffer& recv,
             int root, bool async) {
            Buffer r = buffer_of(recv, "scatter", true);
            Buffer s = send ? buffer_of(*send, "scatter", false) : Buffer{};
            return c.run(async, {s.owner, r.owner}, [&, s = s, r = r](bool async_op) {
              return async_op ? c.comm().scatter_async(s.data, r.data, r.count, r.type, root)
                              : (c.comm().scatter(s.data, r.data, r.count, r.type, root), chorus::Work());
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("root") = 0, py::arg("async_op") = false,
          "Block j of the root's send goes to rank j's recv")
      .def(
          "barrier",
          [](PyCommunicator& c, bool async) {
            return c.run(async, {}, [&](bool async_op) {
              return async_op ? c.comm().barrier_async()
                              : (c.comm().barrier(), chorus::Work());
            });
          },
          py::arg("async_op") = false)
      .def(
          "send",
          [](PyCommunicator& c, const py::buffer& buffer, int peer, std::uint32_t tag, bool async) {
            Buffer b = buffer_of(buffer, "send", false);
            return c.run(async, {b.owner}, [&, b = b](bool async_op) {
              return async_op ? c.comm().send_async(b.data, b.count, b.type, peer, tag)
                              : (c.comm().send(b.data, b.count, b.type, peer, tag), chorus::Work());
            });
          },
          py::arg("buffer"), py::arg("peer"), py::arg("tag") = 0, py::arg("async_op") = false)
      .def(
          "recv",
          [](PyCommunicator& c, const py::buffer& buffer, int peer, std::uint32_t tag,
             bool async) -> py::object {
            Buffer b = buffer_of(buffer, "recv", true);
            if (async)
              return py::cast(PyWork{c.comm().recv_async(b.data, b.count, b.type, peer, tag), {b.owner}});
            int source;
            {
              py::gil_scoped_release release;
              source = c.comm().recv(b.data, b.count, b.type, peer, tag);
            }
            return py::int_(source);
          },
          py::arg("buffer"), py::arg("peer") = chorus::Communicator::kAnySource,
          py::arg("tag") = 0, py::arg("async_op") = false,
          "Receives into buffer; returns the sender's rank (a Work when async)")
      .def("abort", [](PyCommunicator& c, const std::string& reason) { c.comm().abort(reason); },
           py::arg("reason") = "aborted by the application");
}
