#!/usr/bin/env python3
"""Gloo against Chorus inside PyTorch, in the same processes, alternating.

Every rank holds a Gloo world and a Chorus group (dist.new_group) side by
side; each measurement alternates the two backends round by round and
reports medians, and the ratio chorus/gloo from the same run.

  allreduce: dist.all_reduce of float32 tensors from 8 B to 80 MiB: time
             per call and bus bandwidth (nccl-tests' busbw, 2(p-1)/p * bytes / t).
  ddp:       DistributedDataParallel training of a ~21 M-parameter MLP,
             batch 1 (communication-bound): step time; the time of one pure
             all_reduce of all gradients (one flat tensor); and whether the
             parameters end identical on every rank and between backends.
  overhead:  an 8-byte all_reduce through torch (dist.all_reduce) and
             through chorus's numpy module: compare with
             allreduce_perf --np P -b 8 -e 8 at the same p.

  /usr/bin/python3 bench/ddp_bench.py --np 2 [--mode all] [--rounds 5]
(PYTHONPATH must reach the chorus package: build/python in a build tree.)
"""
import argparse
import os
import socket
import statistics
import sys
import time

try:
    import torch
except ImportError:  # `python3` on PATH may not see Debian's packages: run under Debian's
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    raise
import numpy as np
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import chorus.torch  # noqa: F401 - registers "chorus"

SIZES = [8, 1024, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 80 << 20]


def busbw(nbytes, seconds, p):
    return 2 * (p - 1) / p * nbytes / seconds / 1e9


def timed(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def alternate(rounds, groups, measure):
    """{name: [one value per round]}, gloo and chorus alternating."""
    values = {name: [] for name in groups}
    for r in range(rounds):
        order = list(groups.items()) if r % 2 == 0 else list(reversed(groups.items()))
        for name, group in order:
            dist.barrier(group=groups["gloo"])
            values[name].append(measure(name, group))
    return values


def allreduce_sweep(rank, size, groups, args):
    rows = []
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4))
        iters = max(3, min(2000, int(2e8 // max(nbytes, 1) // 100)))

        def measure(name, group):
            dist.all_reduce(t, group=group)  # warm
            return timed(lambda: dist.all_reduce(t, group=group), iters)

        v = alternate(args.rounds, groups, measure)
        g, c = statistics.median(v["gloo"]), statistics.median(v["chorus"])
        rows.append((nbytes, g, c))
    if rank == 0:
        print(f"\n# all_reduce float32 sum inside PyTorch, p = {size}, medians of {args.rounds} "
              "alternating rounds")
        print(f"{'bytes':>10} {'gloo us':>10} {'chorus us':>10} {'gloo busbw':>11} "
              f"{'chorus busbw':>13} {'chorus/gloo time':>17}")
        for nbytes, g, c in rows:
            print(f"{nbytes:>10} {g * 1e6:>10.1f} {c * 1e6:>10.1f} {busbw(nbytes, g, size):>11.3f} "
                  f"{busbw(nbytes, c, size):>13.3f} {c / g:>17.3f}")


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 10))


def ddp_training(rank, size, groups, args):
    models = {name: nn.parallel.DistributedDataParallel(make_model(), process_group=group)
              for name, group in groups.items()}
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}
    data = {name: torch.Generator().manual_seed(1000 + rank) for name in groups}

    def step(name):
        x = torch.randn(1, 1024, generator=data[name])
        y = torch.randint(0, 10, (1,), generator=data[name])
        loss = nn.functional.cross_entropy(models[name](x), y)
        optimizers[name].zero_grad()
        loss.backward()
        optimizers[name].step()

    for name in groups:  # warm: buckets built, buffers allocated
        step(name)
    steps = alternate(args.rounds, groups, lambda name, group: timed(lambda: step(name), args.steps))
    params = sum(p.numel() for p in models["gloo"].parameters())
    flat = torch.ones(params)
    grads = alternate(args.rounds, groups,
                      lambda name, group: timed(lambda: dist.all_reduce(flat, group=group), 2))
    # identical parameters: across ranks (per backend) and between backends
    vectors = {name: torch.cat([p.detach().reshape(-1) for p in m.parameters()])
               for name, m in models.items()}
    same_across = {}
    for name, v in vectors.items():
        everyone = [torch.empty_like(v) for _ in range(size)]
        dist.all_gather(everyone, v, group=groups["gloo"])
        same_across[name] = all(torch.equal(everyone[0], e) for e in everyone)
    same_between = torch.equal(vectors["gloo"], vectors["chorus"])
    if rank == 0:
        g, c = statistics.median(steps["gloo"]), statistics.median(steps["chorus"])
        ga, ca = statistics.median(grads["gloo"]), statistics.median(grads["chorus"])
        print(f"\n# DDP, {params / 1e6:.1f} M parameters ({params * 4 / 2**20:.0f} MiB of "
              f"gradients), batch 1, p = {size}: medians of {args.rounds} alternating rounds of "
              f"{args.steps} steps")
        print(f"{'':24} {'gloo':>10} {'chorus':>10} {'chorus/gloo':>12}")
        print(f"{'step time (ms)':24} {g * 1e3:>10.1f} {c * 1e3:>10.1f} {c / g:>12.3f}")
        print(f"{'all_reduce of grads (ms)':24} {ga * 1e3:>10.1f} {ca * 1e3:>10.1f} {ca / ga:>12.3f}")
        print(f"parameters identical across ranks: gloo {same_across['gloo']}, chorus "
              f"{same_across['chorus']}; chorus == gloo bit for bit: {same_between}")


