#!/usr/bin/env python3
"""Point-to-point latency and bandwidth of the ucx and tcp transports, each
beside its baseline measured in the same run:

  ucx  vs  ucx_perftest (tag_lat, tag_bw) between two local processes, in its
           default mode and with -e (endpoints with error handling, under the
           same UCX settings Chorus uses, which is the like-for-like case:
           Chorus needs error handling to turn a dead peer into an error)
  tcp  vs  a minimal blocking-socket ping-pong (transport_pingpong --transport
           socket), and beside it the same with polling non-blocking calls
           (socket-spin), since Chorus polls briefly before it sleeps

Each side is pinned to a core of its own (taskset), ours and the
baselines alike, so that the scheduler does not stack both on one core in
some trials and not others. Trials alternate transport and baseline; the table shows medians and the
ratio (latency: ours / baseline, lower is better; bandwidth: ours / baseline,
higher is better) against the targets of the transport issue.

  bench/transport_bench.py [--build build] [--trials 5]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TESTS = [("lat", 8, 100000), ("bw", 4 << 20, 500), ("bw", 64 << 20, 30)]
TARGETS = {"lat": 1.3, "bw": 0.9}


def pingpong(binary, transport, test, size, iters):
    store = tempfile.mkdtemp(prefix="chorus-bench-")
    env = dict(os.environ, CHORUS_SIZE="2", CHORUS_STORE="file://" + store,
               CHORUS_SOCKET_ADDR="127.0.0.1")
    cmd = [binary, "--transport", transport, "--test", test, "--size", str(size),
           "--iters", str(iters)]
    procs = [subprocess.Popen(pin(r) + cmd, env=dict(env, CHORUS_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(store, ignore_errors=True)
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {err.strip()}")
    return float(outs[0][0].split()[1])


def pin(side):
    """taskset prefix putting side 0 and side 1 on different cores."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2 or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(cores[side])]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What UcxTransport sets unless the user did (src/transport/ucx/ucx_transport.cpp).
CHORUS_UCX_ENV = {"UCX_KEEPALIVE_INTERVAL": "250ms", "UCX_POSIX_ERROR_HANDLING": "y",
                  "UCX_SYSV_ERROR_HANDLING": "y"}


def perftest(test, size, iters, error_handling=False):
    port = str(free_port())
    flags = ["-e"] if error_handling else []
    env = dict(CHORUS_UCX_ENV, **os.environ) if error_handling else None
    server = subprocess.Popen(pin(1) + ["ucx_perftest", "-p", port] + flags,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    try:
        for _ in range(100):  # until the server listens
            client = subprocess.run(
                pin(0) + ["ucx_perftest", "127.0.0.1", "-p", port, "-t", "tag_" + test, "-s", str(size),
                 "-n", str(iters), "-f"] + flags, capture_output=True, text=True, timeout=300,
                env=env)
            if client.returncode == 0:
                break
            time.sleep(0.05)
        else:
            sys.exit("ucx_perftest failed: " + client.stderr)
    finally:
        server.kill()
        server.wait()
    fields = client.stdout.strip().splitlines()[-1].split()
    # iterations, latency 50%ile/average/overall (us), bandwidth average/overall (MB/s), ...
    return float(fields[2]) if test == "lat" else float(fields[5])


def label(test, size):
    unit = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B"
    return ("latency " if test == "lat" else "bandwidth ") + unit


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "transport_pingpong")
    have_perftest = shutil.which("ucx_perftest") is not None
    print(f"# {args.trials} alternating trials each; medians. latency: one-way us (half the "
          f"round trip); bandwidth: MiB/s")
    print(f"{'transport':9} {'test':18} {'chorus':>10} {'baseline':>10}  {'ratio':>6}  "
          f"{'target':15} {'2nd base':>11} {'ratio':>6}  baseline; 2nd: ucx_perftest -e or "
          f"socket-spin")
    for transport, baseline_name in (("ucx", "ucx_perftest"), ("tcp", "blocking sockets")):
        if transport == "ucx" and not have_perftest:
            print("ucx: skipped (ucx_perftest not installed: apt-get install ucx-utils)")
            continue
        for test, size, iters in TESTS:
            ours, base, base_e = [], [], []
            for _ in range(args.trials):
                ours.append(pingpong(binary, transport, test, size, iters))
                if transport == "ucx":
                    base.append(perftest(test, size, iters))
                    base_e.append(perftest(test, size, iters, error_handling=True))
                else:
                    base.append(pingpong(binary, "socket", test, size, iters))
                    base_e.append(pingpong(binary, "socket-spin", test, size, iters))
            o, b = statistics.median(ours), statistics.median(base)
            ratio = o / b
            ok = ratio <= TARGETS[test] if test == "lat" else ratio >= TARGETS[test]
            target = ("<= " if test == "lat" else ">= ") + f"{TARGETS[test]}x " + \
                ("met" if ok else "MISSED")
            extra = f"{'':>11} {'':>6}"
            if base_e:
                be = statistics.median(base_e)
                extra = f"{be:11.3f} {o / be:5.2f}x"
            print(f"{transport:9} {label(test, size):18} {o:10.3f} {b:10.3f}  {ratio:5.2f}x  "
                  f"{target:15} {extra}  {baseline_name}", flush=True)


if __name__ == "__main__":
    main()
