"""Every procedure's constructor options (issue 20): the options shared by all procedures are
declared once, on StructuredModule, and reach the procedures through ``**kwargs``; configs
(jsonargparse) and ``load_from_checkpoint`` (the saved hyper-parameters passed back as keyword
arguments) must see exactly each procedure's options, no more (a value a procedure fixes for
its base, such as SupervisedModule's ``Cu = 0``, is not one)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("jsonargparse")

from structssl.constraints import AllowedFirst, ConstraintSet  # noqa: E402
from structssl.scorers import LinearChainScorer  # noqa: E402
from structssl.scorers.multilabel import MultiLabelScorer  # noqa: E402
from structssl.structures import LinearChain, PairwiseMultiLabel  # noqa: E402
from structssl.training import (  # noqa: E402
    CCCPModule,
    CoDLModule,
    CoDLPlusModule,
    CompositeLikelihoodModule,
    CoTrainingModule,
    LabelSwitchingModule,
    StructuredModule,
    SupervisedModule,
    TransductiveModule,
    TSVMPlusModule,
)
from structssl.training.modules import init_options  # noqa: E402

SHARED = {
    "optimizer", "lr", "lbfgs_max_iter", "lbfgs_history", "lbfgs_precondition", "momentum",
    "regularize_bias", "num_labeled", "num_unlabeled", "task", "tags", "tolerance", "valid_spans",
}  # fmt: skip


def _chain() -> tuple[Any, Any]:
    return LinearChain(3), LinearChainScorer(3, input_dim=4)


def _multilabel() -> tuple[Any, Any]:
    return PairwiseMultiLabel(3), MultiLabelScorer(3, input_dim=4)


BUILDERS: dict[str, tuple[type, Callable[[], tuple[Any, Any]], dict[str, Any]]] = {
    "supervised": (SupervisedModule, _chain, {"optimizer": "adam", "lr": 0.1}),
    "transductive": (TransductiveModule, _chain, {"warm_start_epochs": 1, "lbfgs_max_iter": 3}),
    "cotraining": (CoTrainingModule, _chain, {"cu_start": 0.1, "momentum": 0.5}),
    "cccp": (
        CCCPModule, _chain,
        {"constraints": ConstraintSet([AllowedFirst(["a"])], labels=["a", "b", "c"]), "lr": 0.2},
    ),
    "label_switching": (LabelSwitchingModule, _chain, {"max_passes": 2, "optimizer": "sgd"}),
    "codl": (
        CoDLModule, _chain,
        {"constraints": ConstraintSet([AllowedFirst(["a"])], labels=["a", "b", "c"]), "gamma": 0.5},
    ),
    "composite": (CompositeLikelihoodModule, _multilabel, {"learning": "exact", "lr": 0.3}),
    "tsvm_plus": (TSVMPlusModule, _multilabel, {"constraints": "none"}),
    "codl_plus": (CoDLPlusModule, _multilabel, {"perceptron_epochs": 2, "num_labeled": 4}),
}


def test_options_resolve_through_the_base_classes() -> None:
    base = init_options(StructuredModule)
    assert SHARED <= base
    assert init_options(SupervisedModule) == {"structure", "scorer", "loss", "C"} | (
        SHARED - {"num_unlabeled"}
    )
    assert {"warm_start_epochs", "balance_weight"} | SHARED <= init_options(CoTrainingModule)
    assert init_options(CCCPModule) & {"C", "Cu"} == set()  # CCCP fixes them (C1, C2 instead)
    composite = init_options(CompositeLikelihoodModule)
    assert {"learning", "constraints", "engine", "lbfgs_max_iter"} <= composite
    assert composite & {"task", "tags"} == set()  # fixed to the multi-label task
    chain_codl = init_options(CoDLModule)
    assert {"gamma", "penalty_scale", "search_k", "constrained_decoding", "C", "Cu"} <= chain_codl
    # label switching's own options are fixed by CoDL (it does not switch)
    assert chain_codl & {"max_switches", "max_passes", "block_size", "num_trials", "bonus", "seed"} == set()
    codl = init_options(CoDLPlusModule)
    assert {"perceptron_epochs", "num_labeled", "constraints", "Cu"} <= codl
    assert codl & {"C", "optimizer", "lr", "lbfgs_max_iter", "momentum", "task"} == set()


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_saved_options_rebuild_the_procedure(name: str) -> None:
    """What ``load_from_checkpoint`` does: the hyper-parameters back as keyword arguments."""
    cls, make, options = BUILDERS[name]
    structure, scorer = make()
    model = cls(structure, scorer, **options)
    saved = dict(model.hparams)
    assert set(saved) <= init_options(cls), set(saved) - init_options(cls)
    modules = {k: v for k, v in options.items() if k not in saved}  # passed again, as structure
    assert set(modules) <= {"constraints"}
    assert all(saved[k] == v for k, v in options.items() if k in saved)
    rebuilt = cls(*make(), **saved, **modules)
    assert dict(rebuilt.hparams) == saved
    assert rebuilt.optimizer_name == model.optimizer_name and rebuilt.lr == model.lr
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        cls(*make(), **options, no_such_option=1)


def test_a_fixed_value_is_not_an_option() -> None:
    with pytest.raises(TypeError, match="multiple values for argument 'Cu'"):
        SupervisedModule(*_chain(), Cu=1.0)
