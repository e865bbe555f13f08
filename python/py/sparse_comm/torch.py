"""A PyTorch DDP communication hook: sparse allreduces with error feedback.

``SparseState`` holds, per parameter of the model, the residual of error
feedback (and RGC's momentum), per parameter its selector's state, and per
bucket of parameters its collective's state; ``sparse_hook`` is the hook::

    from sparse_comm.torch import SparseState, sparse_hook
    state = SparseState(model=ddp_model, algorithm="spardl", density=0.01,
                        rule="topk", process_group=None)
    ddp_model.register_comm_hook(state, sparse_hook)
    ...
    torch.save({"model": ..., "optim": ..., "hook": state.state_dict()}, path)
    state.load_state_dict(torch.load(path)["hook"])

What a bucket goes through (on every rank, in DDP's bucket order): each of
its parameters adds its gradient to its residual and selects its share of
``density`` (``selector``: ``radix``, the exact top-k, by default), the
selections laid end to end go through ``algorithm`` (any name of the
registry, with parameters: ``"spardl"``, ``"ok_topk:period=8"``,
``"topk_a:values=f16"``, ``"auto"``), what the collective cut goes back into
the residual of the rank that holds it, and the bucket's gradient becomes
the mean over the ranks of the reduced result. Pair it with plain SGD:

- ``rule="topk"``: SparCML's top-k SGD with error feedback; any optimizer
  (SGD with momentum applies its momentum to the sparse mean).
- ``rule="rgc"``: RedSync's momentum correction (``momentum``, ``nesterov``,
  factor ``masking``): the momentum is in the hook, so use
  ``torch.optim.SGD(momentum=0)``, with weight decay there.

State is keyed by parameter, not by bucket: DDP's rebuild of its buckets
after the first iteration, a new DDP instance after a restart and any
``bucket_cap_mb`` map every residual to its parameter exactly.

Failures are exceptions on every rank (``SparseCommError``, its message
naming the rank): a NaN or infinite gradient on one rank (that rank raises
naming the element, the others naming the rank), settings that differ
across ranks, a rank that dies (the others raise once the process group's
timeout passes), a bucket of an unsupported dtype. A failed bucket's
gradients are in the residuals already (compensated, nothing taken out):
drop the batch, do not retry it.

float16 and bfloat16 buckets are reduced in float32 (residuals are float32)
and returned in the bucket's dtype. CUDA buckets (an NCCL process group) are
staged through host memory: the gradient is copied to the host, reduced
there, and the mean copied back.
"""

import collections
import queue
import threading
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist

from . import _native
from ._native import SparseCommError

