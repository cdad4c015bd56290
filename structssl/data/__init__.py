"""Data: readers of file formats, token features, batching, synthetic generators, and the
Lightning data modules.

=================================  ===========================================================
module / package                   content
=================================  ===========================================================
:mod:`~structssl.data.formats`     readers, one per file format: CoNLL columns, Cora
                                   citations, Mulan ARFF, bracketed treebanks, OCR letters,
                                   SSL-book ``.mat`` (COIL)
:mod:`~structssl.data.modules`     Lightning data modules (labeled / unlabeled / dev / test
                                   splits and loaders), one per data set
:mod:`~structssl.data.paths`       data directory resolution, ``open_text`` (``.gz``)
:mod:`~structssl.data.records`     ``Vocabulary``, ``Sequence``, ``TaggedCorpus``
:mod:`~structssl.data.features`    ``FeatureExtractor`` (sparse indices), ``ViewSplit``
:mod:`~structssl.data.tagging`     ``TaggingFormat``: columns, tag scheme and features of a
                                   tagger (:mod:`~structssl.data.tag_schemes`)
:mod:`~structssl.data.batch`       padding and ``collate_fn``s (``lengths`` convention)
:mod:`~structssl.data.synthetic`   HMM ("galaxy"), PCFG treebank, correlated multi-label
=================================  ===========================================================

Loaders (``load_*``) find the files under a data directory: the ``data_dir`` argument, else
``$STRUCTSSL_DATA``, else ``../shared/data``. Every public name is importable from here:
the readers at once, the data modules (``structssl.data.CoNLLDataModule``, the form configs use
in ``class_path``) on first use, so that ``import structssl.data`` needs no Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from structssl.data.formats.arff import MultiLabelData, load_mulan, read_arff, read_mulan_labels
from structssl.data.batch import collate_sequences, collate_trees, pad_features, pad_sequences
from structssl.data.formats.citations import CITATION_LABELS, load_citations, read_citations
from structssl.data.formats.coil import SslSplits, load_coil, read_coil
from structssl.data.formats.conll import CONLL2002_LABELS, load_conll2002, read_conll
from structssl.data.features import (
    TOKEN_VIEW_TEMPLATES,
    FeatureBatch,
    FeatureExtractor,
    ViewSplit,
)
from structssl.data.formats.ocr import OCR_LETTERS, OcrWords, load_ocr, ocr_fold_split, read_ocr
from structssl.data.paths import ENV_VAR, data_file, open_text, resolve_data_dir
from structssl.data.records import Sequence, TaggedCorpus, Vocabulary
from structssl.data.synthetic import (
    SyntheticMultiLabel,
    SyntheticSequences,
    SyntheticTreebank,
    correlated_multilabel,
    hmm_sequences,
    pcfg_treebank,
)
from structssl.data.formats.treebank import (
    Tree,
    encode_trees,
    from_cnf,
    load_ptb_sample,
    normalize_tree,
    read_treebank,
    spans_to_tree,
    to_cnf,
    tree_spans,
)

if TYPE_CHECKING:  # the names below, as type checkers and IDEs see them
    from structssl.data.modules import (  # noqa: F401
        COIL_NUM_CLASSES,
        DEFAULT_LABELED_FRACTION,
        ArffDataModule,
        CitationsDataModule,
        CoilDataModule,
        CoNLLDataModule,
        GrammarScorer,
        LengthBucketSampler,
        MulanDataModule,
        MulanSplit,
        OcrDataModule,
        SemiSupervisedDataModule,
        ShardSampler,
        SyntheticHMMDataModule,
        TreebankDataModule,
        length_chunks,
        load_pooled,
        mulan_split,
        seeded_parts,
        split_pool,
        stack_collate,
        with_index,
        without_labels,
    )

#: the data modules (Lightning), imported on first use by :func:`__getattr__`
_DATA_MODULES = (
    "SemiSupervisedDataModule",
    "ShardSampler",
    "split_pool",
    "seeded_parts",
    "with_index",
    "without_labels",
    "stack_collate",
    "DEFAULT_LABELED_FRACTION",
    "SyntheticHMMDataModule",
    "CoNLLDataModule",
    "length_chunks",
    "LengthBucketSampler",
    "CitationsDataModule",
    "OcrDataModule",
    "TreebankDataModule",
    "GrammarScorer",
    "ArffDataModule",
    "MulanDataModule",
    "MulanSplit",
    "mulan_split",
    "load_pooled",
    "CoilDataModule",
    "COIL_NUM_CLASSES",
)


def __getattr__(name: str) -> Any:
    if name in _DATA_MODULES:
        from structssl.data import modules

        return getattr(modules, name)
    raise AttributeError(f"module 'structssl.data' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_DATA_MODULES))


__all__ = [
    # data modules (Lightning, loaded on first use)
    *_DATA_MODULES,
    # paths
    "ENV_VAR",
    "resolve_data_dir",
    "data_file",
    "open_text",
    # records
    "Vocabulary",
    "Sequence",
    "TaggedCorpus",
    # readers
    "CONLL2002_LABELS",
    "read_conll",
    "load_conll2002",
    "CITATION_LABELS",
    "read_citations",
    "load_citations",
    "MultiLabelData",
    "read_arff",
    "read_mulan_labels",
    "load_mulan",
    "Tree",
    "read_treebank",
    "load_ptb_sample",
    "normalize_tree",
    "to_cnf",
    "from_cnf",
    "tree_spans",
    "spans_to_tree",
    "encode_trees",
    "OCR_LETTERS",
    "OcrWords",
    "read_ocr",
    "load_ocr",
    "ocr_fold_split",
    "SslSplits",
    "read_coil",
    "load_coil",
    # features and batching
    "TOKEN_VIEW_TEMPLATES",
    "FeatureExtractor",
    "FeatureBatch",
    "ViewSplit",
    "pad_sequences",
    "pad_features",
    "collate_sequences",
    "collate_trees",
    # synthetic
    "SyntheticSequences",
    "SyntheticTreebank",
    "SyntheticMultiLabel",
    "hmm_sequences",
    "pcfg_treebank",
    "correlated_multilabel",
]
