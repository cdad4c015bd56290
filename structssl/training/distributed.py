"""Several processes (Lightning DDP): what is reduced across ranks, and what refuses to run sharded.

structssl scales out on Lightning's own distributed engine (``--trainer.devices=N
--trainer.strategy=ddp``; gloo on CPU, NCCL on GPUs, several nodes through Lightning's
launchers). Each process (rank) trains on its shard of the labeled and unlabeled examples
(:class:`~structssl.data.SemiSupervisedDataModule` shards without repeating an
example when a split is one full batch), and the procedures reduce across ranks what must be
computed over the whole corpus, so that N processes compute what one process computes:

* **objective and gradient** (every procedure on :meth:`StructuredModule.training_step
  <structssl.training.modules.StructuredModule.training_step>` and the composite procedures):
  at every closure evaluation each rank computes its shard's objective and gradient (with
  autograd, outside DDP's own gradient hooks), and one ``all_reduce`` sums them, each shard's
  mean weighted by its share of the examples (:func:`shard_shares`). Every rank therefore sees
  the objective and gradient of the whole corpus, and L-BFGS takes identical steps and line
  searches on all ranks (the same number of closure evaluations: no rank can wait in a
  collective that another never reaches). A full batch evaluated in length chunks
  (``supports_chunks``, :class:`~structssl.data.CoNLLDataModule`) is the rank's shard cut into
  chunks, reduced the same way;
* **corpus-level statistics** of the composite procedures (seed 004): the constraint rates
  are estimated from the labeled labels of all ranks, and the constrained label assignment
  (corpus dual decomposition, its multipliers) and collective evaluation decoding run on the
  potentials of the whole corpus, gathered from all ranks (:func:`gather_rows`), each rank
  keeping its own examples' labels (the decomposition is independent of the corpus order
  beyond rounding: ties up to rounding are broken canonically, and only the corpus
  multipliers carry over between rounds).

A procedure whose corpus-level decisions are not reduced refuses ``world_size > 1`` at the
start of ``fit`` (:func:`check_sharding`, reading the class attribute ``sharding_refusal``),
with an error saying what to use instead; see ``docs/distributed.md`` for the table.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

__all__ = [
    "world_size",
    "rank",
    "is_distributed",
    "check_sharding",
    "shard_shares",
    "set_shard_shares",
    "reduced_evaluation",
    "save_resume_state",
    "load_resume_state",
    "restore_resumed_rng",
    "all_reduce_sum",
    "gather_rows",
    "gather_potentials",
]


def world_size() -> int:
    """The number of processes of the default process group (1 without one)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return 1


