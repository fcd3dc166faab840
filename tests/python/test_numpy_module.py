"""chorus.Communicator on numpy arrays: every collective, in place and not,
blocking and async, point-to-point, and the errors a Python user meets.

Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_numpy_module.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import spawn  # noqa: E402

import numpy as np  # noqa: E402


def connect(rank, size, port):
    import chorus
    os.environ.update(CHORUS_RANK=str(rank), CHORUS_SIZE=str(size),
                      CHORUS_STORE=f"tcp://127.0.0.1:{port}")
    comm = chorus.Communicator.from_env(timeout=60)
    assert (comm.rank, comm.size) == (rank, size)
    return comm


def values(rank, n, dtype):
    return ((np.arange(n) * 3 + rank * 5) % 11).astype(dtype)


def collectives(rank, size, port):
    import chorus
    comm = connect(rank, size, port)
    checks = 0
    for dtype in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64,
                  np.uint64, np.bool_):
        n = 1001
        everyone = [values(r, n, dtype) for r in range(size)]
        # allreduce: out of place, in place, async
        op, expect = ("max", np.maximum.reduce(everyone)) if dtype == np.bool_ else \
            ("sum", np.sum(everyone, axis=0, dtype=dtype))
        out = np.empty(n, dtype)
        comm.allreduce(values(rank, n, dtype), out, op=op)
        np.testing.assert_array_equal(out, expect)
        inplace = values(rank, n, dtype)
        comm.allreduce(inplace, op=op)
        np.testing.assert_array_equal(inplace, expect)
        buf = values(rank, n, dtype)
        work = comm.allreduce(buf, op=op, async_op=True)
        assert work.wait(30)
        assert work.test() and work.error is None
        np.testing.assert_array_equal(buf, expect)
        # broadcast, reduce
        b = values(rank, 10, dtype)
        comm.broadcast(b, root=size - 1)
        np.testing.assert_array_equal(b, values(size - 1, 10, dtype))
        r = np.empty(n, dtype)
        comm.reduce(values(rank, n, dtype), r, op="max", root=0)
        if rank == 0:
            np.testing.assert_array_equal(r, np.maximum.reduce(everyone))
        # allgather, gather, scatter, reduce_scatter, alltoall
        g = np.empty(size * 4, dtype)
        comm.allgather(values(rank, 4, dtype), g)
        np.testing.assert_array_equal(g, np.concatenate([values(j, 4, dtype) for j in range(size)]))
        gathered = np.empty(size * 4, dtype) if rank == 1 else None
        comm.gather(values(rank, 4, dtype), gathered, root=1)
        if rank == 1:
            np.testing.assert_array_equal(gathered, g)
        piece = np.empty(4, dtype)
        comm.scatter(g if rank == 0 else None, piece, root=0)
        np.testing.assert_array_equal(piece, values(rank, 4, dtype))
        if dtype != np.bool_:
            rs = np.empty(3, dtype)
            comm.reduce_scatter(values(rank, 3 * size, dtype), rs, op="min")
            full = np.minimum.reduce([values(j, 3 * size, dtype) for j in range(size)])
            np.testing.assert_array_equal(rs, full[rank * 3:(rank + 1) * 3])
        a2a = np.empty(2 * size, dtype)
        comm.alltoall(np.repeat(np.arange(size) * 10 + rank, 2).astype(dtype), a2a)
        np.testing.assert_array_equal(a2a, np.repeat(np.arange(size) + rank * 10, 2).astype(dtype))
        checks += 1
    # two-dimensional arrays and point-to-point
    m = np.ones((3, 5), np.float32) * rank
    comm.allreduce(m)
    np.testing.assert_array_equal(m, np.full((3, 5), sum(range(size)), np.float32))
    if rank == 0:
        senders = set()
        for _ in range(size - 1):
            x = np.empty(2, np.int64)
            source = comm.recv(x, peer=chorus.ANY_SOURCE, tag=4)
            assert x.tolist() == [source, source * 2]
            senders.add(source)
        assert senders == set(range(1, size))
    else:
        comm.send(np.array([rank, rank * 2], np.int64), 0, tag=4)
    work = comm.barrier(async_op=True)
    work.wait()
    return checks


def errors(rank, size, port):
    import chorus
    comm = connect(rank, size, port)
    messages = []

    def refused(call, needle):
        try:
            call()
        except (ValueError, RuntimeError) as e:
            assert needle in str(e), (needle, str(e))
            messages.append(str(e))
            return
        raise AssertionError(f"accepted: {needle}")

    refused(lambda: comm.allreduce(np.ones((4, 4), np.float32)[:, ::2]), "C-contiguous")
    refused(lambda: comm.allreduce(np.ones(4, np.complex64)), "not supported")
    refused(lambda: comm.allreduce(np.ones(4, np.float32), op="median"), "unknown reduction")
    refused(lambda: comm.allreduce(np.ones(4, np.float32), np.ones(5, np.float32)), "5")
    refused(lambda: comm.allreduce(np.ones(4, np.int32), op="avg"), "avg")
    refused(lambda: comm.send(np.ones(2), size, tag=0), f"peer {size}")
    refused(lambda: comm.alltoall(np.ones(2 * size + 1, np.float32), np.ones(2 * size + 1, np.float32)),
            "a multiple of")
    comm.barrier()
    # a mismatch fails every rank with chorus.Error, naming what differed
    try:
        comm.allreduce(np.ones(10 + rank, np.float32))
    except chorus.Error as e:
        assert e.code == "mismatched collective", e.code
        return str(e)
    raise AssertionError("mismatch not detected")


class NumpyModule(unittest.TestCase):
    def test_every_collective_in_place_and_not_blocking_and_async(self):
        for size in (2, 3):
            with self.subTest(ranks=size):
                self.assertEqual(spawn(collectives, size, timeout=120), [9] * size)

    def test_bad_arguments_are_refused_and_a_mismatch_is_a_chorus_error(self):
        for message in spawn(errors, 2, timeout=120):
            self.assertIn("count", message)


if __name__ == "__main__":
    unittest.main()
