"""Trains a small MLP with DistributedDataParallel on the chorus backend.

Launched by torchrun (env:// rendezvous):
    torchrun --nproc_per_node 2 examples/ddp_train.py
or spawning its own ranks on this host:
    /usr/bin/python3 examples/ddp_train.py --spawn 2

Each rank trains on its own random data; DDP averages the gradients with
Chorus. At the end the ranks compare their parameters (through the backend
itself) and rank 0 prints whether they are identical.
"""
import argparse
import os
import socket
import sys
import time

try:
    import torch
except ImportError:  # `python3` on PATH may not see Debian's packages: run under Debian's
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    raise
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import chorus.torch  # noqa: F401 - registers the "chorus" backend


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="chorus", help="chorus (default) or gloo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=1024, help="width of the hidden layers")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--spawn", type=int, default=0, metavar="N",
                        help="start N local ranks instead of being started by torchrun")
    return parser.parse_args()


def train(rank, size, args):
    dist.init_process_group(args.backend, init_method="env://", rank=rank, world_size=size)
    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts it)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    start = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(args.batch, 256, generator=data)
        y = torch.randint(0, 10, (args.batch,), generator=data)
        loss = nn.functional.cross_entropy(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    elapsed = time.perf_counter() - start
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    identical = all(torch.equal(everyone[0], other) for other in everyone)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"{args.backend}: {params} parameters, {args.steps} steps in {elapsed:.2f} s "
              f"({1e3 * elapsed / max(1, args.steps):.1f} ms/step); parameters "
              f"{'identical' if identical else 'DIFFERENT'} on {size} ranks", flush=True)
    dist.destroy_process_group()
    if not identical:
        raise SystemExit(1)


def spawned(rank, size, args):
    train(rank, size, args)


def main():
    args = parse_args()
    if args.spawn:
        with socket.socket() as s:  # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        mp.spawn(spawned, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