def overhead(rank, size, groups, comm, args):
    t = torch.ones(2)  # 8 bytes
    iters = 3000
    results = {}

    def through_torch(name, group):
        return timed(lambda: dist.all_reduce(t, group=group), iters)

    v = alternate(args.rounds, groups, through_torch)
    results["dist.all_reduce, gloo"] = statistics.median(v["gloo"])
    results["dist.all_reduce, chorus"] = statistics.median(v["chorus"])
    a = np.ones(2, np.float32)
    samples = []
    for _ in range(args.rounds):
        dist.barrier(group=groups["gloo"])
        samples.append(timed(lambda: comm.allreduce(a), iters))
    results["chorus numpy module"] = statistics.median(samples)
    if rank == 0:
        print(f"\n# 8-byte all_reduce latency, p = {size} (medians of {args.rounds} rounds of {iters}); "
              f"compare allreduce_perf --np {size} -b 8 -e 8")
        for name, seconds in results.items():
            print(f"{name:44} {seconds * 1e6:8.2f} us")
        print(f"{'chorus/gloo through dist.all_reduce':44} "
              f"{results['dist.all_reduce, chorus'] / results['dist.all_reduce, gloo']:8.3f}")


def run(rank, size, port, args):
    torch.set_num_threads(1)  # ranks share this host's cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    groups = {"gloo": dist.group.WORLD, "chorus": dist.new_group(backend="chorus")}
    comm = None
    if args.mode in ("all", "overhead"):  # now, while the store's port is surely free
        os.environ.update(CHORUS_RANK=str(rank), CHORUS_SIZE=str(size),
                          CHORUS_STORE=f"tcp://127.0.0.1:{args.numpy_port}")
        comm = chorus.Communicator.from_env()
    if rank == 0:
        print(f"chorus transport: {chorus.torch.transport_name(groups['chorus'])}", flush=True)
    if args.mode in ("all", "allreduce"):
        allreduce_sweep(rank, size, groups, args)
    if args.mode in ("all", "ddp"):
        ddp_training(rank, size, groups, args)
    if args.mode in ("all", "overhead"):
        overhead(rank, size, groups, comm, args)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="ranks on this host")
    parser.add_argument("--mode", choices=["all", "allreduce", "ddp", "overhead"], default="all")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of gloo and chorus")
    parser.add_argument("--steps", type=int, default=5, help="DDP steps per round")
    args = parser.parse_args()
    args.numpy_port = free_port()
    mp.spawn(run, args=(args.np, free_port(), args), nprocs=args.np)


if __name__ == "__main__":
    main()
