"""The torch.distributed backend "chorus", checked against Gloo in the same
processes (a Gloo world and a Chorus group side by side) and through every
way torch starts a job.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_torch_backend.py [-k NAME]
CHORUS_TEST_RANKS=2,3,4 chooses the group sizes of the operation matrix.
"""
import datetime
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RankFailure, free_port, spawn  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


def init(rank, size, port, backend="gloo"):
    import chorus.torch  # noqa: F401 - registers "chorus"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=60))


def values(rank, n, dtype, op, salt=0):
    """Small integers, so that every order of reduction gives the same
    result in every dtype (products stay within 2**p)."""
    i = torch.arange(n)
    if op == "PRODUCT":
        v = 1 + (i + rank + salt) % 2
    else:
        v = (i * 3 + rank * 5 + salt) % 11
    if dtype == torch.bool:
        return (v % 2 == 0)
    return v.to(dtype)


def gloo_reference(t, op, gloo):
    """What the op gives, computed by Gloo (through a dtype and op Gloo has,
    where it lacks this one)."""
    size = dist.get_world_size(gloo)
    if t.dtype == torch.bool:
        mapped = {"SUM": "MAX", "PRODUCT": "MIN"}.get(op, op)
        u = t.to(torch.uint8)
        dist.all_reduce(u, op=getattr(R, mapped), group=gloo)
        return u.to(torch.bool)
    if t.dtype == torch.bfloat16:
        return gloo_reference(t.to(torch.float32), op, gloo).to(torch.bfloat16)
    if op == "AVG":
        s = t.to(torch.float64)
        dist.all_reduce(s, op=R.SUM, group=gloo)
        return (s / size).to(t.dtype)
    r = t.clone()
    dist.all_reduce(r, op=getattr(R, op), group=gloo)
    return r


def supported(dtype, op):
    if op in ("BAND", "BOR", "BXOR"):
        return dtype not in FLOATS
    if op == "AVG":
        return dtype in FLOATS
    return True


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        raise AssertionError(f"{what}: chorus {a.flatten()[:8].tolist()} ({a.dtype}) != "
                             f"gloo {b.flatten()[:8].tolist()} ({b.dtype})")


def expect_error(call, needle, what):
    try:
        call()
    except Exception as e:  # noqa: B902 - torch maps C++ errors to several types
        if needle not in str(e):
            raise AssertionError(f"{what}: error without '{needle}': {e}")
        return
    raise AssertionError(f"{what}: no error")