__all__ = ["ProcessGroupComm", "SparseState", "sparse_hook", "SparseCommError"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# The most bytes a message may announce (a bucket's dense float32 values
# and their indices at 2^31 elements): a corrupt length allocates nothing.
_MAX_MESSAGE = 1 << 34


def _global_rank(group, rank):
    if group is None:
        return rank
    getter = getattr(dist, "get_global_rank", None)
    if getter is None:  # torch 1.13
        from torch.distributed import distributed_c10d

        getter = distributed_c10d._get_global_rank
    return getter(group, rank)


class ProcessGroupComm:
    """The Rust transport's messages over a process group: ``send``, ``recv``
    and ``exchange`` of bytes by torch.distributed's point-to-point
    operations (``batch_isend_irecv`` of uint8 tensors). ``seconds`` and
    ``messages`` count the time spent here.

    A message is one process-group message where it fits in
    ``first_bytes``: a 16-byte header (the payload's length and how much of
    it follows) and the payload. The receiver posts a buffer of that size,
    which a shorter message fills in part; only a longer payload's rest
    goes in a second message, of the size the header gave.

    An exchange with one peer (``to == frm``, every exchange of 2 ranks)
    sends its first ``ordered_bytes`` in order, the lower rank first, and
    the rest of both directions at once: on gloo two concurrent small
    messages often wait for a scheduler tick (4 ms on this machine, a
    rank per core) where one after the other take 0.1 ms in all."""

    def __init__(self, group=None, first_bytes=1 << 22, ordered_bytes=1 << 15):
        if not 32 <= ordered_bytes <= first_bytes:
            raise ValueError(f"need 32 <= ordered_bytes ({ordered_bytes}) <= first_bytes "
                             f"({first_bytes})")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._peer = [_global_rank(group, r) for r in range(self.size)]
        self.seconds = 0.0
        self.messages = 0
        self._loop = collections.deque()
        self._first = int(first_bytes)
        self._ordered = int(ordered_bytes)
        self._inbox = {}

    def _run(self, sends, recvs):
        ops = [dist.P2POp(dist.isend, t, self._peer[p], self.group) for p, t in sends]
        ops += [dist.P2POp(dist.irecv, t, self._peer[p], self.group) for p, t in recvs]
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    @staticmethod
    def _frame(data, cap):
        """``data``'s first message of at most ``cap`` bytes (the header,
        then what fits) and the rest's tensor (``None`` when nothing is
        left)."""
        n = len(data)
        head = min(n, cap - 16)
        first = np.empty(16 + head, dtype=np.uint8)
        first[:16] = np.frombuffer(n.to_bytes(8, "little") + head.to_bytes(8, "little"),
                                   dtype=np.uint8)
        first[16:] = np.frombuffer(data, dtype=np.uint8, count=head)
        rest = None
        if n > head:
            rest = torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=head).copy())
        return torch.from_numpy(first), rest

    def _box(self, frm):
        """The buffer a first message from ``frm`` lands in."""
        box = self._inbox.get(frm)
        if box is None:
            box = self._inbox[frm] = torch.empty(self._first, dtype=torch.uint8)
        return box

    def _unframe(self, box, frm):
        """What a first message in ``box`` holds: its bytes and the rest's
        (empty) tensor to receive, ``None`` when it was all."""
        view = box.numpy()
        n = int.from_bytes(view[:8].tobytes(), "little")
        head = int.from_bytes(view[8:16].tobytes(), "little")
        if head > min(n, self._first - 16):
            raise SparseCommError(f"rank {self.rank}: a message from rank {frm} has a "
                                  f"malformed header ({head} of {n} bytes)")
        if n > _MAX_MESSAGE:
            raise SparseCommError(f"rank {self.rank}: a message from rank {frm} announces "
                                  f"{n} bytes, over the {_MAX_MESSAGE} any bucket sends")
        got = view[16:16 + head].tobytes()
        rest = torch.empty(n - head, dtype=torch.uint8) if n > head else None
        return got, rest

    def exchange(self, to, data, frm):
        start = time.perf_counter()
        # A message to this rank itself stays here (gloo sends none to self).
        if to == self.rank:
            self._loop.append(bytes(data))
        if frm == self.rank:
            got = self._loop.popleft()
            if to != self.rank:
                self._send(to, data)
        elif to == self.rank:
            got = self._recv(frm)
        else:
            box = self._box(frm)
            if to == frm:
                first, rest_out = self._frame(data, self._ordered)
                if self.rank < to:
                    dist.send(first, self._peer[to], self.group)
                    dist.recv(box, self._peer[frm], self.group)
                else:
                    dist.recv(box, self._peer[frm], self.group)
                    dist.send(first, self._peer[to], self.group)
            else:
                first, rest_out = self._frame(data, self._first)
                self._run([(to, first)], [(frm, box)])
            got, rest_in = self._unframe(box, frm)
            sends = [(to, rest_out)] if rest_out is not None else []
            recvs = [(frm, rest_in)] if rest_in is not None else []
            self._run(sends, recvs)
            if rest_in is not None:
                got += rest_in.numpy().tobytes()
        self.seconds += time.perf_counter() - start
        self.messages += 1
        return got

    def _send(self, to, data):
        first, rest = self._frame(data, self._first)
        dist.send(first, self._peer[to], self.group)
        if rest is not None:
            dist.send(rest, self._peer[to], self.group)

    def _recv(self, frm):
        box = self._box(frm)
        dist.recv(box, self._peer[frm], self.group)
        got, rest = self._unframe(box, frm)
        if rest is not None:
            dist.recv(rest, self._peer[frm], self.group)
            got += rest.numpy().tobytes()
        return got

    def send(self, to, data):
        start = time.perf_counter()
        if to == self.rank:
            self._loop.append(bytes(data))
        else:
            self._send(to, data)
        self.seconds += time.perf_counter() - start
        self.messages += 1

    def recv(self, frm):
        start = time.perf_counter()
        got = self._loop.popleft() if frm == self.rank else self._recv(frm)
        self.seconds += time.perf_counter() - start
        self.messages += 1
        return got


