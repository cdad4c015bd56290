"""Lightning data modules (they import Lightning; :mod:`structssl.data` loads them on first use).

=========================================  ==================================================
module                                     data module
=========================================  ==================================================
:mod:`~structssl.data.modules.base`        ``SemiSupervisedDataModule`` (splits, loaders,
                                           sharding), ``split_pool``, ``ShardSampler``
:mod:`~structssl.data.modules.synthetic`   ``SyntheticHMMDataModule`` (built-in HMM task)
:mod:`~structssl.data.modules.conll`       ``CoNLLDataModule`` (column files, any tag set)
:mod:`~structssl.data.modules.citations`   ``CitationsDataModule`` (Cora citations, CoDL)
:mod:`~structssl.data.modules.ocr`         ``OcrDataModule`` (OCR words, 10 folds)
:mod:`~structssl.data.modules.treebank`    ``TreebankDataModule``, ``GrammarScorer``
:mod:`~structssl.data.modules.arff`        ``ArffDataModule`` (your own multi-label files)
:mod:`~structssl.data.modules.mulan`       ``MulanDataModule`` (scene / yeast / emotions)
:mod:`~structssl.data.modules.coil`        ``CoilDataModule`` (SSL-book COIL)
=========================================  ==================================================

Every name is importable from :mod:`structssl.data` (``structssl.data.CoNLLDataModule``), the
form configs use in ``class_path``.
"""

from __future__ import annotations

from structssl.data.modules.base import (
    DEFAULT_LABELED_FRACTION,
    SemiSupervisedDataModule,
    ShardSampler,
    seeded_parts,
    split_pool,
    stack_collate,
    with_index,
    without_labels,
)
from structssl.data.modules.arff import ArffDataModule
from structssl.data.modules.citations import CitationsDataModule
from structssl.data.modules.coil import COIL_NUM_CLASSES, CoilDataModule
from structssl.data.modules.conll import CoNLLDataModule, LengthBucketSampler, length_chunks
from structssl.data.modules.mulan import MulanDataModule, MulanSplit, load_pooled, mulan_split
from structssl.data.modules.ocr import OcrDataModule
from structssl.data.modules.synthetic import SyntheticHMMDataModule
from structssl.data.modules.treebank import GrammarScorer, TreebankDataModule

from structssl.data.modules import arff, base, citations, coil, conll, mulan, ocr, synthetic, treebank

__all__ = [
    name
    for module in (base, synthetic, conll, arff, citations, ocr, treebank, mulan, coil)
    for name in module.__all__
]