def operation_matrix(rank, size, port):
    """Every operation x dtype x op on chorus and gloo; returns the number
    of comparisons made."""
    init(rank, size, port)
    gloo = dist.group.WORLD
    ch = dist.new_group(backend="chorus")
    checks = 0
    root = size - 1
    for dtype in DTYPES:
        for n in (7, 3001):
            for op in OPS:
                t = values(rank, n, dtype, op)
                what = f"all_reduce {dtype} {op} n={n}"
                if not supported(dtype, op):
                    expect_error(lambda: dist.all_reduce(t.clone(), op=getattr(R, op), group=ch),
                                 "chorus backend", what)
                    continue
                mine = t.clone()
                dist.all_reduce(mine, op=getattr(R, op), group=ch)
                same(mine, gloo_reference(t, op, gloo), what)
                checks += 1
        sum_op = "MAX" if dtype == torch.bool else "SUM"
        # async with a future, as DDP uses it
        t = values(rank, 100, dtype, "SUM")
        work = dist.all_reduce(t, op=getattr(R, sum_op), group=ch, async_op=True)
        fired = []
        fut = work.get_future().then(lambda f: fired.append(f.value()[0].clone()))
        work.wait()
        fut.wait()
        assert work.is_completed() and work.is_success()
        ref = gloo_reference(values(rank, 100, dtype, "SUM"), sum_op, gloo)
        same(t, ref, f"async all_reduce {dtype}")
        same(fired[0], ref, f"future value {dtype}")
        checks += 2

        # allreduce_coalesced
        a, b = values(rank, 5, dtype, "SUM"), values(rank, 9, dtype, "SUM", 1)
        dist.all_reduce_coalesced([a, b], op=getattr(R, sum_op), group=ch)
        same(a, gloo_reference(values(rank, 5, dtype, "SUM"), sum_op, gloo), f"coalesced a {dtype}")
        same(b, gloo_reference(values(rank, 9, dtype, "SUM", 1), sum_op, gloo), f"coalesced b {dtype}")
        checks += 2

        # broadcast, reduce
        t = values(rank, 33, dtype, "SUM")
        dist.broadcast(t, src=root, group=ch)
        same(t, values(root, 33, dtype, "SUM"), f"broadcast {dtype}")
        checks += 1
        for op in ("SUM", "MAX", "MIN"):
            if dtype == torch.bool and op == "SUM":
                continue
            t = values(rank, 17, dtype, op)
            ref = gloo_reference(values(rank, 17, dtype, op), op, gloo)  # on every rank
            dist.reduce(t, dst=root, op=getattr(R, op), group=ch)
            if rank == root:
                same(t, ref, f"reduce {dtype} {op}")
                checks += 1

        # all_gather (list and base), gather, scatter
        mine = values(rank, 6, dtype, "SUM")
        out = [torch.empty(6, dtype=dtype) for _ in range(size)]
        dist.all_gather(out, mine, group=ch)
        for j in range(size):
            same(out[j], values(j, 6, dtype, "SUM"), f"all_gather {dtype} block {j}")
        flat = torch.empty(6 * size, dtype=dtype)
        dist._all_gather_base(flat, mine, group=ch)
        same(flat, torch.cat([values(j, 6, dtype, "SUM") for j in range(size)]), f"_all_gather_base {dtype}")
        gathered = [torch.empty(6, dtype=dtype) for _ in range(size)] if rank == 0 else None
        dist.gather(mine, gather_list=gathered, dst=0, group=ch)
        if rank == 0:
            for j in range(size):
                same(gathered[j], values(j, 6, dtype, "SUM"), f"gather {dtype} block {j}")
        got = torch.empty(4, dtype=dtype)
        pieces = [values(j, 4, dtype, "SUM", 7) for j in range(size)] if rank == root else None
        dist.scatter(got, scatter_list=pieces, src=root, group=ch)
        same(got, values(rank, 4, dtype, "SUM", 7), f"scatter {dtype}")
        checks += 4

        # reduce_scatter (list and base): block `rank` of an allreduce
        for op in ("SUM", "MAX"):
            if dtype == torch.bool and op == "SUM":
                continue
            blocks = [values(rank, 5, dtype, op, j) for j in range(size)]
            full = gloo_reference(torch.cat(blocks), op, gloo)
            out = torch.empty(5, dtype=dtype)
            dist.reduce_scatter(out, blocks, op=getattr(R, op), group=ch)
            same(out, full[rank * 5:(rank + 1) * 5], f"reduce_scatter {dtype} {op}")
            inp = torch.cat(blocks)
            keep = inp.clone()
            out = torch.empty(5, dtype=dtype)
            dist._reduce_scatter_base(out, inp, op=getattr(R, op), group=ch)
            same(out, full[rank * 5:(rank + 1) * 5], f"_reduce_scatter_base {dtype} {op}")
            same(inp, keep, f"_reduce_scatter_base left its input {dtype}")
            checks += 2

        # all_to_all_single (even and with splits) against gloo's; all_to_all (list)
        if dtype not in (torch.bool, torch.bfloat16):
            inp = values(rank, 3 * size, dtype, "SUM")
            a, b = torch.empty_like(inp), torch.empty_like(inp)
            dist.all_to_all_single(a, inp, group=ch)
            dist.all_to_all_single(b, inp, group=gloo)
            same(a, b, f"all_to_all_single {dtype}")
            in_splits = [(rank + j) % 3 + 1 for j in range(size)]
            out_splits = [(j + rank) % 3 + 1 for j in range(size)]
            inp = values(rank, sum(in_splits) * 2, dtype, "SUM").reshape(-1, 2)
            a = torch.empty(sum(out_splits), 2, dtype=dtype)
            b = torch.empty_like(a)
            dist.all_to_all_single(a, inp, out_splits, in_splits, group=ch)
            dist.all_to_all_single(b, inp, out_splits, in_splits, group=gloo)
            same(a, b, f"all_to_all_single with splits {dtype}")
            checks += 2
        sends = [values(rank * size + j, j + 1, dtype, "SUM") for j in range(size)]
        recvs = [torch.empty(rank + 1, dtype=dtype) for _ in range(size)]
        dist.all_to_all(recvs, sends, group=ch)
        for j in range(size):
            same(recvs[j], values(j * size + rank, rank + 1, dtype, "SUM"), f"all_to_all {dtype} from {j}")
        checks += 1

        # send / recv around a ring, and receive from any source
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        out = values(rank, 11, dtype, "SUM")
        got = torch.empty(11, dtype=dtype)
        reqs = [dist.isend(out, nxt, group=ch, tag=5), dist.irecv(got, prv, group=ch, tag=5)]
        for r in reqs:
            r.wait()
        same(got, values(prv, 11, dtype, "SUM"), f"send/recv {dtype}")
        checks += 1
    if rank == 0:
        seen = set()
        for _ in range(size - 1):
            t = torch.empty(3, dtype=torch.int64)
            src = dist.recv(t, group=ch, tag=9)
            assert t.tolist() == [src] * 3, (src, t)
            seen.add(src)
        assert seen == set(range(1, size)), seen
    else:
        dist.send(torch.full((3,), rank, dtype=torch.int64), 0, group=ch, tag=9)
    checks += 1
    dist.barrier(group=ch)

    # PREMUL_SUM (Gloo has none): the factor times the sum, the input untouched
    # until the end.
    for dtype in FLOATS:
        t = values(rank, 9, dtype, "SUM")
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0), group=ch)
        same(t, gloo_reference(values(rank, 9, dtype, "SUM"), "SUM", gloo) * 2, f"premul_sum {dtype}")
        checks += 1
    return checks


