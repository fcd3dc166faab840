// One rank of a multi-process transport test. The harness
// (test_multiprocess.cpp) starts one per rank with CHORUS_RANK, CHORUS_SIZE,
// CHORUS_STORE and CHORUS_TRANSPORT set, and the scenario name as argv[1].
// Exit status: 0 passed, 1 failed (the reason on stderr), 2 bad usage.
#include "bootstrap/launch.hpp"
#include "conformance.hpp"
#include "transport/tcp/tcp_transport.hpp"
#if defined(CHORUS_HAVE_UCX)
#include "transport/ucx/state.hpp"
#include "transport/ucx/ucx_transport.hpp"
#endif

#include <fmt/format.h>
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

using namespace chorus;

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness
  if (argc != 2) {
    std::fprintf(stderr, "usage: transport_worker SCENARIO\n");
    return 2;
  }
  const std::string scenario = argv[1];
  int rank = -1;
  try {
    const auto info = bootstrap::launch_info_from_env();
    rank = info.rank;
    const auto deadline = transport::deadline_after(bootstrap::timeout_seconds());
    // Rank 0 serves the store unless the harness already does.
    std::shared_ptr<bootstrap::Store> store = bootstrap::open_store(info.store, info.rank == 0, deadline);
    auto t = bootstrap::connect_transport(bootstrap::transport_kind_from_env(), info.rank,
                                          info.size, store, "test", deadline);
    if (scenario == "peer_death") {
      conformance::peer_death(*t, [] { std::raise(SIGKILL); });
    } else if (scenario == "last_message") {
      conformance::last_message_outlives_sender(*t, [] {
        std::fflush(nullptr);
        std::_Exit(0);  // leaves as a finished process does: the kernel closes its sockets
      });
    } else if (scenario == "abort_notice" || scenario == "overlong_notice_first") {
      // Rank 2 aborts; ranks 0 and 1 must fail naming its reason. In the
      // second, rank 1 first sends rank 0 a notice longer than any notice
      // receive takes (UCX only; an honest rank never does).
#if defined(CHORUS_HAVE_UCX)
      if (scenario == "overlong_notice_first" && rank == 1) {
        auto& s = dynamic_cast<transport::UcxTransport&>(*t).state();
        const std::string overlong(4 * transport::UcxTransport::State::kNoticeBytes, 'x');
        ucp_request_param_t param{};
        if (!transport::ucx::endpoint_ready(s, 0)) throw std::runtime_error("no endpoint to rank 0");
        void* r = ucp_tag_send_nbx(s.endpoints[0], overlong.data(), overlong.size(),
                                   transport::ucx::kNoticeTag | 1, &param);
        while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) t->progress();
        if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
      }
#endif
      conformance::abort_notice_names_the_reason(*t);
      if (rank != 2) store->barrier("test/done", info.size - 1, deadline);  // (2 aborted)
      return 0;
    } else if (scenario == "stray_connection") {
      // Rank 0 publishes its TCP port, waits while the harness writes garbage
      // to it, then all ranks prove they still work.
      if (rank == 0)
        store->set("test/listen",
                   bootstrap::to_bytes(dynamic_cast<transport::TcpTransport&>(*t).listen_address()),
                   deadline);
      const std::string garbage_done[] = {"test/garbage_sent"};
      while (true) {  // keep progressing so the refusal is handled as it happens
        t->progress();
        try {
          store->get(garbage_done, transport::deadline_after(0.05));
          break;
        } catch (const bootstrap::StoreTimeout&) {
        }
        if (transport::Clock::now() > deadline) throw std::runtime_error("harness never wrote");
      }
      for (int i = 0; i < 20; ++i) t->progress();
      conformance::find_scenario("sizes_small_to_large")->run(*t);
    } else if (const auto* s = conformance::find_scenario(scenario)) {
      s->run(*t);
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    // Nobody leaves (closing connections) before everyone is done; in
    // peer_death and last_message the last rank is gone already.
    const int finishing =
        scenario == "peer_death" || scenario == "last_message" ? info.size - 1 : info.size;
    store->barrier("test/done", finishing, deadline);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, e.what());
    return 1;
  }
}
