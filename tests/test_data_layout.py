"""The public names stay importable where users import them (issue 20): every name of
``structssl.data`` and ``structssl.constraints`` resolves, the data modules load lazily (no
Lightning for ``import structssl.data``), and the lazy list matches the modules' exports."""

from __future__ import annotations

import importlib

import pytest


def test_constraints_public_names_resolve() -> None:
    import structssl.constraints as constraints

    for name in constraints.__all__:
        obj = getattr(constraints, name)
        if isinstance(obj, type):  # configs name classes as structssl.constraints.<Name>
            module, _, attr = f"structssl.constraints.{name}".rpartition(".")
            assert getattr(importlib.import_module(module), attr) is obj


def test_data_lazy_names_match_the_modules_exports() -> None:
    pytest.importorskip("pytorch_lightning")
    import structssl.data as data
    import structssl.data.modules as modules

    assert sorted(data._DATA_MODULES) == sorted(modules.__all__)
    for name in data.__all__:
        assert getattr(data, name) is not None, name
    assert data.CoNLLDataModule is modules.conll.CoNLLDataModule
    assert set(modules.__all__) <= set(dir(data))
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchDataModule'"):
        data.NoSuchDataModule  # noqa: B018
