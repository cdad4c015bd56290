"""The base of the Lightning data modules: labeled / unlabeled / dev / test splits for
semi-supervised training, and their loaders.

The data modules are importable as ``structssl.data.CoNLLDataModule`` etc. (the
:mod:`structssl.data` package imports them, and Lightning, only on first use). Every data module

* splits a training pool into a **labeled** part and an **unlabeled** part, either by count
  (``num_labeled``) or by degree of labeling (``labeled_fraction``, the fraction of the pool
  that keeps its labels), with a seeded permutation (``seed``), so the same arguments always
  give the same split;
* hands the training step the labeled and the unlabeled batches *together* (one
  :class:`~pytorch_lightning.utilities.CombinedLoader` in ``"max_size_cycle"`` mode: an epoch
  is as long as the longer of the two loaders, the shorter one cycles);
* exposes ``num_labeled_examples``, ``num_unlabeled_examples`` and ``num_labels`` after
  :meth:`setup`, which the training procedures read to scale their objective.

Batch format (dicts of tensors, the :func:`~structssl.data.batch.collate_sequences` layout):

=====================  =======================================================================
where                  batch
=====================  =======================================================================
training step          ``{"labeled": L, "unlabeled": U}`` (``"unlabeled"`` only when the pool
                       has unlabeled examples and the procedure uses them: a procedure whose
                       class attribute ``uses_unlabeled`` is ``False`` gets labeled batches
                       only, still under ``"labeled"``)
validation / test      ``L`` (dev / test examples, with labels)
predict                ``L`` of the test set (labels included; ignored by ``predict_step``)
=====================  =======================================================================

``L`` holds ``inputs`` (B, N, D) float (synthetic HMM) or (B, N, F) long feature indices
(CoNLL), ``labels`` (B, N) long and ``lengths`` (B,) long; with two views also ``inputs_b``
(the second view's inputs, same leading dims). ``U`` is the same without ``labels`` (the
unlabeled examples' labels are never handed to the training step).

``batch_size=None`` (the default) puts a whole split in one batch: the full-batch L-BFGS fast
path of the linear scorers on small data. Give ``batch_size`` (labeled) and
``unlabeled_batch_size`` for mini-batch training.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import CombinedLoader
from torch import Tensor
from torch.utils.data import DataLoader

from structssl.data.batch import SEQUENCE_KEYS, batch_to_device, collate_sequences

__all__ = [
    "SemiSupervisedDataModule",
    "ShardSampler",
    "split_pool",
    "seeded_parts",
    "with_index",
    "without_labels",
    "stack_collate",
    "DEFAULT_LABELED_FRACTION",
]

Example = dict[str, Tensor]

#: degree of labeling when neither ``num_labeled`` nor ``labeled_fraction`` is given
DEFAULT_LABELED_FRACTION = 0.1

#: per-position keys padded by the collate function (the second view's inputs included)
_SEQUENCE_KEYS = (*SEQUENCE_KEYS, "inputs_b")


def _count(value: int, name: str, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum``, else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")
    return value


def _check_count(value: Optional[int], name: str, minimum: int = 0) -> Optional[int]:
    """:func:`_count` for an optional count (``None`` passes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} or None; got {value!r}")
    return value


def seeded_parts(size: int, sizes: list[int], seed: int) -> list[Tensor]:
    """The consecutive parts of a seeded permutation of ``range(size)``: the first
    ``sizes[0]`` indices, the next ``sizes[1]``, ..., and the rest as the last part.

    The one seeded split every data module uses (``torch.randperm`` with
    ``torch.Generator().manual_seed(seed)``), so that the same seed always gives the same parts.

    Returns:
        ``len(sizes) + 1`` long index tensors.
    """
    if sum(sizes) > size:
        raise ValueError(f"the parts {list(sizes)} do not fit in {size} examples")
    perm = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    bounds = [0]
    for part in sizes:
        bounds.append(bounds[-1] + part)
    return [perm[a:b] for a, b in zip(bounds, bounds[1:])] + [perm[bounds[-1] :]]


def with_index(examples: list[Example]) -> list[Example]:
    """Copies of ``examples`` with ``index`` (a 0-d long tensor): the position within its split
    (what label switching and corpus constraints key their per-example state by)."""
    return [dict(ex, index=torch.tensor(i)) for i, ex in enumerate(examples)]