def layouts_and_devices(rank, size, port):
    """Non-contiguous tensors, wrong devices and dtypes, subgroups."""
    init(rank, size, port)
    ch = dist.new_group(backend="chorus")
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    total = base * size + sum(range(size))  # sum over ranks of base + rank
    for name, view in (("transposed", lambda t: t.t()), ("strided", lambda t: t[:, ::2]),
                       ("column", lambda t: t[:, 1])):
        # Expected by hand: Gloo (torch 1.13) reduces numel() elements from
        # the view's first one for a strided view, not the view's elements.
        a = base + rank
        assert not view(a).is_contiguous()
        dist.all_reduce(view(a), group=ch)
        expect = base + rank
        view(expect).copy_(view(total))
        same(a, expect, f"all_reduce of a {name} view (and the rest untouched)")
        a = base + rank
        dist.broadcast(view(a), src=0, group=ch)
        expect = base + rank
        view(expect).copy_(view(base))
        same(a, expect, f"broadcast into a {name} view")
    out = [torch.empty(3, 4).t() for _ in range(size)]  # 4 x 3, not contiguous
    dist.all_gather(out, torch.full((4, 3), float(rank)).t().contiguous().t(), group=ch)
    for j in range(size):
        same(out[j], torch.full((4, 3), float(j)), f"all_gather into non-contiguous block {j}")
    # A device other than the CPU: torch's dispatcher stops meta tensors
    # before any backend (this torch has no CUDA); sparse ones reach us.
    expect_error(lambda: dist.all_reduce(torch.ones(3, device="meta"), group=ch), "allreduce",
                 "meta device")
    expect_error(lambda: dist.all_reduce(torch.ones(3).to_sparse(), group=ch), "sparse tensors",
                 "sparse tensor")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16), group=ch),
                 "not supported", "int16")
    # complex: torch passes sums as float pairs (view_as_real)
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c, group=ch)
    same(c, torch.full((3,), complex(sum(range(size)), size), dtype=torch.complex64), "complex sum")
    # The group still works after refused calls.
    t = torch.ones(5)
    dist.all_reduce(t, group=ch)
    same(t, torch.full((5,), float(size)), "after refused calls")
    # Subgroups: the first two ranks, and the others alone.
    pair = dist.new_group(ranks=[0, 1], backend="chorus")
    rest = dist.new_group(ranks=list(range(2, size)), backend="chorus") if size > 2 else None
    if rank < 2:
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=pair)
        same(t, torch.full((4,), 3.0), "subgroup [0, 1]")
        assert dist.get_world_size(pair) == 2
    elif rest is not None:
        t = torch.full((4,), float(rank))
        dist.all_reduce(t, group=rest)
        same(t, torch.full((4,), float(sum(range(2, size)))), "subgroup [2..]")
    dist.barrier(group=ch)
    return True


def init_methods(rank, size, port, method, directory):
    """init_process_group("chorus") through each of torch's rendezvous."""
    import chorus.torch  # noqa: F401
    timeout = datetime.timedelta(seconds=60)
    if method == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(size))
        dist.init_process_group("chorus", init_method="env://", timeout=timeout)
    elif method == "tcp":
        dist.init_process_group("chorus", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=timeout)
    elif method == "tcpstore":
        store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout)
        dist.init_process_group("chorus", store=store, rank=rank, world_size=size, timeout=timeout)
    elif method == "filestore":
        store = dist.FileStore(os.path.join(directory, "store"), size)
        dist.init_process_group("chorus", store=store, rank=rank, world_size=size, timeout=timeout)
    assert dist.get_backend() == "chorus", dist.get_backend()
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    same(t, torch.full((3,), float(sum(range(size)))), f"all_reduce after {method}")
    dist.destroy_process_group()
    return True


def mismatched_calls(rank, size, port, kind):
    init(rank, size, port, "chorus")
    try:
        if kind == "count":
            dist.all_reduce(torch.ones(10 + rank))
        else:
            if rank == 0:
                dist.broadcast(torch.ones(10), src=0)
            else:
                dist.all_reduce(torch.ones(10))
        # On one host a broadcast's root returns once its data is out, as
        # MPI's does: it hears of the mismatch at its next call (rank 1's
        # reason, naming both calls).
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        return str(e)
    return None


