"""Readers of file formats, one module per format (no Lightning).

Readers return plain Python / numpy / torch objects, decompress ``.gz`` transparently and raise
``ValueError`` naming the file and the 1-based line of malformed input; loaders (``load_*``)
find the files under a data directory (see :mod:`structssl.data.paths`).

=========================================  ==================================================
module                                     format
=========================================  ==================================================
:mod:`~structssl.data.formats.conll`       CoNLL column files (CoNLL-2002)
:mod:`~structssl.data.formats.citations`   Cora citation segmentation files
:mod:`~structssl.data.formats.arff`        Mulan ARFF (dense and sparse) + label XML
:mod:`~structssl.data.formats.treebank`    bracketed treebanks, CNF, trees as labelled spans
:mod:`~structssl.data.formats.ocr`         Taskar's OCR ``letter.data`` (words, folds)
:mod:`~structssl.data.formats.coil`        SSL-book ``.mat`` files (COIL) with fixed splits
=========================================  ==================================================
"""
