"""Step times of dense DDP against the sparse hook, one rank per process:
an MLP (784-256-10) or a CNN (two 5x5 convolutions with pooling, a
1568-64-10 head) on Fashion-MNIST images (Debian's dataset-fashion-mnist,
MIT licence), gloo as the process group.

Run one process per rank, under ``scripts/netns-cluster.sh`` for a shaped
link (it sets ``PMI_RANK`` and ``PMI_SIZE``; rank 0 is 198.18.0.1)::

    sudo bash scripts/netns-cluster.sh --ranks 2 --rate 1gbit -- \\
        target/venv-sparse-comm/bin/python python/examples/bench_step.py --model mlp

or on one machine with ``--local P`` (processes on loopback). Each
configuration (dense, then every algorithm at every density) runs
``--steps`` timed steps after ``--warmup`` untimed ones, the
configurations interleaved over ``--reps`` rounds; rank 0 prints one JSON
line per configuration and round (the median step in milliseconds, the
hook's time in Rust and in the process group, the bytes sent), then the
medians over the rounds.
"""

import argparse
import datetime
import gzip
import json
import os
import pathlib
import statistics
import struct
import time

# One BLAS thread per rank (a rank has a core): Debian's torch calls the
# system BLAS, which OpenBLAS (libopenblas0-pthread) can be; the reference
# BLAS it has otherwise makes the MLP's step 15 times slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")


def images(n):
    """The first ``n`` training images and labels of Fashion-MNIST."""
    path = FASHION / "train-images-idx3-ubyte.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path}: install Debian's dataset-fashion-mnist "
                                "(apt-get install dataset-fashion-mnist)")
    with gzip.open(path) as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051 or (rows, cols) != (28, 28) or count < n:
            raise ValueError(f"{path}: not an IDX file of {n} 28x28 images")
        x = np.frombuffer(f.read(n * 784), dtype=np.uint8).reshape(n, 1, 28, 28)
    with gzip.open(FASHION / "train-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = np.frombuffer(f.read(n), dtype=np.uint8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def net(kind):
    torch.manual_seed(1)
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(1568, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def steps(model, state, x, y, batch, n, rank, world):
    from sparse_comm.torch import sparse_hook

    ddp = DDP(model)
    if state is not None:
        ddp.register_comm_hook(state, sparse_hook)
    optim = torch.optim.SGD(ddp.parameters(), lr=0.01)
    times = []
    for s in range(n):
        at = ((s * world + rank) * batch) % (len(y) - batch)
        dist.barrier()
        start = time.perf_counter()
        optim.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x[at:at + batch]), y[at:at + batch]).backward()
        optim.step()
        times.append(time.perf_counter() - start)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--algorithm", action="append", default=None)
    p.add_argument("--density", type=float, action="append", default=None)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--blocking", action="store_true",
                   help="each sparse configuration also with the hook blocking (no overlap); "
                        "without it, only the first one's")
    p.add_argument("--local", type=int, default=0, help="run P processes on loopback")
    p.add_argument("--port", type=int, default=29517)
    launch(run, p.parse_args())


def launch(run, a):
    """``run(rank, world, master, a)`` on ``a.local`` processes on loopback,
    or as this process's rank under ``scripts/netns-cluster.sh``."""
    if a.local:
        import torch.multiprocessing as mp

        mp.spawn(run, args=(a.local, "127.0.0.1", a), nprocs=a.local, join=True)
    else:
        run(int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"]), "198.18.0.1", a)


def init(rank, world, master, port):
    """gloo over the namespace's link (or loopback), one compute thread."""
    torch.set_num_threads(1)
    if master != "127.0.0.1":
        # The namespace's one link besides loopback carries gloo.
        os.environ.setdefault("GLOO_SOCKET_IFNAME",
                              next(n for n in os.listdir("/sys/class/net") if n != "lo"))
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))


def run(rank, world, master, a):
    from sparse_comm.torch import SparseState

    init(rank, world, master, a.port)
    x, y = images(4096)
    algorithms = a.algorithm or ["topk_a", "spardl", "gtopk", "ok_topk"]
    densities = a.density or [0.01, 0.001]
    configs = [("dense", None)]
    for al in algorithms:
        for d in densities:
            configs.append((f"{al}@{d:g}", (al, d, False)))
            if a.blocking or len(configs) == 2:
                configs.append((f"{al}@{d:g} blocking", (al, d, True)))
    rounds = {name: [] for name, _ in configs}
    for rep in range(a.reps):
        for name, cfg in configs:
            model = net(a.model)
            state = None
            if cfg is not None:
                state = SparseState(model=model, algorithm=cfg[0], density=cfg[1], rule="rgc",
                                    blocking=cfg[2])
            times = steps(model, state, x, y, a.batch, a.warmup + a.steps, rank, world)[a.warmup:]
            ms = 1e3 * statistics.median(times)
            row = {"model": a.model, "ranks": world, "config": name, "rep": rep, "step_ms": ms}
            if state is not None:
                st = state.stats().values()
                calls = sum(b["calls"] for b in st) or 1
                row["hook_call_ms"] = 1e3 * sum(b["total_call_s"] for b in st) / calls
                row["hook_process_group_ms"] = 1e3 * sum(b["total_process_group_s"] for b in st) / calls
                row["bytes_sent_per_call"] = sum(b["total_bytes_sent"] for b in st) / calls
            rounds[name].append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)
    if rank == 0:
        dense = statistics.median(r["step_ms"] for r in rounds["dense"])
        for name, rows in rounds.items():
            med = statistics.median(r["step_ms"] for r in rows)
            print(json.dumps({"model": a.model, "ranks": world, "config": name, "median_step_ms": med,
                              "vs_dense": med / dense}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
