"""Failures are exceptions on every rank, never a hang: a NaN gradient on
one rank (its exception names the element, the others' the rank), settings
that differ across ranks, a rank that dies (the others raise within the
process group's timeout), a bucket of an unsupported dtype."""

import time

import pytest

from dist import run

TIMEOUT = 10


def step(rank, world, case):
    import os

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from sparse_comm.torch import SparseState, sparse_hook

    torch.manual_seed(0)
    net = torch.nn.Linear(16, 4)
    if case == "float64":
        net = net.double()
    net = DDP(net)
    density = 0.1 * (2 if case == "settings" and rank == 1 else 1)
    state = SparseState(model=net, algorithm="spardl", density=density)
    net.register_comm_hook(state, sparse_hook)
    dtype = torch.float64 if case == "float64" else torch.float32
    x = torch.randn(8, 16, dtype=dtype)
    net(x).sum().backward()  # a first step that works, but for the cases that fail at once
    if case == "dies" and rank == 1:
        os._exit(3)
    loss = net(x).sum()
    if case == "nan" and rank == 1:
        loss = loss * float("nan")
    loss.backward()
    return "stepped"


@pytest.mark.parametrize("case", ["nan", "settings", "float64"])
def test_a_bad_input_raises_on_every_rank(case):
    out = run(step, 3, case, timeout=TIMEOUT)
    for rank, (status, value) in out.items():
        assert status == "raised", (case, rank, status, value)
        if case == "nan":
            assert "rank 1" in value, value
            if rank == 1:
                assert "non-finite" in value, value
        if case == "settings":
            assert "settings" in value, value
        if case == "float64":
            assert "float64" in value, value


def test_a_rank_that_dies_makes_the_others_raise_within_the_timeout():
    start = time.monotonic()
    out = run(step, 3, "dies", timeout=TIMEOUT, deadline=6 * TIMEOUT)
    took = time.monotonic() - start
    assert out[1][0] == "lost", out[1]
    for rank in (0, 2):
        assert out[rank][0] == "raised", (rank, out[rank])
    assert took < 4 * TIMEOUT, took
