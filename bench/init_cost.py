#!/usr/bin/env python3
"""What it costs to bring up a group of p local ranks: from rank 0's start to
every rank connected (store round trips plus transport connection set-up),
for the tcp and ucx transports, p = 2..16. Median of --trials runs.

  bench/init_cost.py [--build build] [--trials 3]
"""
import argparse
import os
import statistics
import subprocess
import sys


def run(binary, store_server, transport, p):
    server = subprocess.Popen([store_server, "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        env = dict(os.environ, CHORUS_SIZE=str(p), CHORUS_STORE=url,
                   CHORUS_SOCKET_ADDR="127.0.0.1")
        procs = [subprocess.Popen([binary, "--transport", transport, "--test", "init"],
                                  env=dict(env, CHORUS_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(p)]
        outs = [q.communicate(timeout=120) for q in procs]
        for q, (out, err) in zip(procs, outs):
            if q.returncode != 0:
                sys.exit(f"rank failed: {err}")
        return float(outs[0][0].split()[1])
    finally:
        server.terminate()
        server.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "transport_pingpong")
    store = os.path.join(args.build, "bin", "chorus_store_server")
    print(f"# init time, ms (median of {args.trials}); includes process start-up skew")
    print(f"{'p':>3} {'tcp':>8} {'ucx':>8}")
    for p in (2, 4, 8, 16):
        row = [statistics.median(run(binary, store, t, p) for _ in range(args.trials))
               for t in ("tcp", "ucx")]
        print(f"{p:>3} {row[0]:8.1f} {row[1]:8.1f}", flush=True)


if __name__ == "__main__":
    main()
