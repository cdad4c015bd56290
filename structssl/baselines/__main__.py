"""``python -m structssl.baselines``: train a QP / perceptron baseline on a chain data set.

Data: ``hmm`` (the synthetic chain of :mod:`structssl.baselines.synthetic`), ``conll``
(CoNLL-2002 Spanish, sparse :class:`~structssl.data.FeatureExtractor` features) or ``ocr``
(Taskar's OCR letters, fold 0). Prints the primal objective, the fit time and the test token
accuracy as JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from structssl.baselines import ChainFeatureMap, CuttingPlaneSSVM, StructuredPerceptron, hmm_chain


def _pad(seqs: list[torch.Tensor]) -> torch.Tensor:
    n = max(len(s) for s in seqs)
    out = torch.zeros((len(seqs), n) + tuple(seqs[0].shape[1:]), dtype=seqs[0].dtype)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


def load(name: str, n_train: int, n_test: int) -> tuple:
    """``(feature_map, (x, y, lengths) train, (x, y, lengths) test)`` of a named data set."""
    if name == "hmm":
        d = hmm_chain(num_sequences=n_train + n_test)
        fmap = ChainFeatureMap(5, input_dim=21, bias=False)
        tr, te = slice(0, n_train), slice(n_train, n_train + n_test)
        return fmap, (d.inputs[tr], d.labels[tr], d.lengths[tr]), (d.inputs[te], d.labels[te], d.lengths[te])
    if name == "conll":
        from structssl.data import FeatureExtractor, load_conll2002
        from structssl.data.batch import pad_features

        train, test = load_conll2002("train"), load_conll2002("dev")
        tr, te = train.sequences[:n_train], test.sequences[:n_test]
        fx = FeatureExtractor().fit(tr)
        xtr, ltr = pad_features(fx.transform(tr))
        xte, lte = pad_features(fx.transform(te))
        fmap = ChainFeatureMap(len(train.labels), num_features=fx.num_features)
        return (fmap, (xtr, _pad(train.encode_labels()[:n_train]), ltr),
                (xte, _pad(test.encode_labels()[:n_test]), lte))
    if name == "ocr":
        from structssl.data import load_ocr, ocr_fold_split

        ocr = load_ocr()
        a, b = ocr_fold_split(ocr.folds, 0)

        def batch(idx: np.ndarray) -> tuple:
            x = _pad([torch.from_numpy(ocr.pixels[i].astype(np.float64)) for i in idx])
            return x, _pad([torch.from_numpy(ocr.labels[i]) for i in idx]), torch.tensor(
                [len(ocr.labels[i]) for i in idx]
            )

        return ChainFeatureMap(26, input_dim=128), batch(a[:n_train]), batch(b[:n_test])
    raise ValueError(f"data must be 'hmm', 'conll' or 'ocr'; got {name!r}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="structssl baselines", description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="hmm", choices=["hmm", "conll", "ocr"])
    ap.add_argument("--method", default="one_slack", choices=["one_slack", "n_slack", "perceptron"])
    ap.add_argument("--rescaling", default="margin", choices=["margin", "slack"])
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--epsilon", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--train", type=int, default=200)
    ap.add_argument("--test", type=int, default=200)
    args = ap.parse_args(argv)
    fmap, (xtr, ytr, ltr), (xte, yte, lte) = load(args.data, args.train, args.test)
    t0 = time.perf_counter()
    if args.method == "perceptron":
        model = StructuredPerceptron(fmap, epochs=args.epochs).fit(xtr, ytr, ltr)
        extra: dict = {"epochs": len(model.history_)}
    else:
        model = CuttingPlaneSSVM(fmap, C=args.C, formulation=args.method, rescaling=args.rescaling,
                                 epsilon=args.epsilon).fit(xtr, ytr, ltr)
        extra = {"iterations": len(model.history_), "dual": model.dual_, "converged": model.converged_}
    fit_s = time.perf_counter() - t0
    pred = model.predict(xte, lte)
    valid = torch.arange(yte.shape[1]) < lte.unsqueeze(1)
    acc = float(((pred == yte) & valid).sum() / valid.sum())
    print(json.dumps({"data": args.data, "method": args.method, "fit_time_s": fit_s,
                      "primal": model.objective(xtr, ytr, ltr, C=args.C), "test_accuracy": acc, **extra}))


if __name__ == "__main__":
    main()
