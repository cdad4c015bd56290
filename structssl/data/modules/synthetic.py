"""The built-in synthetic sequence task as a data module (no download): the quick-start data."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Optional

import torch

from structssl.data.modules.base import (
    Example,
    SemiSupervisedDataModule,
    _check_bandwidth,
    _count,
    _random_fourier_features,
    split_pool,
    without_labels,
)
from structssl.data.synthetic import hmm_sequences

__all__ = ["SyntheticHMMDataModule"]


class SyntheticHMMDataModule(SemiSupervisedDataModule):
    """Sequences from a Gaussian-emission HMM (built in, no download): the quick-start data.

    One HMM (:func:`~structssl.data.synthetic.hmm_sequences` with ``seed``) generates
    ``num_train + num_dev + num_test`` sequences; the first ``num_train`` form the training
    pool, split by :func:`split_pool` into labeled / unlabeled with ``split_seed``. Inputs are
    the dense emissions ``inputs`` (B, N, dim) for ``LinearChainScorer(input_dim=dim)``; with
    ``two_view=True`` the first ``dim // 2`` coordinates are ``inputs`` and the rest
    ``inputs_b`` (for ``TwoViewScorer`` and the co-training procedure).

    ``emission="galaxy"`` (with ``dim=2``) gives the thesis's galaxy task instead (ch. 7.4.3:
    each state emits 2-D points of one arm of a spiral). ``random_features=R`` replaces the
    emissions by R random Fourier features of the RBF kernel of bandwidth ``kernel_sigma``
    (drawn from ``seed``; a kernel machine's features for the linear scorer, e.g. the thesis's
    RBF kernel of sigma 0.35 on galaxy). ``transductive=True`` evaluates on the unlabeled pool:
    no dev or test sequences are drawn, and the dev and test splits are the unlabeled
    sequences with their labels (hidden from training), the thesis's protocol on galaxy.

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
        separation: distance of the emission means from the origin (``"gaussian"``).
        noise: emission standard deviation (default: 1 for ``"gaussian"``, 0.05 for
            ``"galaxy"``).
        emission: ``"gaussian"`` (means at ``separation`` from the origin) or ``"galaxy"``
            (spiral arms; needs ``dim=2``).
        random_features: replace the emissions by this many random Fourier features of the
            RBF kernel (``inputs`` (B, N, random_features)); ``None``: the emissions.
        kernel_sigma: the RBF kernel's bandwidth for ``random_features``.
        transductive: dev and test are the unlabeled sequences with their labels (``num_dev``
            and ``num_test`` unused).
        two_view: split the input coordinates into two views.
        seed: the HMM and sampling seed.
        split_seed: the labeled / unlabeled split seed.
        data_dir: unused (synthetic data); accepted so every data module has the argument.
        **kwargs: the loader options of :class:`~structssl.data.SemiSupervisedDataModule`
            (``batch_size``, ``unlabeled_batch_size``, ``eval_batch_size``, ``shuffle``,
            ``num_workers``).
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
        noise: Optional[float] = None,
        emission: Literal["gaussian", "galaxy"] = "gaussian",
        random_features: Optional[int] = None,
        kernel_sigma: float = 1.0,
        transductive: bool = False,
        two_view: bool = False,
        seed: int = 0,
        split_seed: int = 0,
        data_dir: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
        self.noise = None if noise is None else float(noise)
        if emission not in ("gaussian", "galaxy"):
            raise ValueError(f"emission must be 'gaussian' or 'galaxy'; got {emission!r}")
        if emission == "galaxy" and self.dim != 2:
            raise ValueError(f"dim must be 2 with emission='galaxy'; got {dim!r}")
        self.emission = emission
        self.random_features = (
            None if random_features is None else _count(random_features, "random_features", 1)
        )
        self.kernel_sigma = _check_bandwidth(kernel_sigma)
        self.transductive = bool(transductive)
        self.two_view = bool(two_view)
        if self.two_view and self.random_features == 1:
            raise ValueError("random_features must be >= 2 with two_view=True; got 1")
        self.seed = seed
        self.split_seed = split_seed
        self.data_dir = data_dir
        # validate the split arguments now (a user mistake fails at construction)
        self._split_args = dict(
            num_labeled=num_labeled, labeled_fraction=labeled_fraction, num_unlabeled=num_unlabeled
        )
        split_pool(self.num_train, seed=split_seed, **self._split_args)  # type: ignore[arg-type]

    @property
    def input_dim(self) -> int:
        """D of ``inputs`` (both views together): ``random_features`` or ``dim``."""
        return self.dim if self.random_features is None else self.random_features

    @property
    def view_dims(self) -> tuple[int, int]:
        """Input dims of the two views (``two_view=True``)."""
        d = self.input_dim
        return d // 2, d - d // 2

    def build(self) -> dict[str, list[Example]]:
        total = self.num_train
        if not self.transductive:
            total += self.num_dev + self.num_test
        data = hmm_sequences(
            total,
            length=self.length,
            num_states=self.num_states,
            switch_prob=self.switch_prob,
            emission=self.emission,
            dim=self.dim,
            separation=self.separation,
            noise=self.noise,
            min_length=self.min_length,
            seed=self.seed,
            dtype=torch.float32,
        )
        if self.random_features is not None:
            features = _random_fourier_features(
                data.inputs, self.random_features, self.kernel_sigma, self.seed
            )
            data = dataclasses.replace(data, inputs=features)
        examples: list[Example] = []
        half = self.input_dim // 2
        for example in data.examples():
            if self.two_view:
                x = example.pop("inputs")
                example = {"inputs": x[:, :half], "inputs_b": x[:, half:], **example}
            examples.append(example)
        pool = examples[: self.num_train]
        labeled, unlabeled = split_pool(
            self.num_train, seed=self.split_seed, **self._split_args  # type: ignore[arg-type]
        )
        if self.transductive:
            evaluation = [pool[i] for i in unlabeled.tolist()]
            return {
                "labeled": [pool[i] for i in labeled.tolist()],
                "unlabeled": without_labels(evaluation),
                "dev": evaluation,
                "test": evaluation,
            }
        return {
            "labeled": [pool[i] for i in labeled.tolist()],
            "unlabeled": without_labels([pool[i] for i in unlabeled.tolist()]),
            "dev": examples[self.num_train : self.num_train + self.num_dev],
            "test": examples[self.num_train + self.num_dev :],
        }
