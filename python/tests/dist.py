"""Runs a function on a gloo process group of spawned processes, one per
rank, and collects each rank's outcome: ``("ok", value)`` or
``("raised", "Type: message")``, or ``("lost", ...)`` for a rank that never
reported (it died, or hung past the deadline and was killed)."""

import datetime
import os
import queue as queue_mod
import socket
import time

import torch.multiprocessing as mp


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _entry(rank, world, port, fn, args, q, timeout):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=timeout))
        out = fn(rank, world, *args)
        q.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        q.put((rank, "raised", f"{type(e).__name__}: {e}"))
    # No destroy_process_group: a peer may be gone (the hostile tests).
    q.close()
    q.join_thread()
    os._exit(0)


def run(fn, world, *args, timeout=60, deadline=None):
    """``fn(rank, world, *args)`` on every rank; returns ``{rank: (status, value)}``."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, q, timeout))
             for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    end = time.monotonic() + (deadline or 4 * timeout)
    while len(out) < world and time.monotonic() < end:
        try:
            rank, status, value = q.get(timeout=0.5)
            out[rank] = (status, value)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
    for r in range(world):
        out.setdefault(r, ("lost", procs[r].exitcode))
    return out


def values(out):
    """Every rank's value, asserting every rank succeeded."""
    bad = {r: v for r, v in out.items() if v[0] != "ok"}
    assert not bad, bad
    return [out[r][1] for r in sorted(out)]
