"""Sparse gradient communication for PyTorch DDP.

The compiled core (``sparse_comm._native``, Rust) holds the selectors, every
sparse allreduce of the workspace's registry (RedSync, SparDL, SparCML, Zen,
Ok-Topk, gTopk, OmniReduce, the planner) and the error feedback;
``sparse_comm.torch`` makes them a DDP communication hook whose messages
travel over torch.distributed's process group::

    from sparse_comm.torch import SparseState, sparse_hook
    state = SparseState(model=ddp_model, algorithm="spardl", density=0.01, rule="topk")
    ddp_model.register_comm_hook(state, sparse_hook)
"""

from ._native import SELECTORS, Engine, SparseCommError, algorithms, suite_specs

__version__ = "0.1.0"
__all__ = ["Engine", "SELECTORS", "SparseCommError", "algorithms", "suite_specs", "__version__"]