def without_labels(examples: list[Example]) -> list[Example]:
    """Copies of ``examples`` without ``labels`` (the unlabeled split)."""
    return [{k: v for k, v in ex.items() if k != "labels"} for ex in examples]


def _check_lengths(owner: str, splits: dict[str, list[Example]]) -> None:
    """Refuse an example whose per-position tensors are empty (a sequence of length 0),
    naming its split and index: the structures need at least one position."""
    for split, examples in splits.items():
        for i, ex in enumerate(examples):
            for key in _SEQUENCE_KEYS:
                value = ex.get(key)
                if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == 0:
                    raise user_error(
                        f"{owner}: the {split} example {i} has length 0 ({key!r} of shape "
                        f"{tuple(value.shape)}); every sequence needs at least one position: "
                        "drop the empty ones"
                    )


def _check_examples(owner: str, splits: dict[str, list[Example]], padded: bool) -> None:
    """Refuse, naming the split and the example, what would fail later inside batching or the
    first objective with a batch position for a name: examples of one split with other keys
    (e.g. a dev example without ``labels``), a float tensor holding NaN or +-inf, and (``padded``:
    the padding collate) dense per-position inputs of another width than the first example's,
    across every split (one model reads them all)."""
    widths: dict[str, tuple[str, int, tuple[int, ...]]] = {}
    for split, examples in splits.items():
        keys = sorted(examples[0]) if examples else []
        for i, ex in enumerate(examples):
            if sorted(ex) != keys:
                raise user_error(
                    f"{owner}: the {split} example {i} has the keys {sorted(ex)}, and example 0 "
                    f"{keys}; every example of a split needs the same keys (dev and test "
                    "examples need 'labels')"
                )
            lengths = {k: int(v.shape[0]) for k, v in ex.items()
                       if padded and k in _SEQUENCE_KEYS and isinstance(v, Tensor) and v.dim() > 0}
            if len(set(lengths.values())) > 1:
                raise user_error(
                    f"{owner}: the {split} example {i} has per-position tensors of different "
                    f"lengths {lengths}; they need one length, the example's"
                )
            for key, value in ex.items():
                head = examples[0][key]
                if isinstance(value, Tensor) and isinstance(head, Tensor) and value.dtype != head.dtype:
                    raise user_error(
                        f"{owner}: {key!r} of the {split} example {i} has dtype {value.dtype}, and "
                        f"of example 0 {head.dtype}; every example needs one dtype per key"
                    )
                if not isinstance(value, Tensor) or not value.is_floating_point():
                    continue
                finite = torch.isfinite(value)
                if not bool(finite.all()):
                    where = (~finite).nonzero()[0].tolist()
                    bad = value[tuple(where)].item()
                    raise user_error(
                        f"{owner}: the {split} example {i} has {bad} in {key!r} at {where}; "
                        "inputs must be finite numbers"
                    )
                if padded and key in _SEQUENCE_KEYS and value.dim() > 1:
                    first = widths.setdefault(key, (split, i, tuple(value.shape[1:])))
                    if tuple(value.shape[1:]) != first[2]:
                        raise user_error(
                            f"{owner}: {key!r} of the {split} example {i} has shape "
                            f"{tuple(value.shape)}, and of the {first[0]} example {first[1]} "
                            f"(n, {', '.join(map(str, first[2]))}); dense per-position inputs "
                            "need one width in every example of every split"
                        )


def _check_stackable(owner: str, splits: dict[str, list[Example]]) -> None:
    """Under the padding collate, refuse a tensor key outside the padded per-position keys
    whose shape differs between the examples of a split (it is stacked, and would fail inside
    batching), naming the key, the split and two examples."""
    for split, examples in splits.items():
        if not examples:
            continue
        for key, value in examples[0].items():
            if key in _SEQUENCE_KEYS or not isinstance(value, Tensor):
                continue
            for i, ex in enumerate(examples):
                other = ex.get(key)
                if isinstance(other, Tensor) and other.shape != value.shape:
                    raise user_error(
                        f"{owner}: {key!r} has shape {tuple(value.shape)} in {split} example 0 and "
                        f"{tuple(other.shape)} in example {i}; keys other than the padded "
                        f"per-position ones {list(_SEQUENCE_KEYS)} are stacked, so they need one "
                        "shape in every example"
                    )