class SparseState:
    """The hook's state (``register_comm_hook(state, sparse_hook)``).

    ``model``: the DDP model (or its module): its parameters that require a
    gradient, in their order, are the hook's. ``algorithm``: a registry
    name with parameters (``sparse_comm.algorithms()`` lists them).
    ``density`` in (0, 1]. ``rule``: ``"topk"`` or ``"rgc"``. ``selector``:
    one of ``sparse_comm.SELECTORS``. ``values``: a value codec of the
    registry (``"f16"``, ``"bf16"``, ``"ssmean"``) for algorithms that take
    one. ``blocking``: reduce each bucket in the hook itself instead of on
    the worker thread (for measuring what the overlap saves).
    """

    def __init__(self, model, algorithm="spardl", density=0.01, rule="topk",
                 process_group=None, *, momentum=0.9, nesterov=False, masking=True,
                 selector="radix", values=None, blocking=False):
        if not 0.0 < float(density) <= 1.0:
            raise ValueError(f"density {density} not in (0, 1]")
        if rule not in ("topk", "rgc"):
            raise ValueError(f"unknown rule {rule!r}: topk or rgc")
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no parameter that requires a gradient")
        self.process_group = process_group
        self._names = [n for n, _ in params]
        self._lens = [p.numel() for _, p in params]
        self._index = {id(p): i for i, (_, p) in enumerate(params)}
        self._settings = {
            "algorithm": algorithm, "density": float(density), "rule": rule,
            "momentum": float(momentum), "nesterov": bool(nesterov), "masking": bool(masking),
            "selector": selector, "values": values,
        }
        self._engine = _native.Engine(self._names, self._lens, algorithm, float(density), rule,
                                      float(momentum), bool(nesterov), bool(masking), selector, values)
        self._blocking = blocking
        self._comm = None
        self._agreed = False
        self._stats = {}
        self._queue = queue.Queue()
        self._worker = None
        self._lock = threading.Lock()

    # --- the hook's work ---------------------------------------------------

    def _digest(self):
        text = repr((sorted(self._settings.items()), self._names, self._lens))
        return zlib.crc32(text.encode()) | (len(self._lens) << 32)

    def _ensure_comm(self):
        if self._comm is None:
            self._comm = ProcessGroupComm(self.process_group)
        if not self._agreed:
            _native.agree(self._comm, self._comm.rank, self._comm.size, self._digest())
            self._agreed = True

    def _reduce(self, bucket_index, idx, buf):
        self._ensure_comm()
        comm = self._comm
        host = buf.detach().to(device="cpu", dtype=torch.float32).contiguous()
        before = comm.seconds
        start = time.perf_counter()
        out, stats = self._engine.reduce(comm, comm.rank, comm.size, idx, host.numpy().tobytes())
        stats["call_s"] = time.perf_counter() - start
        stats["process_group_s"] = comm.seconds - before
        mean = torch.from_numpy(np.frombuffer(out, dtype=np.float32).copy())
        with self._lock:
            acc = self._stats.setdefault(bucket_index, {"calls": 0})
            acc["calls"] += 1
            for k, v in stats.items():
                acc[k] = v
                if k.endswith("_s") or k.startswith("bytes"):
                    acc["total_" + k] = acc.get("total_" + k, 0) + v
        return mean.to(device=buf.device, dtype=buf.dtype).view_as(buf)

    def _work(self):
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            bucket_index, idx, buf, fut = item
            try:
                fut.set_result(self._reduce(bucket_index, idx, buf))
            except BaseException as e:  # every failure reaches DDP as the future's
                fut.set_exception(e if isinstance(e, Exception) else SparseCommError(repr(e)))
            finally:
                self._queue.task_done()

    def _submit(self, bucket, fut):
        buf = bucket.buffer()
        if buf.dtype not in _DTYPES:
            raise TypeError(f"bucket {bucket.index()} is {buf.dtype}: the hook takes "
                            "float32, float16 and bfloat16 buckets")
        try:
            idx = [self._index[id(p)] for p in bucket.parameters()]
        except KeyError:
            raise SparseCommError("a bucket holds a parameter the hook's state does not "
                                  "know: build SparseState with the DDP model") from None
        if self._blocking:
            fut.set_result(self._reduce(bucket.index(), idx, buf))
            return
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="sparse_comm", daemon=True)
            self._worker.start()
        self._queue.put((bucket.index(), idx, buf, fut))

    def wait(self):
        """Waits until every submitted bucket is done."""
        self._queue.join()

    # --- what users read ---------------------------------------------------

    def stats(self):
        """Per bucket index: bytes sent and received, the density sent, and
        seconds in selection, communication and the update (the last call's
        and totals over calls), and the seconds of the call spent in the
        process group's operations (the Python side of each message)."""
        with self._lock:
            return {k: dict(v) for k, v in self._stats.items()}

    def residuals(self):
        """Every parameter's residual, as float32 tensors (copies)."""
        self.wait()
        return [torch.from_numpy(np.frombuffer(b, dtype=np.float32).copy())
                for b in self._engine.residuals()]

    def state_dict(self):
        """Every residual and momentum, and the selectors' and collectives'
        state, with the settings they belong to (pickles with
        ``torch.save``). Call it between steps."""
        self.wait()
        tensors, tree = self._engine.save_state()
        return {
            "format": "sparse_comm.SparseState", "version": 1,
            "settings": dict(self._settings), "names": list(self._names),
            "lens": list(self._lens), "tensors": bytes(tensors), "tree": bytes(tree),
        }

    def load_state_dict(self, state):
        """Restores ``state_dict()``'s output into a state built alike (the
        same settings and parameters): checked, all or nothing; the next
        steps are bit for bit those the saved state would have taken."""
        self.wait()
        if state.get("format") != "sparse_comm.SparseState" or state.get("version") != 1:
            raise SparseCommError("not a sparse_comm.SparseState state (format 1)")
        for key, here in (("settings", self._settings), ("names", self._names),
                          ("lens", self._lens)):
            if state.get(key) != here:
                raise SparseCommError(f"the state's {key} differ from this hook's: "
                                      f"saved {state.get(key)!r}, here {here!r}")
        self._engine.load_state(state["tensors"], state["tree"])


def sparse_hook(state, bucket):
    """The DDP communication hook: returns at once a future that the
    state's worker completes with the bucket's sparse mean, so that backward
    computation of later buckets overlaps earlier buckets' communication."""
    fut = torch.futures.Future()
    try:
        state._submit(bucket, fut)
    except BaseException as e:
        fut.set_exception(e)
    return fut
