"""Lightning data modules: labeled / unlabeled / dev / test splits for semi-supervised training.

Import it as ``structssl.data.datamodule`` (the :mod:`structssl.data` package itself imports no
Lightning). Every data module

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

from typing import Any, Literal, Optional

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import CombinedLoader
from torch import Tensor
from torch.utils.data import DataLoader

from structssl.data.batch import SEQUENCE_KEYS, collate_sequences
from structssl.data.synthetic import hmm_sequences

__all__ = [
    "SemiSupervisedDataModule",
    "ShardSampler",
    "SyntheticHMMDataModule",
    "CoNLLDataModule",
    "split_pool",
    "DEFAULT_LABELED_FRACTION",
]

Example = dict[str, Tensor]

#: degree of labeling when neither ``num_labeled`` nor ``labeled_fraction`` is given
DEFAULT_LABELED_FRACTION = 0.1

#: per-position keys padded by the collate function (the second view's inputs included)
_SEQUENCE_KEYS = (*SEQUENCE_KEYS, "inputs_b")


def _check_count(value: Optional[int], name: str, minimum: int = 0) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} or None; got {value!r}")
    return value


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
    perm = torch.randperm(pool_size, generator=torch.Generator().manual_seed(seed))
    return perm[:num_labeled], perm[num_labeled : num_labeled + num_unlabeled]


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
        self.num_labels: int = 0
        self._splits: Optional[dict[str, list[Example]]] = None
        self._shuffle_seed: Optional[int] = None

    # ------------------------------------------------------------------ to implement
    def build(self) -> dict[str, list[Example]]:
        """The examples of the splits ``labeled``, ``unlabeled``, ``dev``, ``test``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lightning hooks
    def setup(self, stage: Optional[str] = None) -> None:
        """Build the splits once (deterministic given the arguments)."""
        if self._splits is None:
            splits = self.build()
            assert set(splits) == {"labeled", "unlabeled", "dev", "test"}, set(splits)
            self._splits = splits

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
        """This rank's :class:`ShardSampler` of a split when several processes run (else None)."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
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


def _count(value: int, name: str, minimum: int) -> int:
    out = _check_count(value, name, minimum)
    assert out is not None
    return out


class SyntheticHMMDataModule(SemiSupervisedDataModule):
    """Sequences from a Gaussian-emission HMM (built in, no download): the quick-start data.

    One HMM (:func:`~structssl.data.synthetic.hmm_sequences` with ``seed``) generates
    ``num_train + num_dev + num_test`` sequences; the first ``num_train`` form the training
    pool, split by :func:`split_pool` into labeled / unlabeled with ``split_seed``. Inputs are
    the dense emissions ``inputs`` (B, N, dim) for ``LinearChainScorer(input_dim=dim)``; with
    ``two_view=True`` the first ``dim // 2`` coordinates are ``inputs`` and the rest
    ``inputs_b`` (for ``TwoViewScorer`` and the co-training procedure).

    Args:
        num_train: size of the training pool.
        num_labeled: labeled examples taken from the pool (exclusive with ``labeled_fraction``).
        labeled_fraction: degree of labeling of the pool, in (0, 1] (default when neither is
            given: 10%).
        num_unlabeled: unlabeled examples (default: the rest of the pool).
        num_dev: dev (validation) sequences.
        num_test: test sequences.
        num_states: HMM states = labels.
        length: sequence length (the maximum length when ``min_length`` is given).
        min_length: lengths uniform in ``min_length .. length`` (default: all ``length``).
        dim: emission dimension.
        switch_prob: probability of changing state at each step.
        separation: distance of the emission means from the origin.
        noise: emission standard deviation.
        two_view: split the emission coordinates into two views.
        seed: the HMM and sampling seed.
        split_seed: the labeled / unlabeled split seed.
        data_dir: unused (synthetic data); accepted so every data module has the argument.
        batch_size, unlabeled_batch_size, eval_batch_size, shuffle, num_workers: see
            :class:`SemiSupervisedDataModule`.
    """

    def __init__(
        self,
        num_train: int = 200,
        num_labeled: Optional[int] = None,
        labeled_fraction: Optional[float] = None,
        num_unlabeled: Optional[int] = None,
        num_dev: int = 100,
        num_test: int = 200,
        num_states: int = 5,
        length: int = 20,
        min_length: Optional[int] = None,
        dim: int = 10,
        switch_prob: float = 0.2,
        separation: float = 2.0,
        noise: float = 1.0,
        two_view: bool = False,
        seed: int = 0,
        split_seed: int = 0,
        data_dir: Optional[str] = None,
        batch_size: Optional[int] = None,
        unlabeled_batch_size: Optional[int] = None,
        eval_batch_size: Optional[int] = None,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, unlabeled_batch_size, eval_batch_size, shuffle, num_workers)
        self.num_train = _count(num_train, "num_train", 1)
        self.num_dev = _count(num_dev, "num_dev", 1)
        self.num_test = _count(num_test, "num_test", 1)
        self.dim = _count(dim, "dim", 2 if two_view else 1)
        self.num_states = _count(num_states, "num_states", 2)
        self.num_labels = self.num_states
        self.length = _count(length, "length", 1)
        self.min_length = min_length
        self.switch_prob = float(switch_prob)
        self.separation = float(separation)
        self.noise = float(noise)
        self.two_view = bool(two_view)
        self.seed = seed
        self.split_seed = split_seed
        self.data_dir = data_dir
        # validate the split arguments now (a user mistake fails at construction)
        self._split_args = dict(
            num_labeled=num_labeled, labeled_fraction=labeled_fraction, num_unlabeled=num_unlabeled
        )
        split_pool(self.num_train, seed=split_seed, **self._split_args)  # type: ignore[arg-type]

    @property
    def view_dims(self) -> tuple[int, int]:
        """Input dims of the two views (``two_view=True``)."""
        return self.dim // 2, self.dim - self.dim // 2

    def build(self) -> dict[str, list[Example]]:
        total = self.num_train + self.num_dev + self.num_test
        data = hmm_sequences(
            total,
            length=self.length,
            num_states=self.num_states,
            switch_prob=self.switch_prob,
            emission="gaussian",
            dim=self.dim,
            separation=self.separation,
            noise=self.noise,
            min_length=self.min_length,
            seed=self.seed,
            dtype=torch.float32,
        )
        examples: list[Example] = []
        half = self.dim // 2
        for example in data.examples():
            if self.two_view:
                x = example.pop("inputs")
                example = {"inputs": x[:, :half], "inputs_b": x[:, half:], **example}
            examples.append(example)
        pool = examples[: self.num_train]
        labeled, unlabeled = split_pool(
            self.num_train, seed=self.split_seed, **self._split_args  # type: ignore[arg-type]
        )
        return {
            "labeled": [pool[i] for i in labeled.tolist()],
            "unlabeled": [_without_labels(pool[i]) for i in unlabeled.tolist()],
            "dev": examples[self.num_train : self.num_train + self.num_dev],
            "test": examples[self.num_train + self.num_dev :],
        }


def _without_labels(example: Example) -> Example:
    return {k: v for k, v in example.items() if k != "labels"}


class CoNLLDataModule(SemiSupervisedDataModule):
    """Sequence tagging on column files (CoNLL-2002 NER, or your own files with any tag set).

    The training file is the labeled pool; :func:`split_pool` takes ``num_labeled`` sentences
    (or ``labeled_fraction``; default: all of them) as labeled, and the rest of the pool plus
    the sentences of ``unlabeled_file`` (tokens only) form the unlabeled set (at most
    ``num_unlabeled``). Dev and test files are optional. The layout, the tag scheme and the
    features are a :class:`~structssl.data.tagging.TaggingFormat`: the tag set and the scheme
    (BIO, IOB1, BIOES, BILOU, plain) are learned from the training file, the feature vocabulary
    from the tokens of the labeled and unlabeled sentences. After :meth:`setup`,
    :meth:`model_sizes` gives what the model takes from the data (``num_labels``,
    ``num_features``, the task and the tags), and :attr:`format` is saved in every checkpoint,
    so a trained model can tag new files (``structssl predict``).

    Paths: a path that exists as given (absolute, or relative to the working directory) is
    used as is; any other is looked up under ``data_dir`` (default ``$STRUCTSSL_DATA``, else
    ``../shared/data``), where the defaults name the CoNLL-2002 Spanish files.

    Batches: with ``batch_size`` (mini-batches) sentences of similar length are batched
    together (``bucket_by_length``), so padding stays small; evaluation batches are sorted by
    length. ``batch_size=None`` puts the whole labeled set in one step (full-batch L-BFGS):
    as length-sorted chunks evaluated one after the other for procedures that support it
    (``SupervisedModule``), so memory stays bounded whatever the data size; as one padded
    batch for the others, refused with a clear error when it would be too large to pad
    (``max_full_batch_positions``).

    Args:
        train_file: the tagged training file.
        dev_file: tagged dev file (model selection, ``val/`` metrics), or ``None``.
        test_file: tagged test file (``test/`` metrics), or ``None``.
        unlabeled_file: a file of untagged sentences (one token per line, blank line between
            sentences; extra columns allowed), or ``None``.
        data_dir: where relative paths that do not exist as given are looked up.
        token_column: index of the token column.
        tag_column: index of the tag column (default: the last).
        feature_columns: columns used as features, e.g. ``[1]`` for a POS column (default: none).
        separator: column separator (default: runs of whitespace).
        encoding: text encoding of the files.
        tag_scheme: ``auto`` (detect), ``bio``, ``iob1``, ``bioes``, ``bilou`` or ``plain``.
        num_labeled: labeled sentences drawn from the training file (default: all).
        labeled_fraction: the fraction of the training file kept labeled (instead of
            ``num_labeled``).
        num_unlabeled: at most this many unlabeled sentences (default: all there are).
        max_dev: keep only the first ``max_dev`` dev sentences (default: all).
        max_test: keep only the first ``max_test`` test sentences (default: all).
        min_count: feature count threshold.
        window: context window of the features.
        two_view: split the features into two views (co-training).
        view_scheme: the :class:`~structssl.data.features.ViewSplit` scheme.
        seed: the labeled / unlabeled split seed (and the ``random`` view split's).
        bucket_by_length: batch sentences of similar length together.
        max_full_batch_positions: the most padded positions (sentences x longest sentence) a
            full batch (``batch_size=None``) may hold, for procedures that take it in one
            piece.
        max_chunk_positions: a full batch for a procedure that evaluates it chunk by chunk
            (``supports_chunks``, e.g. ``SupervisedModule``: full-batch L-BFGS on any data
            size) is cut into length-sorted chunks of at most this many padded positions.
        batch_size, unlabeled_batch_size, eval_batch_size, shuffle, num_workers: see
            :class:`SemiSupervisedDataModule` (``eval_batch_size`` defaults to 256 here).
    """

    def __init__(
        self,
        train_file: str = "conll2002/esp.train",
        dev_file: Optional[str] = "conll2002/esp.testa",
        test_file: Optional[str] = "conll2002/esp.testb",
        unlabeled_file: Optional[str] = None,
        data_dir: Optional[str] = None,
        token_column: int = 0,
        tag_column: int = -1,
        feature_columns: Optional[list[int]] = None,
        separator: Optional[str] = None,
        encoding: str = "utf-8",
        tag_scheme: Literal["auto", "bio", "iob1", "bioes", "bilou", "plain"] = "auto",
        num_labeled: Optional[int] = None,
        labeled_fraction: Optional[float] = None,
        num_unlabeled: Optional[int] = None,
        max_dev: Optional[int] = None,
        max_test: Optional[int] = None,
        min_count: int = 1,
        window: int = 1,
        two_view: bool = False,
        view_scheme: Literal["token_surface", "random", "odd_even"] = "token_surface",
        seed: int = 0,
        bucket_by_length: bool = True,
        max_full_batch_positions: int = 2_000_000,
        max_chunk_positions: int = 20_000,
        batch_size: Optional[int] = None,
        unlabeled_batch_size: Optional[int] = None,
        eval_batch_size: Optional[int] = 256,
        shuffle: bool = True,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, unlabeled_batch_size, eval_batch_size, shuffle, num_workers)
        from structssl.data.tagging import TaggingFormat

        if num_labeled is not None and labeled_fraction is not None:
            raise ValueError(
                "at most one of num_labeled and labeled_fraction may be given; got "
                f"num_labeled={num_labeled!r}, labeled_fraction={labeled_fraction!r}"
            )
        if not isinstance(train_file, str) or not train_file:
            raise ValueError(f"train_file must name a file; got {train_file!r}")
        self.data_dir = data_dir
        self.files = {
            "train": train_file, "dev": dev_file, "test": test_file, "unlabeled": unlabeled_file
        }
        self.num_labeled = _check_count(num_labeled, "num_labeled", 1)
        self.labeled_fraction = labeled_fraction
        self.num_unlabeled = _check_count(num_unlabeled, "num_unlabeled", 0)
        self.max_dev = _check_count(max_dev, "max_dev", 1)
        self.max_test = _check_count(max_test, "max_test", 1)
        self.seed = seed
        self.bucket_by_length = bool(bucket_by_length)
        self.max_full_batch_positions = _count(
            max_full_batch_positions, "max_full_batch_positions", 1
        )
        self.max_chunk_positions = _count(max_chunk_positions, "max_chunk_positions", 1)
        self.format = TaggingFormat(
            token_column=token_column, tag_column=tag_column, feature_columns=feature_columns,
            separator=separator, encoding=encoding, tag_scheme=tag_scheme, min_count=min_count,
            window=window, two_view=two_view, view_scheme=view_scheme, view_seed=seed,
        )
        self.two_view = self.format.two_view

    # ------------------------------------------------------------------ sizes
    @property
    def tags(self) -> tuple[str, ...]:
        """The learned tag set (BIO for span schemes), in label-index order."""
        self.setup()  # builds the splits (and fits the format) once
        return self.format.tags

    @property
    def num_features(self) -> int:
        """The feature index space (reads the files on first use)."""
        self.setup()
        return self.format.num_features

    @property
    def view_num_features(self) -> tuple[int, int]:
        """The two views' feature index spaces (``two_view=True``; reads the files on first use)."""
        self.setup()
        split = self.format.view_split
        return (0, 0) if split is None else split.num_features

    def model_sizes(self) -> dict[str, Any]:
        """What a model takes from this data (see :meth:`TaggingFormat.sizes`)."""
        self.setup()
        return self.format.sizes()

    def saved_format(self) -> dict[str, Any]:
        """The fitted format as plain data: kept in checkpoints for prediction."""
        self.setup()
        return self.format.state_dict()

    # ------------------------------------------------------------------ files
    def _path(self, key: str) -> Any:
        from pathlib import Path

        from structssl.data.paths import data_file

        name = self.files[key]
        assert name is not None
        if Path(name).is_file():
            return Path(name)
        if Path(name).is_absolute():
            raise FileNotFoundError(f"no such file: {name} (the {key} file)")
        return data_file(name, f"a CoNLL column file ({key} split)", self.data_dir)

    def build(self) -> dict[str, list[Example]]:
        fmt = self.format
        train = fmt.read_labeled(self._path("train"))
        extra = fmt.read_tokens(self._path("unlabeled")) if self.files["unlabeled"] else []
        split_args: dict[str, Any] = dict(
            num_labeled=self.num_labeled, labeled_fraction=self.labeled_fraction
        )
        if self.num_labeled is None and self.labeled_fraction is None:
            split_args["labeled_fraction"] = 1.0
        labeled_ids, rest_ids = split_pool(len(train), seed=self.seed, **split_args)
        labeled = [train[i] for i in labeled_ids.tolist()]
        unlabeled = [train[i] for i in rest_ids.tolist()] + extra
        if self.num_unlabeled is not None:
            if self.num_unlabeled > len(unlabeled):
                raise ValueError(
                    f"num_unlabeled must be <= the {len(unlabeled)} unlabeled sentences there "
                    f"are (the rest of the training file plus unlabeled_file); got "
                    f"{self.num_unlabeled}"
                )
            unlabeled = unlabeled[: self.num_unlabeled]
        # the tag set comes from the whole training file, the features from the sentences
        # trained on (labeled and unlabeled)
        fmt.fit(train, [*labeled, *unlabeled])
        self.num_labels = fmt.num_labels
        dev = fmt.read_labeled(self._path("dev"))[: self.max_dev] if self.files["dev"] else []
        test = fmt.read_labeled(self._path("test"))[: self.max_test] if self.files["test"] else []
        return {
            "labeled": [fmt.encode(s, True) for s in labeled],
            # index and tokens: what label switching and token constraints read
            "unlabeled": [
                {**fmt.encode(s, False), "index": torch.tensor(i), "tokens": s.tokens}
                for i, s in enumerate(unlabeled)
            ],
            "dev": [fmt.encode(s, True) for s in dev],
            "test": [fmt.encode(s, True) for s in test],
        }

    # ------------------------------------------------------------------ loaders
    def _wants_chunks(self) -> bool:
        return bool(getattr(self._procedure(), "supports_chunks", False))

    def train_dataloader(self) -> CombinedLoader:
        if self.batch_size is None and self._wants_chunks():
            chunks = length_chunks(self.splits["labeled"], self.max_chunk_positions)
            loader = DataLoader(
                _ListDataset([chunks]),  # one step: the whole labeled set, chunk by chunk
                batch_size=1,
                collate_fn=lambda items: [self.collate(chunk) for chunk in items[0]],
            )
            return CombinedLoader({"labeled": loader}, mode="max_size_cycle")
        if self.batch_size is None:
            examples = self.splits["labeled"]
            longest = max(int(e["inputs"].shape[0]) for e in examples)
            positions = longest * len(examples)
            if positions > self.max_full_batch_positions:
                raise ValueError(
                    f"full-batch training (batch_size=None) would pad {len(examples)} labeled "
                    f"sentences to the longest one ({longest} tokens): {positions:,} positions, "
                    f"more than max_full_batch_positions = {self.max_full_batch_positions:,}; "
                    "set batch_size (e.g. 32) for mini-batch training, or raise "
                    "max_full_batch_positions if the memory is there"
                )
        return super().train_dataloader()

    def _loader(
        self, examples: list[Example], batch_size: Optional[int], shuffle: bool
    ) -> DataLoader:
        if not self.bucket_by_length or batch_size is None or batch_size >= len(examples):
            return super()._loader(examples, batch_size, shuffle)
        lengths = [int(e["inputs"].shape[0]) for e in examples]
        return DataLoader(
            _ListDataset(examples),
            batch_sampler=LengthBucketSampler(lengths, batch_size, shuffle),
            collate_fn=self.collate,
            num_workers=self.num_workers,
        )


def length_chunks(examples: list[Example], max_positions: int) -> list[list[Example]]:
    """Examples grouped by length into chunks of at most ``max_positions`` padded positions
    (examples x longest example; a longer example is a chunk of its own)."""
    order = sorted(range(len(examples)), key=lambda i: int(examples[i]["inputs"].shape[0]))
    chunks: list[list[Example]] = []
    current: list[Example] = []
    for i in order:
        n = int(examples[i]["inputs"].shape[0])
        if current and n * (len(current) + 1) > max_positions:
            chunks.append(current)
            current = []
        current.append(examples[i])
    if current:
        chunks.append(current)
    return chunks


class LengthBucketSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of examples of similar length (little padding), in a random order.

    Each epoch the examples are shuffled (``shuffle``; the global torch RNG, seeded by
    Lightning's ``seed_everything``), cut into pools of ``pool`` batches, each pool sorted by
    length and cut into batches of ``batch_size``; the batches are then shuffled. Without
    ``shuffle`` the batches follow the length order.

    Args:
        lengths: the examples' lengths.
        batch_size: examples per batch.
        shuffle: reshuffle every epoch.
        pool: batches per sorting pool.
    """

    def __init__(self, lengths: list[int], batch_size: int, shuffle: bool, pool: int = 50) -> None:
        self.lengths = torch.as_tensor(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.pool = pool

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Any:
        n = len(self.lengths)
        if not self.shuffle:
            order = torch.sort(self.lengths, stable=True).indices
            yield from (order[i : i + self.batch_size].tolist() for i in range(0, n, self.batch_size))
            return
        order = torch.randperm(n)
        batches: list[list[int]] = []
        step = self.batch_size * self.pool
        for start in range(0, n, step):
            chunk = order[start : start + step]
            chunk = chunk[torch.sort(self.lengths[chunk], stable=True).indices]
            batches += [chunk[i : i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        for i in torch.randperm(len(batches)).tolist():
            yield batches[i]