def _check_label_range(owner: str, splits: dict[str, list[Example]], num_labels: Optional[int]) -> None:
    """Refuse a per-position label id >= ``num_labels`` (or < 0), naming the split and example
    (it would fail at the first loss, without either)."""
    if not num_labels:
        return
    for split, examples in splits.items():
        for i, ex in enumerate(examples):
            labels = ex.get("labels")
            if isinstance(labels, Tensor) and labels.numel() and not labels.is_floating_point():
                low, high = int(labels.min()), int(labels.max())
                if low < 0 or high >= num_labels:
                    raise user_error(
                        f"{owner}: the {split} example {i} has label ids in [{low}, {high}]; "
                        f"expected ids in [0, num_labels) = [0, {num_labels})"
                    )


def stack_collate(examples: list[Example]) -> dict[str, Any]:
    """One batch of fixed-size examples (no padding, no ``lengths``): every key stacked, e.g.
    ``inputs`` (B, D) and, when present, ``labels`` (B,) or (B, K)."""
    if len(examples) == 0:
        raise ValueError("examples must hold at least one example; got none")
    return {key: torch.stack([ex[key] for ex in examples]) for key in examples[0]}


def _check_bandwidth(sigma: Any, allow_none: bool = False, name: str = "kernel_sigma"
                     ) -> Optional[float]:
    """``kernel_sigma`` (or another bandwidth option, ``name``) of the data modules' random
    Fourier features: a finite number > 0 (or None where a default bandwidth is derived from
    the data)."""
    if sigma is None and allow_none:
        return None
    if (isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0
            or not math.isfinite(sigma)):
        raise ValueError(f"{name} must be a float > 0{' or None' if allow_none else ''}; got {sigma!r}")
    return float(sigma)


def _random_fourier_features(inputs: Tensor, num: int, sigma: float, seed: int) -> Tensor:
    """Random Fourier features of the RBF kernel ``exp(-||x - x'||^2 / (2 sigma^2))``
    (Rahimi and Recht): ``sqrt(2 / num) cos(x W + b)`` with ``W`` (D, num) ~ N(0, 1 / sigma^2)
    and ``b`` ~ U[0, 2 pi), both drawn from a generator seeded with ``seed``, so that
    ``phi(x) . phi(x')`` approximates the kernel. The data modules' ``random_features``
    option: a kernel machine's features for the linear scorers.

    Args:
        inputs: (..., D) float points.
        num: the number of features, >= 1.
        sigma: the kernel's bandwidth, > 0.
        seed: the seed of ``W`` and ``b`` (the same seed, the same map).

    Returns:
        (..., num) float32 (computed in float64).
    """
    _count(num, "random_features", 1)
    bandwidth = _check_bandwidth(sigma)
    assert bandwidth is not None
    g = torch.Generator().manual_seed(seed)
    dim = int(inputs.shape[-1])
    w = torch.randn(dim, num, generator=g, dtype=torch.float64) / bandwidth
    b = 2 * torch.pi * torch.rand(num, generator=g, dtype=torch.float64)
    features = (2.0 / num) ** 0.5 * torch.cos(inputs.to(torch.float64) @ w + b)
    return features.to(torch.float32)


