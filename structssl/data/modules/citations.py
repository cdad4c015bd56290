"""Citation segmentation (Cora references, CoDL splits) as a Lightning data module.

Two protocols over ``<data_dir>/citations_cora/`` (read by :mod:`structssl.data.formats.citations`):

``"codl_transductive"`` (seed 000 section 5.1, Chang et al. 2007)
    labeled: the first ``num_labeled`` citations of the CoDL subset ``citation_train.25.<subset>``
    for ``num_labeled <= 25`` (N = 5, 20), or of ``citation_train.300`` for larger N (N = 300:
    the same set for every subset); unlabeled: **test + dev + the first** ``num_unlabeled``
    **citations of the unlabeled file** (as the paper aggregates them); dev and test: the
    labeled 100-citation files (dev for model selection, test for the reported accuracy).
``"inductive"`` (seed 003 section 4.1.2)
    labeled: a seeded random sample of ``num_labeled`` citations of ``citation_train.300``
    (``subset`` is the seed); unlabeled: ``num_unlabeled`` citations of the unlabeled file;
    dev and test: the 100-citation files, never seen in training.

Examples carry ``inputs`` (n, F) long sparse feature indices (a
:class:`~structssl.data.features.FeatureExtractor` fitted on the training pool's tokens, labeled
and unlabeled), ``labels`` (labeled splits), ``tokens`` (the token strings, for the constraints
of :mod:`structssl.constraints`) and ``index`` (the example's index within its split).
The unlabeled split is sorted by length, so that ``unlabeled_batch_size`` with
``shuffle=False`` gives batches of similar lengths (the constraint searches then pad little).
``features="hmm"`` gives the first-order token HMM of seed 000 (emission = the lower-cased
token; transitions come from the scorer); ``"rich"`` the extractor's default templates.
After :meth:`setup`: ``num_features``, ``num_labels`` (13), ``label_names``, ``max_length``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import torch

from structssl.data.modules.base import (
    Example,
    SemiSupervisedDataModule,
    _check_count,
    seeded_parts,
    with_index,
)

__all__ = ["CitationsDataModule"]


class CitationsDataModule(SemiSupervisedDataModule):
    """The citation data under the CoDL transductive or the seed-003 inductive protocol.

    Args:
        data_dir: the data directory (default ``$STRUCTSSL_DATA``, else ``../shared/data``).
        protocol: ``"codl_transductive"`` or ``"inductive"`` (see the module docstring).
        num_labeled: N labeled citations (5, 20, 300 in the papers).
        subset: which CoDL 25-citation subset (0..4), or the sampling seed (inductive).
        num_unlabeled: citations taken from the unlabeled file (1,000 in the papers).
        num_train: cap on the training pool (labeled + unlabeled) for quick runs (default none).
        num_dev: keep the first ``num_dev`` dev citations (default all 100).
        num_test: keep the first ``num_test`` test citations (default all 100).
        features: ``"hmm"`` (lower-cased token) or ``"rich"`` (default extractor templates).
        min_count: feature count threshold.
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).

    Raises:
        ValueError: an unknown protocol / features value, a bad count or subset.
    """

    def __init__(
        self,
        data_dir: Optional[str] = None,
        protocol: Literal["codl_transductive", "inductive"] = "codl_transductive",
        num_labeled: int = 5,
        subset: int = 0,
        num_unlabeled: Optional[int] = 1000,
        num_train: Optional[int] = None,
        num_dev: Optional[int] = None,
        num_test: Optional[int] = None,
        features: Literal["hmm", "rich"] = "hmm",
        min_count: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from structssl.data.formats.citations import CITATION_LABELS

        if protocol not in ("codl_transductive", "inductive"):
            raise ValueError(f"protocol must be 'codl_transductive' or 'inductive'; got {protocol!r}")
        if features not in ("hmm", "rich"):
            raise ValueError(f"features must be 'hmm' or 'rich'; got {features!r}")
        if isinstance(num_labeled, bool) or not isinstance(num_labeled, int) or not 1 <= num_labeled <= 300:
            raise ValueError(f"num_labeled must be an int in [1, 300]; got {num_labeled!r}")
        if isinstance(subset, bool) or not isinstance(subset, int) or subset < 0 or (protocol == "codl_transductive" and subset > 4):
            raise ValueError(f"subset must be an int in [0, 4] (CoDL subsets); got {subset!r}")
        self.data_dir = data_dir
        self.protocol = protocol
        self.num_labeled = num_labeled
        self.subset = subset
        self.num_unlabeled = _check_count(num_unlabeled, "num_unlabeled", 0)
        self.num_train = _check_count(num_train, "num_train", 1)
        self.num_dev = _check_count(num_dev, "num_dev", 1)
        self.num_test = _check_count(num_test, "num_test", 1)
        self.features = features
        self.min_count = min_count
        self.label_names: tuple[str, ...] = tuple(CITATION_LABELS)
        self.tags = self.label_names
        self.num_labels = len(self.label_names)
        self.num_features = 0
        self.max_length = 0

    def build(self) -> dict[str, list[Example]]:
        from structssl.data.formats.citations import load_citations
        from structssl.data.features import FeatureExtractor

        load = lambda split: load_citations(split, self.data_dir).sequences  # noqa: E731
        dev = load("dev")[: self.num_dev]
        test = load("test")[: self.num_test]
        unlabeled_file = load("unlabeled")[: self.num_unlabeled] if self.num_unlabeled else []
        if self.protocol == "codl_transductive":
            pool = load(f"train.25.{self.subset}") if self.num_labeled <= 25 else load("train.300")
            if self.num_labeled > len(pool):
                raise ValueError(f"num_labeled must be <= {len(pool)} for this split; got {self.num_labeled}")
            labeled = list(pool[: self.num_labeled])
            unlabeled = list(test) + list(dev) + list(unlabeled_file)
        else:
            pool = load("train.300")
            chosen = seeded_parts(len(pool), [min(self.num_labeled, len(pool))], self.subset)[0]
            labeled = [pool[i] for i in chosen.tolist()]
            unlabeled = list(unlabeled_file)
        if self.num_train is not None:
            unlabeled = unlabeled[: max(self.num_train - len(labeled), 0)]
            labeled = labeled[: self.num_train]
        # sorted by length: mini-batches of similar lengths pad little (use shuffle=False)
        unlabeled = sorted(unlabeled, key=len)
        templates = ("lower",) if self.features == "hmm" else None
        kwargs: dict[str, Any] = {"min_count": self.min_count}
        if templates is not None:
            kwargs.update(templates=templates, window=0)
        extractor = FeatureExtractor(**kwargs)
        extractor.fit([s.tokens for s in labeled + unlabeled])
        self.num_features = extractor.num_features
        self.max_length = max(len(s) for s in labeled + unlabeled + list(dev) + list(test))
        vocab = {name: i for i, name in enumerate(self.label_names)}

        def encode(seqs: Any, with_labels: bool) -> list[Example]:
            out = []
            for seq in seqs:
                example: Example = {"inputs": extractor.encode(seq.tokens)}
                if with_labels:
                    example["labels"] = torch.tensor([vocab[x] for x in seq.labels], dtype=torch.long)
                example["tokens"] = tuple(seq.tokens)  # type: ignore[assignment]
                out.append(example)
            return with_index(out)

        return {
            "labeled": encode(labeled, True),
            "unlabeled": encode(unlabeled, False),
            "dev": encode(dev, True),
            "test": encode(test, True),
        }
