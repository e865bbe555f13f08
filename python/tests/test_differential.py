"""The hook's averaged bucket against ``residual_sgd::Trainer``: for the
same gradients, density, rule and algorithm, the means the hook returns,
applied as ``w -= mean``, are the weights of the trainer's steps (learning
rate 1, the bucket's parameters as its layers in the model's order, which
the hook reduces a bucket in whatever DDP's order), bit for bit, on every
rank, step after step; the lossless and lossy algorithms, both rules, on 2
and 4 ranks."""

import numpy as np
import pytest

import sparse_comm
from dist import run, values

CASES = [(rule, algo) for rule in ("topk", "rgc") for algo in ("topk_a", "spardl", "gtopk", "ok_topk")]
CASES += [("topk", "auto"), ("topk", "hierarchical:node=2,intra=topk_a,inter=spardl")]
STEPS = 6


def hook_means(rank, world):
    import torch
    from sparse_comm.torch import SparseState

    net = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.Linear(5, 3))
    # DDP's order: the last layer's parameters first.
    bucket = list(range(len(list(net.parameters()))))[::-1]
    lens = [p.numel() for p in net.parameters()]
    out = {}
    for rule, algo in CASES:
        state = SparseState(model=net, algorithm=algo, density=0.25, rule=rule, blocking=True)
        rng = np.random.default_rng(100 + rank)
        w = np.zeros(sum(lens[m] for m in bucket), dtype=np.float32)
        grads, weights = [], []
        for _ in range(STEPS):
            g = (rng.integers(-128, 129, size=w.size) / 8).astype(np.float32)
            mean = state._reduce(0, bucket, torch.from_numpy(g.copy()))
            w = w - mean.numpy()
            # The trainer's layers in the model's order.
            grads.append(to_model_order(g, bucket, lens).tobytes())
            weights.append(to_model_order(w, bucket, lens).tobytes())
        out[(rule, algo)] = (grads, weights)
    return out, lens


def to_model_order(x, bucket, lens):
    parts, at = {}, 0
    for m in bucket:
        parts[m] = x[at:at + lens[m]]
        at += lens[m]
    return np.concatenate([parts[m] for m in sorted(parts)])


@pytest.mark.parametrize("world", [2, 4])
def test_the_hooks_mean_is_the_trainers_step_bit_for_bit(world):
    per_rank = values(run(hook_means, world, timeout=60))
    lens = per_rank[0][1]
    for rule, algo in CASES:
        grads = [r[0][(rule, algo)][0] for r in per_rank]
        want = sparse_comm._native.trainer_reference(lens, grads, algo, 0.25, rule)
        for rank, r in enumerate(per_rank):
            got = r[0][(rule, algo)][1]
            assert got == want[rank], f"{rule} {algo}: rank {rank} differs from the trainer"


def half_buckets(rank, world):
    import torch
    from sparse_comm.torch import SparseState

    net = torch.nn.Linear(16, 4)
    out = {}
    for dtype in (torch.float16, torch.bfloat16):
        wide = SparseState(model=net, algorithm="spardl", density=0.25, blocking=True)
        half = SparseState(model=net, algorithm="spardl", density=0.25, blocking=True)
        rng = np.random.default_rng(5 + rank)
        for step in range(4):
            # Multiples of 1/8 below 16: exact in float16 and bfloat16.
            g = (rng.integers(-128, 129, size=68) / 8).astype(np.float32)
            want = wide._reduce(0, [1, 0], torch.from_numpy(g.copy()))
            got = half._reduce(0, [1, 0], torch.from_numpy(g.copy()).to(dtype))
            assert got.dtype == dtype, got.dtype
            assert torch.equal(got, want.to(dtype)), (dtype, step)
        assert all(torch.equal(a, b) for a, b in zip(wide.residuals(), half.residuals()))
        out[str(dtype)] = True
    return out


def test_half_buckets_keep_float32_residuals_and_return_their_dtype():
    assert all(r == {"torch.float16": True, "torch.bfloat16": True}
               for r in values(run(half_buckets, 2, timeout=60)))