def split_pool(
    pool_size: int,
    num_labeled: Optional[int] = None,
    labeled_fraction: Optional[float] = None,
    num_unlabeled: Optional[int] = None,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Seeded split of a training pool into labeled and unlabeled indices.

    The pool is permuted with ``torch.Generator().manual_seed(seed)``; the first
    ``num_labeled`` indices (or ``round(labeled_fraction * pool_size)``, at least 1) are labeled,
    the next ``num_unlabeled`` (default: all the rest) unlabeled.

    Args:
        pool_size: number of training examples available.
        num_labeled: labeled examples (by count); exclusive with ``labeled_fraction``.
        labeled_fraction: degree of labeling in (0, 1]; exclusive with ``num_labeled``. When
            neither is given the degree of labeling is :data:`DEFAULT_LABELED_FRACTION` (10%).
        num_unlabeled: unlabeled examples taken from the rest (default: all of it).
        seed: the permutation seed.

    Returns:
        ``(labeled, unlabeled)`` long index tensors into the pool.

    Raises:
        ValueError: both ``num_labeled`` and ``labeled_fraction``, or sizes that do not fit in
            the pool.
    """
    _check_count(pool_size, "pool_size", 1)
    if num_labeled is not None and labeled_fraction is not None:
        raise ValueError(
            "at most one of num_labeled and labeled_fraction may be given; got "
            f"num_labeled={num_labeled!r}, labeled_fraction={labeled_fraction!r}"
        )
    if num_labeled is None and labeled_fraction is None:
        labeled_fraction = DEFAULT_LABELED_FRACTION
    if labeled_fraction is not None:
        if isinstance(labeled_fraction, bool) or not 0.0 < float(labeled_fraction) <= 1.0:
            raise ValueError(f"labeled_fraction must be in (0, 1]; got {labeled_fraction!r}")
        num_labeled = max(1, round(float(labeled_fraction) * pool_size))
    _check_count(num_labeled, "num_labeled", 1)
    _check_count(num_unlabeled, "num_unlabeled", 0)
    assert num_labeled is not None
    if num_labeled > pool_size:
        raise ValueError(
            f"num_labeled must be <= the pool size {pool_size}; got {num_labeled}"
        )
    rest = pool_size - num_labeled
    if num_unlabeled is None:
        num_unlabeled = rest
    elif num_unlabeled > rest:
        raise ValueError(
            f"num_unlabeled must be <= the pool size minus the labeled examples "
            f"({pool_size} - {num_labeled} = {rest}); got {num_unlabeled}"
        )
    labeled, unlabeled, _ = seeded_parts(pool_size, [num_labeled, num_unlabeled], seed)
    return labeled, unlabeled


class _ListDataset(torch.utils.data.Dataset):
    """A list of example dicts."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


class ShardSampler(torch.utils.data.DistributedSampler):
    """One process's shard of a split when several processes train together (Lightning DDP).

    Rank ``r`` of ``W`` takes positions ``r, r + W, ...`` of the epoch's order: a permutation
    drawn from ``seed`` and the epoch (``set_epoch``, called by Lightning; the same on every
    rank) when ``shuffle``, else the split's order. With ``pad=False`` (a split that is one
    full batch) no example is repeated, so the shards together are exactly the split (their
    sizes may differ by one; the procedures weight each shard's mean by its size); with
    ``pad=True`` (mini-batches) the order is padded by repeating its first examples to a
    multiple of ``W``, as ``DistributedSampler`` does, so every rank runs the same number of
    steps. Being a ``DistributedSampler``, Lightning keeps it instead of injecting its own.

    Args:
        size: examples in the split.
        num_replicas: ``W``, the number of processes.
        rank: this process's rank.
        shuffle: a new order each epoch.
        seed: the shuffling seed (the same on every rank).
        pad: repeat examples so that every shard has the same size.
    """

    def __init__(
        self, size: int, num_replicas: int, rank: int, shuffle: bool, seed: int, pad: bool
    ) -> None:
        # not DistributedSampler.__init__: no dataset and no process group needed
        self.size = size
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = int(seed)
        self.pad = pad
        self.epoch = 0
        self.drop_last = False
        total = -(-size // num_replicas) * num_replicas if pad else size
        self.total_size = total
        self.num_samples = len(range(rank, total, num_replicas))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Any:
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + 1_000_003 * self.epoch)
            order = torch.randperm(self.size, generator=gen).tolist()
        else:
            order = list(range(self.size))
        if self.pad and self.total_size > self.size:
            extra = self.total_size - self.size
            order += (order * (1 + extra // max(self.size, 1)))[:extra]
        return iter(order[self.rank : self.total_size : self.num_replicas])


def is_data_error(err: BaseException) -> bool:
    """Whether ``err`` was raised while a data module read its files (see
    :meth:`SemiSupervisedDataModule.setup`): a user's data or path, not a bug."""
    return bool(getattr(err, "_structssl_data_error", False))


def user_error(message: str) -> ValueError:
    """A ``ValueError`` marked as the user's (their data, paths, constraints or classes), which
    the ``structssl`` command prints as one line without a traceback (:func:`is_data_error`)."""
    error = ValueError(message)
    error._structssl_data_error = True  # type: ignore[attr-defined]
    return error


class SemiSupervisedDataModule(pl.LightningDataModule):
    """Base of the data modules: loaders over example lists made by :meth:`build` (see module doc).

    Subclasses implement :meth:`build`, returning the four example lists (labeled training
    examples with ``labels``; unlabeled ones without), and set ``num_labels``.

    Args:
        batch_size: labeled training batch size (``None``: the whole labeled set, one batch).
        unlabeled_batch_size: unlabeled batch size (``None``: the whole unlabeled set).
        eval_batch_size: dev / test / predict batch size (``None``: the whole split).
        shuffle: reshuffle the training loaders every epoch (seeded by Lightning's seed).
        num_workers: ``DataLoader`` workers.

    Several processes (Lightning DDP, ``--trainer.devices=N --trainer.strategy=ddp``): every
    loader hands each rank its :class:`ShardSampler` shard (a split that is one full batch is
    split without repeating an example); the shuffling seed is rank 0's, kept in checkpoints
    (``state_dict``). See ``docs/distributed.md``.
    """

    #: the number of labels (a class attribute, or set in ``__init__`` / ``build``)
    num_labels: int = 0

    def __init__(
        self,
        batch_size: Optional[int] = None,
        unlabeled_batch_size: Optional[int] = None,
        eval_batch_size: Optional[int] = None,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.batch_size = _check_count(batch_size, "batch_size", 1)
        self.unlabeled_batch_size = _check_count(unlabeled_batch_size, "unlabeled_batch_size", 1)
        self.eval_batch_size = _check_count(eval_batch_size, "eval_batch_size", 1)
        self.shuffle = bool(shuffle)
        self.num_workers = _check_count(num_workers, "num_workers", 0)
        self._splits: Optional[dict[str, list[Example]]] = None
        self._shuffle_seed: Optional[int] = None

    # ------------------------------------------------------------------ to implement
    def build(self) -> dict[str, list[Example]]:
        """The examples of the splits ``labeled``, ``unlabeled``, ``dev``, ``test``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lightning hooks
    def setup(self, stage: Optional[str] = None) -> None:
        """Build the splits once (deterministic given the arguments). A file that is missing or
        cannot be read (``OSError`` / ``ValueError``, their messages naming the file and line)
        propagates unchanged, marked by :func:`is_data_error` so that the command line reports
        it without a traceback."""
        if self._splits is None:
            try:
                splits = self.build()
            except (OSError, ValueError) as err:
                err._structssl_data_error = True  # type: ignore[attr-defined]
                raise
            expected = {"labeled", "unlabeled", "dev", "test"}
            if not isinstance(splits, dict) or set(splits) != expected:
                got = sorted(splits) if isinstance(splits, dict) else type(splits).__name__
                raise user_error(
                    f"{type(self).__name__}.build() must return a dict of the example lists "
                    f"{sorted(expected)} (empty lists allowed); got {got}"
                )
            _check_lengths(type(self).__name__, splits)
            padded = type(self).collate is SemiSupervisedDataModule.collate
            _check_examples(type(self).__name__, splits, padded)
            if padded:
                _check_stackable(type(self).__name__, splits)
                _check_label_range(type(self).__name__, splits, self.num_labels)
            names = getattr(self, "label_names", None)
            if self.num_labels and isinstance(names, (list, tuple)) and len(names) != self.num_labels:
                raise user_error(
                    f"{type(self).__name__}: label_names has {len(names)} names {list(names)[:10]} "
                    f"for num_labels = {self.num_labels}; give one name per label, in label-id order"
                )
            self._splits = splits

    def model_sizes(self) -> dict[str, Any]:
        """What a model takes from this data (a procedure's setup passes it to the structure's
        and the scorer's ``resolve_sizes``): ``num_labels`` when set, and ``input_dim`` (the
        last dim of the first training example's ``inputs``) for dense (floating-point)
        inputs; index features leave their size to the config (a feature space may be larger
        than the indices one data set uses). Data modules with more to say (tags, task,
        feature counts) override it."""
        self.setup()
        sizes: dict[str, Any] = {}
        if self.num_labels:
            sizes["num_labels"] = int(self.num_labels)
        first = next((ex for key in ("labeled", "unlabeled") for ex in self.splits[key]), None)
        inputs = first.get("inputs") if first is not None else None
        if isinstance(inputs, Tensor) and inputs.dim() >= 1 and inputs.is_floating_point():
            sizes["input_dim"] = int(inputs.shape[-1])
        return sizes

    @property
    def splits(self) -> dict[str, list[Example]]:
        """The example lists (builds them on first use)."""
        if self._splits is None:
            self.setup()
        assert self._splits is not None
        return self._splits

    @property
    def num_labeled_examples(self) -> int:
        """n, the number of labeled training examples."""
        return len(self.splits["labeled"])

    @property
    def num_unlabeled_examples(self) -> int:
        """m, the number of unlabeled training examples."""
        return len(self.splits["unlabeled"])

    def transfer_batch_to_device(
        self, batch: Any, device: torch.device, dataloader_idx: int
    ) -> Any:
        """Lightning's hook: the tensors to ``device``, the token lists left as they are
        (:func:`~structssl.data.batch.batch_to_device`)."""
        return batch_to_device(batch, device)

    @staticmethod
    def collate(examples: list[Example]) -> dict[str, Any]:
        """One batch (the loaders' ``collate_fn``): padded tensors and ``lengths``."""
        return collate_sequences(examples, sequence_keys=_SEQUENCE_KEYS)

    def _loader(
        self, examples: list[Example], batch_size: Optional[int], shuffle: bool
    ) -> DataLoader:
        size = len(examples) if batch_size is None else batch_size
        shard = self._shard_sampler(len(examples), batch_size, shuffle)
        return DataLoader(
            _ListDataset(examples),
            batch_size=max(size, 1),
            shuffle=shuffle if shard is None else False,
            sampler=shard,
            collate_fn=self.collate,
            num_workers=self.num_workers,
        )

    def _shard_sampler(
        self, size: int, batch_size: Optional[int], shuffle: bool
    ) -> Optional[ShardSampler]:
        """This rank's :class:`ShardSampler` of a split under a process group (Lightning DDP,
        even of one process: Lightning would otherwise put a shuffling sampler of its own on
        the training loaders, whatever ``shuffle`` says); ``None`` without one."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return None
        world, rank = dist.get_world_size(), dist.get_rank()
        if 0 < size < world:
            raise ValueError(
                f"a split of {size} examples cannot be sharded over {world} processes (each "
                f"needs at least one example); use at most {size} processes (--trainer.devices)"
            )
        if self._shuffle_seed is None:
            import os

            seed = [int(os.environ.get("PL_GLOBAL_SEED", torch.initial_seed() % 2**31))]
            dist.broadcast_object_list(seed, src=0)  # one order on every rank
            self._shuffle_seed = int(seed[0])
        return ShardSampler(size, world, rank, shuffle, self._shuffle_seed, batch_size is not None)

    def state_dict(self) -> dict[str, Any]:
        """The shuffling seed of several processes (kept in checkpoints for exact resume)."""
        return {} if self._shuffle_seed is None else {"shuffle_seed": self._shuffle_seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("shuffle_seed") is not None:
            self._shuffle_seed = int(state_dict["shuffle_seed"])

    def _procedure(self) -> Any:
        """The LightningModule of the attached trainer (``None`` outside a trainer)."""
        trainer = getattr(self, "trainer", None)
        return getattr(trainer, "lightning_module", None) if trainer is not None else None

    def _wants_unlabeled(self) -> bool:
        return bool(getattr(self._procedure(), "uses_unlabeled", True))

    def _restore_resumed_rng(self) -> None:
        """Exact resume: a procedure restored from a checkpoint restores the interrupted run's
        RNG state here, just before Lightning draws the epoch's shuffle from it."""
        restore = getattr(self._procedure(), "restore_resumed_rng", None)
        if callable(restore):
            restore()

    def train_dataloader(self) -> CombinedLoader:
        self._restore_resumed_rng()
        loaders: dict[str, DataLoader] = {
            "labeled": self._loader(self.splits["labeled"], self.batch_size, self.shuffle)
        }
        if self.splits["unlabeled"] and self._wants_unlabeled():
            loaders["unlabeled"] = self._loader(
                self.splits["unlabeled"], self.unlabeled_batch_size, self.shuffle
            )
        return CombinedLoader(loaders, mode="max_size_cycle")

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.splits["dev"], self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.splits["test"], self.eval_batch_size, False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.splits["test"], self.eval_batch_size, False)

