"""Training through the hook: the UCI digits MLP with DDP at 1% density
(RedSync's RGC, its momentum in the hook and plain SGD) ends within 1 point
of dense DDP's test accuracy, with identical weights on every rank after
every step (``ddp_digits.train`` checks them at each step)."""

import pytest

from ddp_digits import train
from dist import run, values


def accuracy(rank, world, hook, epochs):
    out = train(rank, world, hook=hook, epochs=epochs, rule="rgc" if hook else "topk")
    return out["accuracy"], out["stats"]


@pytest.mark.parametrize("world,algorithm,epochs", [(2, "spardl", 30), (2, "topk_a", 30), (4, "spardl", 30)])
def test_the_hook_at_one_percent_trains_within_a_point_of_dense_ddp(world, algorithm, epochs):
    dense = values(run(accuracy, world, None, epochs, timeout=60, deadline=900))
    sparse = values(run(accuracy, world, {"algorithm": algorithm, "density": 0.01}, epochs,
                        timeout=60, deadline=900))
    d, s = dense[0][0], sparse[0][0]
    assert all(r[0] == d for r in dense) and all(r[0] == s for r in sparse)
    assert s >= d - 0.01, f"{algorithm} at 1%: {100 * s:.2f}% against dense {100 * d:.2f}%"
    stats = sparse[0][1]
    assert stats, "no bucket statistics"
    for b in stats.values():
        assert b["calls"] > 0 and 0 < b["density"] <= 0.02, b
        assert b["bytes_sent"] > 0 and b["bytes_recv"] > 0, b
        assert b["total_communicate_s"] > 0 and b["total_select_s"] > 0, b