def rank() -> int:
    """This process's rank in the default process group (0 without one)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0


def is_distributed() -> bool:
    """Whether more than one process trains together."""
    return world_size() > 1


def check_sharding(module: Any) -> None:
    """Refuse ``world_size > 1`` for a procedure that cannot train sharded.

    A procedure declares why in its class attribute ``sharding_refusal`` (a sentence ending
    with what to use instead); the nabla-TSVM / co-training label-balance penalty (a
    non-linear function of the corpus's expected label proportions) refuses too.

    Raises:
        RuntimeError: naming the procedure, the number of processes and what to do instead.
    """
    size = world_size()
    if size <= 1:
        return
    reason: Optional[str] = getattr(module, "sharding_refusal", None)
    if reason is None and float(getattr(module, "balance_weight", 0.0) or 0.0) > 0:
        reason = (
            "its label-balance penalty (balance_weight > 0) is a non-linear function of the "
            "expected label proportions of the whole unlabeled corpus, which is not reduced "
            "across processes; train on one process (--trainer.devices=1), or set "
            "balance_weight: 0"
        )
    if reason is not None:
        raise RuntimeError(
            f"{type(module).__name__} cannot train on {size} processes (world_size = {size}): "
            f"{reason}. See docs/distributed.md."
        )


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` over all ranks, in place (unchanged on one process); returns it."""
    if is_distributed():
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
    return tensor


def shard_shares(sizes: Sequence[int], device: Any = None) -> list[float]:
    """Each shard's weight in the average over ranks: ``world_size * size / total size``.

    The procedures' objective takes means over a batch; with shards of unequal size the plain
    average over ranks of the shard means is not the mean over the union. Scaling each shard's
    mean by its share makes the average over ranks exactly the union's mean. One
    ``all_reduce`` of the sizes (``[1.0, ...]`` on one process; a split with no example on any
    rank gets 1).
    """
    if not is_distributed():
        return [1.0] * len(sizes)
    local = torch.tensor([float(s) for s in sizes], dtype=torch.float64, device=device)
    total = all_reduce_sum(local.clone())
    size = world_size()
    return [
        size * float(mine) / float(all_) if float(all_) > 0 else 1.0
        for mine, all_ in zip(local.tolist(), total.tolist())
    ]


def set_shard_shares(module: Any, batch: Any) -> None:
    """Set ``module._shard_shares``: the :func:`shard_shares` of this rank's labeled and
    unlabeled training batch (``(1.0, 1.0)`` on one process), read by the procedures'
    objective (``StructuredModule._combine``)."""
    if not is_distributed():
        module._shard_shares = (1.0, 1.0)
        return
    from structssl.training.modules import as_chunks, num_examples

    labeled, unlabeled = map(as_chunks, module._split(batch))
    sizes = [num_examples(labeled), num_examples(unlabeled)]
    share_l, share_u = shard_shares(sizes, labeled[0]["inputs"].device)
    module._shard_shares = (share_l, share_u)


def _accumulate_grad(module: Any, loss: Tensor, *args: Any, **kwargs: Any) -> None:
    """``manual_backward`` on several ranks: add d loss / d params to ``.grad`` with autograd
    (DDP's gradient hooks do not fire; the reduction is :func:`reduced_evaluation`'s)."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not loss.requires_grad:
        return
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    for p, g in zip(params, grads):
        if g is None:
            continue
        p.grad = g.detach().clone() if p.grad is None else p.grad + g.detach()


def reduced_evaluation(module: Any, evaluate: Callable[[], Any]) -> Any:
    """One closure evaluation; on several ranks, objective and gradient averaged over ranks.

    ``evaluate()`` computes the rank's objective terms (a named tuple with an ``objective``
    field, e.g. :class:`~structssl.training.modules.ObjectiveTerms`) and accumulates its
    gradient through ``module.manual_backward`` (any number of calls). On one process it is
    simply called. On several, ``module.manual_backward`` computes gradients with
    :func:`torch.autograd.grad` meanwhile (outside DDP's gradient hooks, so the number of
    evaluations is the optimiser's business only), then one ``all_reduce`` (in float64)
    averages the objective and the gradients over the ranks and writes the gradients to the
    parameters' ``.grad``. Returns the terms with ``objective`` replaced by the averaged one (a
    detached tensor): what the optimiser (the L-BFGS line search) must see so that every rank
    takes the same decisions.
    """
    if not is_distributed():
        return evaluate()
    module.manual_backward = functools.partial(_accumulate_grad, module)
    try:
        terms = evaluate()
    finally:
        del module.manual_backward
    objective = terms.objective
    params = [p for p in module.parameters() if p.requires_grad]
    device = objective.device
    flat = [objective.detach().reshape(1).to(device=device, dtype=torch.float64)]
    for p in params:
        flat.append(
            torch.zeros(p.numel(), dtype=torch.float64, device=device) if p.grad is None
            else p.grad.detach().reshape(-1).to(device=device, dtype=torch.float64)
        )
    buffer = all_reduce_sum(torch.cat(flat)) / world_size()
    offset = 1
    for p in params:
        piece = buffer[offset : offset + p.numel()].view(p.shape)
        offset += p.numel()
        p.grad = piece.to(dtype=p.dtype, device=p.device).clone()
    return terms._replace(objective=buffer[0].to(objective.dtype))


# ---------------------------------------------------------------------- exact resume
def save_resume_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """Keep the RNG states (torch, CUDA, numpy, Python) in ``checkpoint["structssl_rng"]``:
    restored at the first training epoch of a resumed run (:func:`restore_resumed_rng`), so
    the shuffling and any other random draw continue as in the uninterrupted run."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    else:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        # plain types: checkpoints are read with torch.load(weights_only=True)
        state["numpy"] = [str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)]
    checkpoint["structssl_rng"] = state


def load_resume_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """On a checkpoint restored by a trainer (``fit --ckpt_path``): convert the module to
    float64 first when the trainer runs in float64 and the checkpoint holds float64 weights
    (else they would be loaded through float32), and keep the RNG states for
    :func:`restore_resumed_rng`. Nothing happens for ``load_from_checkpoint`` (no trainer)."""
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return
    precision = str(getattr(trainer, "precision", ""))
    if precision.startswith("64"):
        state = checkpoint.get("state_dict", {})
        own = dict(module.named_parameters())
        if any(
            isinstance(v, Tensor) and v.dtype == torch.float64 and k in own
            and own[k].dtype != torch.float64 for k, v in state.items()
        ):
            module.to(torch.float64)
    module._resume_rng = checkpoint.get("structssl_rng")


def restore_resumed_rng(module: Any) -> None:
    """Restore the RNG states kept by :func:`load_resume_state` (once, at the first training
    epoch of a resumed run, before its data loaders draw their shuffle)."""
    state = getattr(module, "_resume_rng", None)
    if not state:
        return
    module._resume_rng = None
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))


def gather_rows(tensor: Tensor) -> tuple[Tensor, slice]:
    """All ranks' rows of ``tensor`` (dim 0), concatenated in rank order, and this rank's slice.

    Unequal row counts are padded for the collective and trimmed after. On one process:
    ``(tensor, slice(0, len(tensor)))``.
    """
    n = int(tensor.shape[0])
    if not is_distributed():
        return tensor, slice(0, n)
    size = world_size()
    counts = torch.zeros(size, dtype=torch.long, device=tensor.device)
    counts[rank()] = n
    counts = all_reduce_sum(counts).tolist()
    longest = max(counts)
    padded = tensor.new_zeros((longest, *tensor.shape[1:]))
    padded[:n] = tensor
    parts = [torch.empty_like(padded) for _ in range(size)]
    torch.distributed.all_gather(parts, padded.contiguous())
    whole = torch.cat([part[:c] for part, c in zip(parts, counts)])
    start = sum(counts[: rank()])
    return whole, slice(start, start + n)


def gather_potentials(potentials: Any) -> tuple[Any, slice]:
    """:func:`gather_rows` of a potentials tensor or a named tuple of them (e.g.
    ``MultiLabelPotentials``), batched over dim 0."""
    if isinstance(potentials, Tensor):
        return gather_rows(potentials)
    fields = [gather_rows(t) for t in potentials]
    mine = fields[0][1]
    return type(potentials)(*(f[0] for f in fields)), mine
