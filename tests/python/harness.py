"""Runs a function as every rank of a job of local processes, bounded in time.

spawn(target, nprocs, *args) starts nprocs fresh interpreters (the
multiprocessing "spawn" method: no state forked from the test), calls
target(rank, nprocs, port, *args) in each with a free loopback port for the
rendezvous, and returns their return values in rank order. A rank that
raises fails the whole call with its traceback; ranks still running at the
deadline are killed and named. Nothing outlives the call.
"""
import multiprocessing
import os
import queue
import socket
import time
import traceback


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(target, rank, nprocs, port, args, results):
    try:
        results.put((rank, True, target(rank, nprocs, port, *args)))
    except BaseException:  # noqa: B902 - every failure goes back to the parent
        results.put((rank, False, traceback.format_exc()))
    results.close()
    results.join_thread()  # the result is in the pipe before we leave
    # Leave without running torch's atexit hooks: a survivor of a killed
    # peer must not hang in a destructor after it has reported.
    os._exit(0)


class RankFailure(AssertionError):
    pass


def spawn(target, nprocs, *args, timeout=120, expect_exit=()):
    """Returns [result of rank 0, ...]. Ranks in expect_exit may leave
    without a result (they kill themselves on purpose)."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(target, r, nprocs, port, args, results))
             for r in range(nprocs)]
    for p in procs:
        p.start()
    outcome = {}
    deadline = time.monotonic() + timeout
    try:
        waiting = set(range(nprocs)) - set(expect_exit)
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                if any(not ok for ok, _ in outcome.values()):
                    break  # report the failure that stopped them
                raise RankFailure(f"ranks {sorted(waiting)} did not finish within {timeout} s")
            try:
                rank, ok, value = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                for r in list(waiting):
                    if not procs[r].is_alive() and procs[r].exitcode not in (0, None):
                        raise RankFailure(f"rank {r} died with exit code {procs[r].exitcode}")
                continue
            outcome[rank] = (ok, value)
            waiting.discard(rank)
            if not ok:  # the others may be waiting for it: give them a little time
                deadline = min(deadline, time.monotonic() + 10)
    finally:
        for p in procs:
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
            if p.is_alive():
                p.kill()
                p.join()
    failures = [f"rank {r}:\n{v}" for r, (ok, v) in sorted(outcome.items()) if not ok]
    if failures:
        raise RankFailure("\n".join(failures))
    return [outcome[r][1] if r in outcome else None for r in range(nprocs)]