def ddp_parameters(rank, size, port, backend, steps):
    """The parameters after `steps` DDP steps (same seed and data for every
    backend; each rank its own data), as bytes."""
    import torch.nn as nn
    init(rank, size, port, backend)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)), bucket_cap_mb=0.05)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(16, 64, generator=data)
        y = torch.randint(0, 10, (16,), generator=data)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().tobytes()


def killed_peer(rank, size, port):
    """DDP training; the last rank dies at step 5; the others must raise,
    naming it, within 5 s."""
    import torch.nn as nn
    init(rank, size, port, "chorus")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    last_ok = time.monotonic()
    for step in range(10000):
        if rank == size - 1 and step == 5:
            os._exit(3)
        try:
            loss = model(torch.randn(4, 32)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        except RuntimeError as e:
            waited = time.monotonic() - last_ok
            # Stay a little: a survivor that left at once could be the dead
            # peer another survivor sees first (the harness ends a rank as
            # soon as it reports).
            time.sleep(3)
            return (waited, str(e))
        last_ok = time.monotonic()
    return None


class TorchBackend(unittest.TestCase):
    def test_every_operation_dtype_and_op_against_gloo(self):
        sizes = [int(s) for s in os.environ.get("CHORUS_TEST_RANKS", "2,3,4").split(",")]
        for p in sizes:
            with self.subTest(ranks=p):
                checks = spawn(operation_matrix, p, timeout=300)
                self.assertTrue(all(c > 250 for c in checks), checks)  # roots check more

    def test_non_contiguous_wrong_device_and_subgroups(self):
        self.assertEqual(spawn(layouts_and_devices, 3, timeout=120), [True] * 3)

    def test_init_process_group_through_every_rendezvous(self):
        with tempfile.TemporaryDirectory() as directory:
            for method in ("env", "tcp", "tcpstore", "filestore"):
                with self.subTest(method=method):
                    self.assertEqual(spawn(init_methods, 2, method, directory, timeout=120), [True] * 2)

    def test_mismatched_calls_raise_on_every_rank(self):
        for kind, needle in (("count", "count"), ("collective", "broadcast")):
            with self.subTest(kind=kind):
                errors = spawn(mismatched_calls, 2, kind, timeout=120)
                for rank, message in enumerate(errors):
                    self.assertIsNotNone(message, f"rank {rank} did not raise")
                    self.assertIn("called different collectives", message, message)
                    self.assertIn(needle, message, message)

    def test_ddp_parameters_agree_and_match_gloo_bit_for_bit_at_p2(self):
        for size in (2, 3):
            with self.subTest(ranks=size):
                chorus_params = spawn(ddp_parameters, size, "chorus", 6, timeout=120)
                self.assertTrue(all(p == chorus_params[0] for p in chorus_params),
                                "parameters differ between ranks")
                if size == 2:
                    gloo_params = spawn(ddp_parameters, size, "gloo", 6, timeout=120)
                    self.assertEqual(chorus_params[0], gloo_params[0], "chorus and gloo differ")

    def test_a_killed_rank_raises_in_every_survivor_within_5_s(self):
        size = 3
        results = spawn(killed_peer, size, timeout=120, expect_exit=(size - 1,))
        for rank in range(size - 1):
            self.assertIsNotNone(results[rank], f"rank {rank} trained on")
            waited, message = results[rank]
            self.assertLess(waited, 5.0, message)
            self.assertIn("chorus backend", message)
            self.assertIn(f"rank {size - 1}", message)

    def test_torchrun_launches_the_ddp_example(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
            __import__("chorus").__file__)), env.get("PYTHONPATH")]))
        # Debian's torch 1.13 under Python 3.11: torchrun's default --redirects
        # 0 parses to None (3.11's Flag iteration skips the zero member) and
        # the launcher crashes; 1 (stdout) with --tee 1 parses and still
        # shows the workers' output.
        # --log_dir: without it the agent makes /tmp/torchelastic_* and leaves it.
        with tempfile.TemporaryDirectory() as logs:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                   "--nnodes", "1", "--nproc_per_node", "2", "--log_dir", logs,
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   os.path.join(SOURCE, "examples", "ddp_train.py"), "--steps", "5", "--hidden", "64"]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("parameters identical on 2 ranks", done.stdout, done.stdout + done.stderr)

    def test_the_ddp_example_spawns_its_own_ranks(self):
        env = dict(os.environ)
        cmd = [sys.executable, os.path.join(SOURCE, "examples", "ddp_train.py"), "--spawn", "3",
               "--steps", "5", "--hidden", "64"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("parameters identical on 3 ranks", done.stdout, done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
