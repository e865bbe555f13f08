"""A run checkpointed half way (model, optimizer and the hook's
``state_dict()`` with ``torch.save``) and resumed in a new process group
with a new DDP instance ends bit for bit equal to the uninterrupted run,
for a stateful lossy collective (Ok-Topk's thresholds) and SparDL, both
rules."""

import pytest

from ddp_digits import train
from dist import run, values

EPOCHS = 4


def whole(rank, world, hook, rule):
    return train(rank, world, hook=hook, epochs=EPOCHS, rule=rule, check_identical=False)["weights"]


def first_half(rank, world, hook, rule, path):
    return train(rank, world, hook=hook, epochs=EPOCHS // 2, rule=rule, check_identical=False,
                 save=f"{path}/rank{rank}.pt")["weights"]


def second_half(rank, world, hook, rule, path):
    return train(rank, world, hook=hook, epochs=EPOCHS, start_epoch=EPOCHS // 2, rule=rule,
                 check_identical=False, resume=f"{path}/rank{rank}.pt")["weights"]


@pytest.mark.parametrize("algorithm,rule", [("ok_topk", "topk"), ("spardl", "rgc")])
def test_a_resumed_run_ends_bit_for_bit_as_the_uninterrupted_one(tmp_path, algorithm, rule):
    hook = {"algorithm": algorithm, "density": 0.05}
    unbroken = values(run(whole, 2, hook, rule, timeout=60))
    values(run(first_half, 2, hook, rule, str(tmp_path), timeout=60))
    resumed = values(run(second_half, 2, hook, rule, str(tmp_path), timeout=60))
    assert resumed == unbroken
