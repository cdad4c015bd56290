"""Data: readers for the benchmark formats, token features, batching, synthetic generators.

Readers return plain Python / numpy / torch objects, decompress ``.gz`` transparently and
raise ``ValueError`` naming the file and the 1-based line of malformed input. Loaders
(``load_*``) find the files under a data directory: the ``data_dir`` argument, else
``$STRUCTSSL_DATA``, else ``../shared/data`` (see :mod:`structssl.data.paths`).

=================================  ===========================================================
module                             content
=================================  ===========================================================
:mod:`~structssl.data.paths`       data directory resolution, ``open_text`` (``.gz``)
:mod:`~structssl.data.records`     ``Vocabulary``, ``Sequence``, ``TaggedCorpus``
:mod:`~structssl.data.conll`       CoNLL column files (CoNLL-2002)
:mod:`~structssl.data.citations`   Cora citation segmentation files (token, label, features)
:mod:`~structssl.data.arff`        Mulan ARFF (dense and sparse) + label XML
:mod:`~structssl.data.treebank`    bracketed treebanks, CNF, trees as labelled spans
:mod:`~structssl.data.ocr`         Taskar's OCR ``letter.data`` (words, folds)
:mod:`~structssl.data.coil`        SSL-book ``.mat`` files (COIL) with the fixed splits
:mod:`~structssl.data.features`    ``FeatureExtractor`` (sparse indices), ``ViewSplit``
:mod:`~structssl.data.batch`       padding and ``collate_fn``s (``lengths`` convention)
:mod:`~structssl.data.synthetic`   HMM ("galaxy"), PCFG treebank, correlated multi-label
=================================  ===========================================================
"""

from __future__ import annotations

from structssl.data.arff import MultiLabelData, load_mulan, read_arff, read_mulan_labels
from structssl.data.batch import collate_sequences, collate_trees, pad_features, pad_sequences
from structssl.data.citations import CITATION_LABELS, load_citations, read_citations
from structssl.data.coil import SslSplits, load_coil, read_coil
from structssl.data.conll import CONLL2002_LABELS, load_conll2002, read_conll
from structssl.data.features import (
    TOKEN_VIEW_TEMPLATES,
    FeatureBatch,
    FeatureExtractor,
    ViewSplit,
)
from structssl.data.ocr import OCR_LETTERS, OcrWords, load_ocr, ocr_fold_split, read_ocr
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
from structssl.data.treebank import (
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

__all__ = [
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
