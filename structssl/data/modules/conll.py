"""Sequence tagging on CoNLL-style column files as a data module (CoNLL-2002 NER, or your own
files with any tag set), with length-bucketed mini-batches and length-sorted chunks for
full-batch training on any data size."""

from __future__ import annotations

from typing import Any, Literal, Optional

import torch
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import DataLoader

from structssl.data.modules.base import (
    Example,
    SemiSupervisedDataModule,
    ShardSampler,
    _check_count,
    _count,
    _ListDataset,
    split_pool,
)

__all__ = ["CoNLLDataModule", "length_chunks", "LengthBucketSampler"]

#: bounds of the default length chunk, in padded positions (examples x longest example)
MAX_CHUNK_POSITIONS = 100_000
MIN_CHUNK_POSITIONS = 20_000
#: the default chunk keeps positions x C^2 below this (the (positions, C, C) edge tensor of the
#: log-space fallback, 32 MB in float32) between the two bounds
CHUNK_EDGE_BUDGET = 2**23


def default_chunk_positions(num_labels: int) -> int:
    """The default ``max_chunk_positions`` for ``num_labels`` tags: 100,000 up to 9 tags
    (CoNLL NER), then fewer, down to 20,000 from 21 tags on (the edge tensor of a chunk at
    most 32 MB until that floor). Fewer, longer chunks mean fewer sequential steps and
    fewer per-chunk calls: on CoNLL-2002 Spanish 5 chunks instead of 16, 1,482 steps of the
    chain instead of 1,971, a CRF evaluation about 10 % faster, a peak RSS of 814 instead of
    721 MB."""
    edge_bound = CHUNK_EDGE_BUDGET // max(num_labels, 1) ** 2
    return max(MIN_CHUNK_POSITIONS, min(MAX_CHUNK_POSITIONS, edge_bound))


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
    (``SupervisedModule``; ``TransductiveModule``, whose whole unlabeled set with
    ``unlabeled_batch_size=None`` is chunked too), so memory stays bounded whatever the data
    size and one very long sentence pads only its own chunk; as one padded
    batch for the others, refused with a clear error when it would be too large to pad
    (``max_full_batch_positions``).

    Args:
        train_file: the tagged training file (default: CoNLL-2002 Spanish's, under
            ``data_dir``).
        dev_file: tagged dev file (model selection, ``val/`` metrics), or ``None`` (the
            default: never another corpus's dev file next to your training file).
        test_file: tagged test file (``test/`` metrics), or ``None`` (the default).
        unlabeled_file: a file of untagged sentences (one token per line, blank line between
            sentences; extra columns allowed), or ``None``.
        data_dir: where relative paths that do not exist as given are looked up.
        token_column: index of the token column.
        tag_column: index of the tag column (default: the last).
        feature_columns: columns used as features, e.g. ``[1]`` for a POS column (default: none).
        separator: column separator (default: runs of blanks, space or tab; the two characters
            ``\\t`` mean a tab). The columns are stripped of the spaces around them.
        comments: lines that start with ``#`` are comments, skipped, in every file and in the
            files ``structssl predict`` tags (default false: ``#`` can be a token; a sentence that
            begins with a lone ``#`` then gets a warning naming this option).
        encoding: text encoding of the files.
        tag_scheme: ``auto`` (detect), ``bio``, ``iob1``, ``bioes``, ``bilou``, ``io``
            (entity types without prefixes; never detected) or ``plain``.
        layout: ``auto`` (CoNLL-U / CoNLL-X when the training file looks like one: ten
            tab-separated columns, a word index first), ``columns`` or ``conllu``. CoNLL-U
            files skip ``#`` comments, multiword-token and empty-node lines; the token is FORM
            and the tag UPOS (``tag_column=4``: XPOS); see
            :class:`~structssl.data.tagging.TaggingFormat`.
        num_labeled: labeled sentences drawn from the training file (default: all).
        labeled_fraction: the fraction of the training file kept labeled (instead of
            ``num_labeled``).
        num_unlabeled: at most this many unlabeled sentences (default: all there are).
        max_dev: keep only the first ``max_dev`` dev sentences (default: all).
        max_test: keep only the first ``max_test`` test sentences (default: all).
        min_length: keep only the training-file sentences of at least this many tokens in
            the pool that is split into labeled and unlabeled (default: no bound; the tag set
            still comes from the whole file; the summary line counts the sentences left out;
            the sentences of ``unlabeled_file`` are not bounded).
        max_length: the same, at most this many tokens (e.g. the thesis's pool of CoNLL-2002
            sentences of 10 to 40 tokens: ``min_length=10, max_length=40``).
        min_count: feature count threshold.
        window: context window of the features.
        word_clusters: numbers of word clusters learned from the labeled and unlabeled
            sentences (e.g. ``[32, 128, 512]``): each token and its neighbours get their cluster
            ids as features, so that what a tagged word teaches reaches the untagged words that
            share its contexts (:class:`~structssl.data.clusters.WordClusters`). ``None``: off.
        two_view: split the features into two views (co-training).
        view_scheme: the :class:`~structssl.data.features.ViewSplit` scheme.
        seed: the labeled / unlabeled split seed (and the ``random`` view split's).
        bucket_by_length: batch sentences of similar length together.
        max_full_batch_positions: the most padded positions (sentences x longest sentence) a
            full batch (``batch_size=None``) may hold, for procedures that take it in one
            piece.
        max_chunk_positions: a full batch for a procedure that evaluates it chunk by chunk
            (``supports_chunks``, e.g. ``SupervisedModule``: full-batch L-BFGS on any data
            size) is cut into length-sorted chunks of at most this many padded positions; so
            is the whole unlabeled set (``unlabeled_batch_size=None``) of such a procedure
            with an unlabeled term (``TransductiveModule``). Default (``None``):
            :func:`default_chunk_positions` of the tag count (100,000 for up to 9 tags,
            20,000 from 21 on); :meth:`chunk_positions` gives the value in use.
        batch_size, unlabeled_batch_size, eval_batch_size, shuffle, num_workers: see
            :class:`SemiSupervisedDataModule` (``eval_batch_size`` defaults to 256 here).
    """

    def __init__(
        self,
        train_file: str = "conll2002/esp.train",
        dev_file: Optional[str] = None,
        test_file: Optional[str] = None,
        unlabeled_file: Optional[str] = None,
        data_dir: Optional[str] = None,
        token_column: int = 0,
        tag_column: int = -1,
        feature_columns: Optional[list[int]] = None,
        separator: Optional[str] = None,
        comments: bool = False,
        encoding: str = "utf-8",
        tag_scheme: Literal["auto", "bio", "iob1", "bioes", "bilou", "io", "plain"] = "auto",
        layout: Literal["auto", "columns", "conllu"] = "auto",
        num_labeled: Optional[int] = None,
        labeled_fraction: Optional[float] = None,
        num_unlabeled: Optional[int] = None,
        max_dev: Optional[int] = None,
        max_test: Optional[int] = None,
        min_length: Optional[int] = None,
        max_length: Optional[int] = None,
        min_count: int = 1,
        window: int = 1,
        word_clusters: Optional[list[int]] = None,
        two_view: bool = False,
        view_scheme: Literal["token_surface", "random", "odd_even"] = "token_surface",
        seed: int = 0,
        bucket_by_length: bool = True,
        max_full_batch_positions: int = 2_000_000,
        max_chunk_positions: Optional[int] = None,
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
        self.min_length = _check_count(min_length, "min_length", 1)
        self.max_length = _check_count(max_length, "max_length", 1)
        if self.min_length is not None and self.max_length is not None and (
            self.max_length < self.min_length
        ):
            raise ValueError(
                f"max_length must be >= min_length = {self.min_length}; got {self.max_length}"
            )
        self.seed = seed
        self.bucket_by_length = bool(bucket_by_length)
        self.max_full_batch_positions = _count(
            max_full_batch_positions, "max_full_batch_positions", 1
        )
        self.max_chunk_positions = _check_count(max_chunk_positions, "max_chunk_positions", 1)
        self.format = TaggingFormat(
            token_column=token_column, tag_column=tag_column, feature_columns=feature_columns,
            separator=separator, encoding=encoding, tag_scheme=tag_scheme, min_count=min_count,
            window=window, word_clusters=word_clusters, two_view=two_view,
            view_scheme=view_scheme, view_seed=seed, layout=layout, comment_prefix="#" if comments else None,
        )
        self.two_view = self.format.two_view

    #: how to give a semi-supervised procedure unlabeled examples (its warning without any)
    unlabeled_hint = ("give untagged sentences with --data.unlabeled_file FILE, or keep part of "
                      "the training file untagged with --data.num_labeled N")

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

    def chunk_positions(self) -> int:
        """The padded positions of a length chunk: ``max_chunk_positions``, or by default
        :func:`default_chunk_positions` of the tag count (reads the files on first use)."""
        if self.max_chunk_positions is not None:
            return self.max_chunk_positions
        return default_chunk_positions(len(self.tags))

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
        from structssl.data.paths import split_file

        name = self.files[key]
        assert name is not None
        return split_file(name, key, f"a CoNLL column file ({key} split)", self.data_dir)

    def build(self) -> dict[str, list[Example]]:
        from structssl.data.paths import DecodingError

        try:
            return self._build()
        except DecodingError as err:
            raise DecodingError(f"{err} (pass the files' encoding: --data.encoding / encoding=)") from None

    def _build(self) -> dict[str, list[Example]]:
        fmt = self.format
        train = fmt.read_labeled(self._path("train"))
        low, high = self.min_length or 0, self.max_length
        pool = [
            s for s in train if len(s.tokens) >= low and (high is None or len(s.tokens) <= high)
        ]
        if not pool:
            raise ValueError(
                f"{self.files['train']}: no training sentence within the length bounds "
                f"(min_length={self.min_length}, max_length={self.max_length})"
            )
        extra = fmt.read_tokens(self._path("unlabeled")) if self.files["unlabeled"] else []
        split_args: dict[str, Any] = dict(
            num_labeled=self.num_labeled, labeled_fraction=self.labeled_fraction
        )
        if self.num_labeled is None and self.labeled_fraction is None:
            split_args["labeled_fraction"] = 1.0
        labeled_ids, rest_ids = split_pool(len(pool), seed=self.seed, **split_args)
        labeled = [pool[i] for i in labeled_ids.tolist()]
        unlabeled = [pool[i] for i in rest_ids.tolist()] + extra
        if self.num_unlabeled is not None:
            if self.num_unlabeled > len(unlabeled):
                raise ValueError(
                    f"num_unlabeled must be <= the {len(unlabeled)} unlabeled sentences there "
                    f"are (the rest of the training pool plus unlabeled_file); got "
                    f"{self.num_unlabeled}"
                )
            unlabeled = unlabeled[: self.num_unlabeled]
        # dev and test are read before fit: their tags that the training file lacks join the
        # tag set (scored as errors, never trained on)
        dev = fmt.read_labeled(self._path("dev"))[: self.max_dev] if self.files["dev"] else []
        test = fmt.read_labeled(self._path("test"))[: self.max_test] if self.files["test"] else []
        # the tag set comes from the whole training file, the features from the sentences
        # trained on (labeled and unlabeled)
        fmt.fit(train, [*labeled, *unlabeled])
        from pytorch_lightning.utilities.rank_zero import rank_zero_info, rank_zero_warn

        origin = "detected" if fmt.tag_scheme == "auto" else "given"
        tags_of = "UPOS" if fmt.tag_column == -1 else f"of column {fmt.tag_column}"
        layout = f" (CoNLL-U, tags {tags_of})" if fmt.layout == "conllu" else ""
        rank_zero_info(
            f"{self.files['train']}: {len(train)} tagged sentences{layout}, tag scheme "
            f"{fmt.scheme} ({origin}), {fmt.num_labels} tags{' (BIO)' if fmt.task == 'bio' else ''}: "
            f"{', '.join(fmt.tags[:12])}{' ...' if fmt.num_labels > 12 else ''}; "
            f"{len(labeled)} kept tagged, {len(unlabeled)} untagged (semi-supervised procedures "
            f"train on these){self._bounds_note(len(train) - len(pool))}"
            + ("; the tags have no prefixes beside O: if they are entity types (IO tagging), "
               "--data.tag_scheme io reads them as spans, scored by span F1"
               if origin == "detected" and fmt.scheme == "plain" and "O" in fmt.tags else "")
        )
        where: list[str] = []
        for key, sequences in (("dev", dev), ("test", test)):
            if sequences:
                where += fmt.admit_tags(sequences, self._path(key))  # named as read_labeled names it
        self.num_labels = fmt.num_labels
        if fmt.untrained_tags:
            rank_zero_warn(
                f"{len(where)} tag(s) of the dev / test files are not in the training file "
                f"{self.files['train']}: {', '.join(where[:6])}{' ...' if len(where) > 6 else ''}; "
                f"they join the tag set ({', '.join(fmt.untrained_tags[:12])}"
                f"{' ...' if len(fmt.untrained_tags) > 12 else ''}{' in BIO' if fmt.task == 'bio' else ''}), "
                "no training sentence teaches them, and each gold one counts as an error"
            )
        return {
            # tokens: what token constraints read (label switching, constraint-guided
            # decoding); index: each unlabeled sentence's place in its split
            "labeled": [{**fmt.encode(s, True), "tokens": s.tokens} for s in labeled],
            "unlabeled": [
                {**fmt.encode(s, False), "index": torch.tensor(i), "tokens": s.tokens}
                for i, s in enumerate(unlabeled)
            ],
            "dev": [{**fmt.encode(s, True), "tokens": s.tokens} for s in dev],
            "test": [{**fmt.encode(s, True), "tokens": s.tokens} for s in test],
        }

    def _bounds_note(self, left_out: int) -> str:
        """What the length bounds left out of the training file, for the summary line."""
        if not left_out:
            return ""
        bounds = ", ".join(
            f"{name}={value}" for name, value in (("min_length", self.min_length), ("max_length", self.max_length))
            if value is not None
        )
        return f"; {left_out} training sentences outside the length bounds ({bounds}) left out"

    # ------------------------------------------------------------------ loaders
    def _wants_chunks(self) -> bool:
        return bool(getattr(self._procedure(), "supports_chunks", False))

    def train_dataloader(self) -> CombinedLoader:
        if self.batch_size is None and self._wants_chunks():
            self._restore_resumed_rng()
            loaders = {"labeled": self._chunk_loader(self.splits["labeled"])}
            if self.splits["unlabeled"] and self._wants_unlabeled():
                loaders["unlabeled"] = (
                    self._chunk_loader(self.splits["unlabeled"])
                    if self.unlabeled_batch_size is None
                    else self._loader(
                        self.splits["unlabeled"], self.unlabeled_batch_size, self.shuffle
                    )
                )
            return CombinedLoader(loaders, mode="max_size_cycle")
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

    def _chunk_loader(self, examples: list[Example]) -> DataLoader:
        """One step holding the whole split as length-sorted chunks of at most
        :meth:`chunk_positions` padded positions (a list of batches), collated once: every
        epoch gets the same tensors, so what is derived from them (sparse layouts, checked
        ranges: :mod:`structssl.memo`) is built once per fit, not once per epoch."""
        # several processes: each rank evaluates the chunks of its shard (no example
        # repeated); the closure sums the shards' objectives and gradients over the ranks
        shard = self._shard_sampler(len(examples), None, False)
        if shard is not None:
            examples = [examples[i] for i in shard]
        chunks = [self.collate(c) for c in length_chunks(examples, self.chunk_positions())]
        return DataLoader(
            _ListDataset([chunks]),  # one step: the whole split, chunk by chunk
            batch_size=1,
            # every rank its own single step (not Lightning's sampler over ranks)
            sampler=None if shard is None else ShardSampler(1, 1, 0, False, 0, False),
            collate_fn=lambda items: items[0],
        )

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
    (examples x longest example; a longer example is a chunk of its own), each chunk longest
    first: the order the chain's recursions walk a batch in, so that they neither sort the
    chunk's potentials nor unsort their gradient."""
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
    return [chunk[::-1] for chunk in chunks]


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
