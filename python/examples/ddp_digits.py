"""Data-parallel training of an MLP on the UCI handwritten digits with
PyTorch DDP, its gradients through sparse_comm's hook (or dense DDP).

    python python/examples/ddp_digits.py --world 2 --algorithm spardl --density 0.01
    python python/examples/ddp_digits.py --world 2 --dense

Each rank trains on its shard of the 1,437 training images (the workspace's
``bench/data/digits.csv.gz``, CC BY 4.0: see ``bench/data/README.md``) and
the test accuracy on the 360 others is printed at the end, with the weights
checked identical on every rank after every step. The tests
(``python/tests/test_training.py``) import ``train`` from here.
"""

import argparse
import datetime
import gzip
import hashlib
import os
import pathlib
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = pathlib.Path(__file__).resolve().parents[2] / "bench" / "data" / "digits.csv.gz"


def digits():
    """The 1,797 images (pixels scaled to [0, 1]) and labels, split by a
    fixed seed into 1,437 training and 360 test images."""
    if not DATA.exists():
        raise FileNotFoundError(f"{DATA}: the digits ship with the repository (bench/data)")
    with gzip.open(DATA, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x, y = rows[:, :64] / 16.0, rows[:, 64].astype(np.int64)
    order = np.random.default_rng(7).permutation(len(y))
    test, train = order[:360], order[360:]
    return (torch.from_numpy(x[train]), torch.from_numpy(y[train]),
            torch.from_numpy(x[test]), torch.from_numpy(y[test]))


def model(seed, hidden=64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 10))


def weights_digest(m):
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in m.parameters())).hexdigest()


def train(rank, world, hook=None, epochs=30, lr=0.1, momentum=0.9, batch=16, seed=1,
          start_epoch=0, resume=None, save=None, check_identical=True, rule="topk"):
    """Trains on this rank's shard; ``hook``: ``None`` (dense DDP) or the
    SparseState's keyword arguments. Returns the test accuracy, the final
    weights' bytes and the step count. ``resume``/``save``: a checkpoint
    path of this rank (model, optimizer and hook state) to start from or to
    write after the last epoch."""
    from sparse_comm.torch import SparseState, sparse_hook

    x, y, tx, ty = digits()
    shard = torch.arange(rank, len(y), world)[: len(y) // world]
    net = DDP(model(seed))
    optim = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.0 if rule == "rgc" else momentum)
    state = None
    if hook is not None:
        state = SparseState(model=net, rule=rule, **hook)
        net.register_comm_hook(state, sparse_hook)
    if resume is not None:
        ck = torch.load(resume)
        net.module.load_state_dict(ck["model"])
        optim.load_state_dict(ck["optim"])
        if state is not None:
            state.load_state_dict(ck["hook"])
    steps = 0
    for epoch in range(start_epoch, epochs):
        g = torch.Generator().manual_seed(seed * 1000 + epoch)
        order = shard[torch.randperm(len(shard), generator=g)]
        for b in range(0, len(order) - batch + 1, batch):
            idx = order[b:b + batch]
            optim.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            optim.step()
            steps += 1
            if check_identical:
                digests = [None] * world
                dist.all_gather_object(digests, weights_digest(net.module))
                assert len(set(digests)) == 1, f"step {steps}: the ranks' weights differ"
    if save is not None:
        ck = {"model": net.module.state_dict(), "optim": optim.state_dict()}
        if state is not None:
            ck["hook"] = state.state_dict()
        torch.save(ck, save)
    with torch.no_grad():
        acc = (net.module(tx).argmax(1) == ty).float().mean().item()
    w = b"".join(p.detach().numpy().tobytes() for p in net.module.parameters())
    return {"accuracy": acc, "weights": w, "steps": steps,
            "stats": state.stats() if state is not None else None}


def _worker(rank, world, port, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    hook = None if args.dense else {"algorithm": args.algorithm, "density": args.density}
    out = train(rank, world, hook=hook, epochs=args.epochs, rule=args.rule)
    if rank == 0:
        what = "dense DDP" if args.dense else f"{args.algorithm} at {args.density:g} ({args.rule})"
        print(f"{what}, {world} ranks, {out['steps']} steps: test accuracy {100 * out['accuracy']:.2f}%")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--algorithm", default="spardl")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--rule", default="topk", choices=["topk", "rgc"])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--dense", action="store_true")
    args = p.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(_worker, args=(args.world, port, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
