"""Values derived from a tensor, computed once and kept while the tensor lives unchanged.

A full-batch optimiser evaluates the same chunks of data again and again (L-BFGS: 20-30
objective evaluations per step, 150 to convergence on CoNLL-2002 Spanish), and an objective
evaluation passes one batch's potentials through several public entry points (a loss's own
checks, then the structure's ``score`` and ``log_partition``), each of which validates its
inputs. What those checks and layouts derive from a tensor (a value range, a finiteness
verdict, a sparse layout) is kept here, keyed by the tensor itself (held weakly: an entry goes
with its tensor) and stamped with its version counter, storage, shape and strides, so an
in-place change (also through a view) or a new tensor computes it again. Writes that bypass
the version counter (through ``.data`` or ``.numpy()``) are not seen; inference tensors (no
version counter) are never memoised.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Generic, TypeVar

from torch import Tensor
from torch.utils.weak import WeakTensorKeyDictionary

__all__ = ["TensorMemo", "stamp", "value_range"]

T = TypeVar("T")


def stamp(x: Tensor) -> tuple[Any, ...]:
    """What identifies the values of ``x`` while it lives: version counter, storage, shape and
    strides."""
    return (x._version, x.data_ptr(), tuple(x.shape), x.stride())


class TensorMemo(Generic[T]):
    """A value per tensor, kept while the tensor (and every tensor in ``also``) is unchanged.

    Example (the chain's finiteness verdict, which also reads the other factors)::

        _FINITE: TensorMemo[bool] = TensorMemo()
        finite = _FINITE.get(emissions, lambda: check(emissions, transitions),
                             also=(transitions,))
    """

    def __init__(self) -> None:
        self._store: WeakTensorKeyDictionary = WeakTensorKeyDictionary()

    def get(self, key: Tensor, make: Callable[[], T], also: tuple[Tensor, ...] = ()) -> T:
        """``make()``, or its value from the last call with this ``key`` when neither ``key``
        nor the tensors of ``also`` (e.g. the lengths a check of ``key`` reads) changed."""
        if key.is_inference() or any(x.is_inference() for x in also):
            return make()
        now = (stamp(key), *(stamp(x) for x in also))
        hit = self._store.get(key)
        # the tensors of ``also`` by identity (weak references: a new tensor at a freed
        # one's address is another tensor), then their stamps
        if (hit is not None and hit[0] == now and len(hit[1]) == len(also)
                and all(ref() is x for ref, x in zip(hit[1], also))):
            return hit[2]
        value = make()
        self._store[key] = (now, tuple(weakref.ref(x) for x in also), value)
        return value


_RANGES: TensorMemo[tuple[int, int]] = TensorMemo()


def value_range(x: Tensor) -> tuple[int, int]:
    """``(min, max)`` of a non-empty integer tensor, kept while it lives unchanged (the range
    checks of feature indices and lengths: a full batch's chunks come again at every objective
    evaluation)."""
    return _RANGES.get(x, lambda: (int(x.min()), int(x.max())))
