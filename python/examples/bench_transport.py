"""What the process group's hop costs: a message through the hook's
transport (``ProcessGroupComm``: one message of its length and payload) against the
same bytes through ``dist.send``/``dist.recv``, and a whole bucket's
reduction over the process group (``SparseState``'s call, selection and
update included) against the same reduction on the thread transport in
one process (``_native.thread_reduce_seconds``), for the MLP of
``bench_step.py`` as one bucket.

Run one process per rank under ``scripts/netns-cluster.sh`` (as
``bench_step.py``) or with ``--local P``; rank 0 prints one JSON line per
measurement, medians of ``--reps`` interleaved repetitions.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import bench_step


def pingpong(rank, send, recv, n):
    """Seconds of ``n`` round trips between ranks 0 and 1 (others idle)."""
    times = []
    for _ in range(n):
        dist.barrier()
        start = time.perf_counter()
        if rank == 0:
            send()
            recv()
        elif rank == 1:
            recv()
            send()
        times.append(time.perf_counter() - start)
    return times


def run(rank, world, master, a):
    from sparse_comm import _native
    from sparse_comm.torch import ProcessGroupComm, SparseState

    bench_step.init(rank, world, master, a.port)
    comm = ProcessGroupComm()
    peer = 1 - rank if rank < 2 else rank
    out = []
    for size in (16, 16384, 1 << 20):
        data = bytes(size)
        t = torch.zeros(size, dtype=torch.uint8)
        dist_t, comm_t = [], []
        for _ in range(a.reps):
            dist_t += pingpong(rank, lambda: dist.send(t, peer), lambda: dist.recv(t, peer), a.calls)
            comm_t += pingpong(rank, lambda: comm.send(peer, data), lambda: comm.recv(peer), a.calls)
        d, c = statistics.median(dist_t) / 2, statistics.median(comm_t) / 2
        out.append({"measure": "message", "bytes": size, "dist_send_recv_ms": 1e3 * d,
                    "process_group_comm_ms": 1e3 * c, "ratio": c / d})
    model = bench_step.net("mlp")
    lens = [p.numel() for p in model.parameters()]
    grad = torch.randn(sum(lens), generator=torch.Generator().manual_seed(rank))
    idx = list(range(len(lens)))
    for algorithm in a.algorithm or ["topk_a", "spardl", "gtopk", "ok_topk"]:
        for density in a.density or [0.01, 0.001]:
            state = SparseState(model=model, algorithm=algorithm, density=density, rule="rgc")
            hook_t, pg_t = [], []
            for c in range(a.warmup + a.reps * a.calls):
                dist.barrier()
                before = state._stats.get(0, {}).get("total_process_group_s", 0.0)
                start = time.perf_counter()
                state._reduce(0, idx, grad)
                if c >= a.warmup:
                    hook_t.append(time.perf_counter() - start)
                    pg_t.append(state._stats[0]["total_process_group_s"] - before)
            thread_t = []
            if rank == 0:
                thread_t = _native.thread_reduce_seconds(lens, algorithm, density, "rgc", world,
                                                         a.reps * a.calls)
            dist.barrier()
            if rank == 0:
                h, th = statistics.median(hook_t), statistics.median(thread_t)
                out.append({"measure": "bucket", "algorithm": algorithm, "density": density,
                            "ranks": world, "hook_ms": 1e3 * h,
                            "hook_process_group_ms": 1e3 * statistics.median(pg_t),
                            "thread_transport_ms": 1e3 * th, "ratio": h / th})
    if rank == 0:
        for row in out:
            print(json.dumps(row), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithm", action="append", default=None)
    p.add_argument("--density", type=float, action="append", default=None)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--local", type=int, default=0, help="run P processes on loopback")
    p.add_argument("--port", type=int, default=29518)
    bench_step.launch(run, p.parse_args())


if __name__ == "__main__":
    main()
