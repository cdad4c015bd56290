"""Training procedures as ``LightningModule``s: supervised, transductive (nabla-TSVM), co-training.

A procedure composes a **structure** (the decoder / dynamic programs), a **scorer** (the
parameters: inputs -> potentials) and **losses** (parameter-free, see ``docs/losses.md``); it
never re-implements a dynamic program.

Objective (all procedures). The SVM objectives of the thesis (seed 001, OP 7.2 / 7.4 / 7.5) are
``1/2 ||w||^2 + C sum_{i<=n} l_i + C_u sum_{j<=m} u_j`` over n labeled and m unlabeled
examples. The procedures minimise that objective **divided by n**:

    J(w) = ||w||^2 / (2 n) + C * mean_i l_i + C_u * (m / n) * mean_j u_j

which has the same minimiser, keeps the numbers O(1) whatever n, and is what a mini-batch
estimates without bias (the means run over the batch). ``||w||^2`` is the scorer's
``weight_norm_squared()`` (every parameter, biases included unless
``regularize_bias=False``). ``C_u = 1`` gives an unlabeled example the same weight as a
labeled one (the thesis's convention). n and m are the sizes of the labeled
and unlabeled training sets: the ``num_labeled`` / ``num_unlabeled`` arguments, or, when they
are ``None``, the data module's ``num_labeled_examples`` / ``num_unlabeled_examples``. The
likelihood losses (``CRFNLLLoss``, ``CompositeLikelihoodLoss``) fit the same template (a
Gaussian prior with variance ``C`` on the summed log-likelihood). Seed 004's procedures
(:mod:`structssl.training.composite`) keep that paper's own form instead, a prior of variance
``C`` on the *mean* log-likelihoods, whatever n and m (their ``objective_weights``).

Annealing. ``C``, ``C_u`` and the smax sharpness ``rho`` are the *final* values; their current
values live in buffers (``current_C``, ``current_Cu``, ``current_rho``: saved in checkpoints)
that the callbacks of :mod:`structssl.training.callbacks` set each epoch. Without a callback
the current values are the final ones.

Optimisers. ``optimizer="lbfgs"`` (default) runs ``torch.optim.LBFGS`` (strong Wolfe line
search, ``lbfgs_max_iter`` iterations per training step) on each batch: with the data
modules' default ``batch_size=None`` every split is one batch, so each epoch is
``lbfgs_max_iter`` full-batch L-BFGS iterations, the fast path for linear scorers on small
data; ``lbfgs_precondition=a`` runs it diagonally preconditioned by the labeled data's gold
part counts (:mod:`structssl.training.preconditioning`: the same objective and optimum in
fewer iterations over sparse features). ``"adam"`` / ``"sgd"`` are mini-batch first-order
steps with learning rate ``lr``. All three run under manual optimisation
(``automatic_optimization = False``) with a closure that recomputes the objective, so L-BFGS
can re-evaluate it during its line search; the non-convex terms (pseudo-labels, violators)
are re-decoded at every evaluation.

Convergence (``tolerance``). Without it (``None``, the default) training runs
``trainer.max_epochs`` epochs. With ``tolerance=tol`` training stops at the end of the first
epoch ``e`` whose objective is the final one (every annealed ``C`` / ``C_u`` / ``rho`` at its
configured value, in epoch ``e`` and for the relative test in epoch ``e - 1`` too) and where

* the relative decrease of the objective over the epoch,
  ``(J_{e-1} - J_e) / max(|J_e|, tiny)``, is below ``tol`` (an increase counts as no
  decrease), CRFsuite's stopping test with a period of one epoch: with full batches and
  L-BFGS, "``tol`` over ``lbfgs_max_iter`` iterations" (CRFsuite's default is 1e-5 over 10);
  ``J_e`` is the epoch's ``train/objective`` (full batch: the last evaluation of the epoch,
  normally at the weights the epoch ends with; mini-batches: the mean over the epoch's
  batches, a noisy estimate); or
* L-BFGS ended every step of the epoch before ``lbfgs_max_iter`` iterations by its own tests
  (``torch.optim.LBFGS``'s gradient / change tolerances, not its evaluation budget): the
  optimum of that objective is reached to working precision (in float32 often where the
  objective stops changing at all: on CoNLL-2002 Spanish before the relative test reaches
  1e-4, see ``benchmarks/README.md``, "Your own data").

Epochs with a schedule still under way (a ``C`` barrier, a ``C_u`` ramp, ``rho``
continuation, the supervised warm start's ``C_u = 0``) never stop the run and never serve as
``J_{e-1}``. ``train/converged`` (1 at the stopping epoch) and ``train/relative_decrease``
are logged, and one info line names the epoch, the L-BFGS iterations, the objective and the
test that held; :attr:`StructuredModule.converged` keeps the same as a dict. ``J_{e-1}`` is
saved in checkpoints, so a resumed run stops where the uninterrupted one does; on several
processes the objective is the one reduced across ranks, so every rank takes the same
decision. The procedures with an outer loop and a stopping rule of their own (CCCP's ``tol``,
label switching's annealing, seed 004's rounds) refuse ``tolerance``
(:attr:`StructuredModule.convergence_refusal`).

Batches: see :mod:`structssl.data.modules.base`. The training step takes
``{"labeled": L, "unlabeled": U}`` (``U`` optional; a bare ``L`` is accepted too); validation,
test and predict take ``L``. ``L`` / ``U`` hold ``inputs`` (and ``inputs_b`` for two views),
``lengths`` (sequence and tree tasks) and, for ``L``, ``labels``. The scorer is called as
``scorer(inputs, lengths)`` when its ``forward`` takes a ``lengths`` argument, else
``scorer(inputs)``; the co-training procedure calls ``scorer(inputs, inputs_b, lengths)``.

Evaluation decodes with ``structure.argmax`` (no autograd, works under Lightning's default
``inference_mode``) and updates :func:`~structssl.metrics.task_metrics`; the metrics are
logged per epoch as ``train/...`` (decoded on the labeled training batch after each step),
``val/...`` and ``test/...``, together with ``train/objective``, ``train/labeled_loss``,
``train/unlabeled_loss``, ``train/weight_norm_squared``, the current ``train/C``, ``train/Cu``,
``train/rho``, and ``val/loss`` / ``test/loss`` (mean labeled loss).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, ClassVar, Literal, NamedTuple, Optional, Sequence

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from structssl.data.modules.base import user_error
from structssl.losses import CRFNLLLoss
from structssl.metrics import metric_scheme, task_metrics
from structssl.scorers.base import weight_norm_squared
from structssl.structures.base import Potentials, Structure, resolve_sizes
from structssl.structures.linear_chain import ChainPotentials, LinearChain, bio_allowed_transitions
from structssl.training.preconditioning import (
    PreconditionedLBFGS,
    check_precondition,
    curvature_scales,
)

__all__ = [
    "StructuredModule",
    "SupervisedModule",
    "ObjectiveTerms",
]

Task = Literal["sequence", "bio", "multiclass", "multilabel", "tree"]
OptimizerName = Literal["lbfgs", "adam", "sgd"]
Batch = dict[str, Any]

#: the metric of each task that selects the best checkpoint on dev
_PRIMARY_METRIC = {
    "sequence": "token_accuracy", "bio": "span_f1", "multiclass": "accuracy",
    "multilabel": "micro_f1", "tree": "bracket_f1",
}


class ObjectiveTerms(NamedTuple):
    """The pieces of ``J(w)`` at one evaluation (see the module docstring).

    Attributes:
        objective: ``J(w)``, the value minimised (differentiable).
        weight_norm_squared: ``||w||^2``.
        labeled_loss: ``mean_i l_i`` over the labeled batch.
        unlabeled_loss: ``mean_j u_j`` over the unlabeled batch (0 when there is none).
    """

    objective: Tensor
    weight_norm_squared: Tensor
    labeled_loss: Tensor
    unlabeled_loss: Tensor


def _positive(value: float, name: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite float; got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}; got {value!r}")
    return float(value)


def _optional_count(value: Optional[int], name: str, minimum: int) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} or None; got {value!r}")
    return value


def as_chunks(part: Any) -> list[Batch]:
    """A training part (labeled or unlabeled) as its list of chunks: a list of chunks as it
    is, one batch as a list of one, None as an empty list (see
    :attr:`StructuredModule.supports_chunks`)."""
    if part is None:
        return []
    return part if isinstance(part, list) else [part]


def num_examples(chunks: Sequence[Batch]) -> int:
    """The number of examples in a list of chunks."""
    return sum(int(chunk["inputs"].shape[0]) for chunk in chunks)


def chunk_shares(chunks: Sequence[Batch]) -> list[float]:
    """Each chunk's share of the examples of a list of chunks: a mean over the whole list is
    ``sum_c share_c * mean_c``."""
    total = num_examples(chunks)
    return [int(chunk["inputs"].shape[0]) / total for chunk in chunks]


def _tolerance(value: Optional[float], cls: type) -> Optional[float]:
    """Check the ``tolerance`` option (None, or a finite float > 0 the procedure accepts)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"tolerance must be a finite float > 0 or None; got {value!r}")
    if value <= 0:
        raise ValueError(f"tolerance must be > 0 (or None: no convergence stop); got {value!r}")
    refusal = getattr(cls, "convergence_refusal", None)
    if refusal is not None:
        raise ValueError(
            f"{cls.__name__} does not take tolerance (got {value!r}): {refusal}"
        )
    return float(value)


def _new_epoch_track() -> dict[str, Any]:
    """What the convergence test gathers over the steps of one training epoch."""
    return {"objective": 0.0, "size": 0, "final": True, "lbfgs_exits": True, "lbfgs": False}


def _lbfgs_counts(opt: Any) -> Optional[tuple[int, int]]:
    """``(iterations, evaluations)`` so far of an L-BFGS optimiser (its state's ``n_iter``,
    ``func_evals``); None for another optimiser."""
    inner = getattr(opt, "optimizer", opt)  # Lightning's wrapper
    if not isinstance(inner, torch.optim.LBFGS):
        return None
    state = inner.state.get(inner.param_groups[0]["params"][0], {})
    return int(state.get("n_iter", 0)), int(state.get("func_evals", 0))


def _plain(value: Any) -> bool:
    """Whether ``value`` is plain data a checkpoint keeps as a hyper-parameter."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


@functools.lru_cache(maxsize=None)
def init_options(cls: type) -> frozenset[str]:
    """The constructor options of a procedure class as configs and ``load_from_checkpoint``
    give them: its own parameters and, through ``**kwargs``, those of its base classes that it
    does not fix itself (resolved by jsonargparse, as for the ``structssl`` command)."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "options", fail_untyped=False)
    return frozenset(parser.get_defaults()["options"].keys())


def _takes(module: nn.Module, name: str) -> bool:
    return name in inspect.signature(module.forward).parameters


def _rho_holders(loss: nn.Module) -> list[nn.Module]:
    """The modules of ``loss`` that hold an smax ``rho`` (the loss itself or its parts)."""
    return [m for m in loss.modules() if isinstance(getattr(m, "rho", None), (int, float))]


@functools.lru_cache(maxsize=32)
def _bio_masks(tags: tuple[str, ...]) -> tuple[Tensor, Tensor]:
    """:func:`~structssl.structures.bio_allowed_transitions` of a tag set (cached)."""
    return bio_allowed_transitions(tags)


def _forbid(x: Tensor, allowed: Tensor) -> Tensor:
    """``x`` (B, ...) with ``-inf`` where ``allowed`` (...) is False; a batch-shared
    (expanded, stride 0) ``x`` stays shared."""
    allowed = allowed.to(x.device)
    if x.dim() and x.stride(0) == 0:
        return x[0].masked_fill(~allowed, float("-inf")).expand_as(x)
    return x.masked_fill(~allowed, float("-inf"))


class StructuredModule(pl.LightningModule):
    """Shared machinery of the procedures (objective scaling, optimisers, decoding, metrics).

    Subclasses implement :meth:`objective_terms` (and :meth:`potentials` / :meth:`eval_loss` when
    their scorer is not single-view).

    Args:
        structure: the structure (decoder), e.g. ``LinearChain(num_labels)``.
        scorer: the ``nn.Module`` turning inputs into the structure's potentials.
        C: weight of the labeled loss (final value when annealed).
        Cu: weight of the unlabeled loss (final value when annealed; 0 for supervised).
        optimizer: ``"lbfgs"`` (full-batch fast path), ``"adam"`` or ``"sgd"``.
        lr: learning rate (L-BFGS: the initial step length; 1 is its usual value).
        lbfgs_max_iter: L-BFGS iterations per training step.
        lbfgs_history: L-BFGS history size.
        lbfgs_precondition: run L-BFGS diagonally preconditioned by the labeled data's gold
            part counts, with this curvature weight ``a`` (0.01 is a good value; see
            :mod:`structssl.training.preconditioning`): the same objective and minimiser in
            fewer iterations on sparse features. ``None``: torch's plain L-BFGS.
        momentum: SGD momentum.
        regularize_bias: include bias parameters in ``||w||^2``.
        num_labeled: n for the objective scaling (default: the data module's).
        num_unlabeled: m for the objective scaling (default: the data module's).
        task: the metrics family of :func:`~structssl.metrics.task_metrics`.
        tags: the BIO tag names (task ``"bio"`` only).
        tolerance: train to convergence: stop when the relative decrease of the objective
            over an epoch is below this (> 0), or L-BFGS stops by its own tests, once the
            annealed values are final (module docstring, "Convergence"); ``None``: run
            ``trainer.max_epochs`` epochs.
        valid_spans: for span tagging (task ``"bio"``) on a :class:`LinearChain`, decode only
            tag sequences valid in BIO (``I-X`` only after ``B-X`` or ``I-X``, never first):
            the argmax, k-best and marginals of :meth:`decode_potentials` exclude the others
            (``-inf`` transitions), so predictions in any span scheme are well formed and the
            k-best taggings distinct. Training is unchanged.
    """

    #: whether the procedure trains on unlabeled batches (the data modules read it)
    uses_unlabeled: ClassVar[bool] = False
    #: the names of the annealable hyper-parameters
    annealable: ClassVar[tuple[str, ...]] = ("C", "Cu", "rho")
    #: why the procedure refuses ``tolerance`` (its own outer loop and stopping rule), ending
    #: with what to use instead (None: it takes it)
    convergence_refusal: ClassVar[Optional[str]] = None

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        C: float = 1.0,
        Cu: float = 0.0,
        optimizer: OptimizerName = "lbfgs",
        lr: float = 1.0,
        lbfgs_max_iter: int = 20,
        lbfgs_history: int = 10,
        lbfgs_precondition: Optional[float] = None,
        momentum: float = 0.0,
        regularize_bias: bool = True,
        num_labeled: Optional[int] = None,
        num_unlabeled: Optional[int] = None,
        task: Optional[Task] = None,
        tags: Optional[Sequence[str]] = None,
        tolerance: Optional[float] = None,
        valid_spans: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(structure, Structure):
            raise TypeError(f"structure must be a Structure; got {type(structure).__name__}")
        if not isinstance(scorer, nn.Module):
            raise TypeError(f"scorer must be an nn.Module; got {type(scorer).__name__}")
        if optimizer not in ("lbfgs", "adam", "sgd"):
            raise ValueError(f"optimizer must be 'lbfgs', 'adam' or 'sgd'; got {optimizer!r}")
        self.structure = structure
        self.scorer = scorer
        self.C = _positive(C, "C")
        self.Cu = _positive(Cu, "Cu", allow_zero=True)
        self.optimizer_name = optimizer
        self.lr = _positive(lr, "lr")
        self.lbfgs_max_iter = _optional_count(lbfgs_max_iter, "lbfgs_max_iter", 1)
        self.lbfgs_history = _optional_count(lbfgs_history, "lbfgs_history", 1)
        self.lbfgs_precondition = check_precondition(lbfgs_precondition)
        if self.lbfgs_precondition is not None and optimizer != "lbfgs":
            raise ValueError(
                f"lbfgs_precondition={lbfgs_precondition!r} preconditions L-BFGS; got "
                f"optimizer={optimizer!r} (set optimizer: lbfgs, or leave lbfgs_precondition "
                "out)"
            )
        self.momentum = _positive(momentum, "momentum", allow_zero=True)
        self.regularize_bias = bool(regularize_bias)
        self.num_labeled = _optional_count(num_labeled, "num_labeled", 1)
        self.num_unlabeled = _optional_count(num_unlabeled, "num_unlabeled", 0)
        self._given_task = task
        self.tags = None if tags is None else tuple(tags)
        self.tolerance = _tolerance(tolerance, type(self))
        self.valid_spans = bool(valid_spans)
        #: why and where training stopped on ``tolerance`` (None: it has not): ``epoch``,
        #: ``reason`` ("relative_decrease" or "lbfgs"), ``objective``, ``relative_decrease``,
        #: ``lbfgs_iterations``, ``lbfgs_evaluations`` (None without L-BFGS)
        self.converged: Optional[dict[str, Any]] = None
        self._fit_end_lines: list[str] = []  # printed by on_fit_end
        #: ``J`` of the last epoch with the final objective (None: none yet, or the last
        #: epoch's schedule was under way); saved in checkpoints
        self._previous_objective: Optional[float] = None
        self._epoch_track: dict[str, Any] = _new_epoch_track()
        #: the losses' configured rho (``_init_rho`` of the procedures with smax losses)
        self._final_rho = float("nan")
        #: the epoch's weighted sums of the logged training values, and their weight
        self._train_sums: Optional[Tensor] = None
        self._train_size = 0
        self.automatic_optimization = False
        self._scorer_takes_lengths = _takes(scorer, "lengths")
        #: the data format the model was trained on (a plain dict, kept in checkpoints; e.g. a
        #: :class:`~structssl.data.tagging.TaggingFormat`'s state): what prediction needs
        self.data_format: Optional[dict[str, Any]] = None
        self._set_task(task or "sequence")
        #: the data module's class path and options of the fit (``structssl fit`` sets it; kept
        #: in checkpoints): what ``structssl test`` compares where there is no data format
        self.data_options: Optional[dict[str, Any]] = None
        self._sizes: dict[str, Any] = {}
        self._save_configuration()
        self.register_buffer("current_C", torch.tensor(self.C, dtype=torch.float64))
        self.register_buffer("current_Cu", torch.tensor(self.Cu, dtype=torch.float64))
        self.register_buffer("current_rho", torch.tensor(float("nan"), dtype=torch.float64))

    def _set_task(self, task: Task) -> None:
        self.task = task
        # the metrics read the tags as the data's scheme writes them back, as structssl predict
        # scores its output: in IO adjacent spans of one type are one span, in BIOES B-X before
        # O is S-X
        self._metric_scheme = metric_scheme(self.data_format)
        self.train_metrics = task_metrics(task, "train/", self.tags, self._metric_scheme)
        self.val_metrics = task_metrics(task, "val/", self.tags, self._metric_scheme)
        self.test_metrics = task_metrics(task, "test/", self.tags, self._metric_scheme)

    def _adopt_format(self, data_format: dict[str, Any] | None) -> None:
        """Keep the data format of the fit (the data module's, or a checkpoint's); the metrics
        are rebuilt when its tag scheme changes how they read the tags."""
        self.data_format = data_format
        if self.task == "bio" and metric_scheme(data_format) != self._metric_scheme:
            self._set_task(self.task)

    def _save_configuration(self) -> None:
        """Keep the constructor's configuration in checkpoints (``hparams``).

        Under the ``structssl`` CLI the configuration is the YAML the model was built from
        (class paths and init args of the structure, scorer and losses), so
        ``Procedure.load_from_checkpoint(path)`` rebuilds the model alone; built in Python, the
        plain arguments are kept and the module arguments (structure, scorer, losses) must be
        passed again to ``load_from_checkpoint``.
        """
        try:
            from pytorch_lightning.core.mixins.hparams_mixin import _given_hyperparameters
        except ImportError:  # pragma: no cover - older Lightning: plain arguments only
            given = None
        else:
            given = _given_hyperparameters.get()
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        init_frame = frame.f_back  # StructuredModule.__init__; Lightning walks up the subclasses'
        ignore: set[str] = set()
        walk: Any = init_frame
        while walk is not None and walk.f_code.co_name == "__init__" and walk.f_locals.get(
            "self"
        ) is self:
            ignore |= {k for k, v in walk.f_locals.items() if not _plain(v)}
            # a value a subclass fixes for its base (e.g. SupervisedModule's Cu = 0) is not one
            # of its options: loading passes the hyper-parameters back as keyword arguments
            ignore |= set(walk.f_code.co_varnames[: walk.f_code.co_argcount]) - init_options(type(self))
            walk = walk.f_back
        self.save_hyperparameters(
            ignore=None if given is not None else sorted(ignore - {"self"}), frame=init_frame
        )

    # ------------------------------------------------------------------ hyper-parameters
    def losses(self) -> list[nn.Module]:
        """The loss modules of the procedure (for ``rho`` annealing)."""
        return []

    def final_value(self, name: str) -> float:
        """The configured (final) value of an annealable hyper-parameter.

        Raises:
            ValueError: ``name`` is not annealable.
            NotImplementedError: ``rho`` when no loss of the procedure has an smax ``rho``.
        """
        if name == "C":
            return self.C
        if name == "Cu":
            return self.Cu
        if name == "rho":
            holders = [h for loss in self.losses() for h in _rho_holders(loss)]
            if not holders:
                raise NotImplementedError(
                    f"{type(self).__name__}'s losses have no smax rho to anneal"
                )
            return float(self._final_rho)
        raise ValueError(f"name must be one of {self.annealable}; got {name!r}")

    def set_current(self, name: str, value: float) -> None:
        """Set the current value of ``C``, ``Cu`` or ``rho`` (called by the annealing callbacks)."""
        self.final_value(name)  # validates the name
        value = _positive(value, name, allow_zero=(name == "Cu"))
        getattr(self, f"current_{name}").fill_(value)
        if name == "rho":
            self._push_rho()

    def current(self, name: str) -> float:
        """The current value of ``C``, ``Cu`` or ``rho``."""
        if name == "rho":
            return float(self._final_rho if self.current_rho.isnan() else self.current_rho)
        return float(getattr(self, f"current_{name}"))

    def _init_rho(self) -> None:
        """Record the losses' configured rho (the final value of rho annealing)."""
        values = {float(h.rho) for loss in self.losses() for h in _rho_holders(loss)}
        if len(values) > 1:
            raise ValueError(
                f"the losses of {type(self).__name__} must share one smax rho to anneal it; got "
                f"{sorted(values)}"
            )
        self._final_rho = values.pop() if values else float("nan")

    def _push_rho(self) -> None:
        if self.current_rho.isnan():
            return
        for loss in self.losses():
            for holder in _rho_holders(loss):
                holder.rho = float(self.current_rho)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from structssl.training.distributed import save_resume_state

        checkpoint["structssl"] = {
            "sizes": self._sizes, "data_format": self.data_format, "data_options": self.data_options,
            # the convergence test's J of the last epoch (None: none comparable)
            "previous_objective": self._previous_objective,
        }
        save_resume_state(self, checkpoint)  # RNG state (exact resume)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from structssl.training.distributed import load_resume_state

        load_resume_state(self, checkpoint)  # float64 weights in float64, the RNG state
        saved = checkpoint.get("structssl") or {}
        if saved.get("sizes"):
            self.adopt_sizes(saved["sizes"])
        if saved.get("data_format") is not None:
            self._adopt_format(saved["data_format"])
        if saved.get("data_options") is not None:
            self.data_options = saved["data_options"]
        self._previous_objective = saved.get("previous_objective")
        state = checkpoint.get("state_dict", {})
        rho = state.get("current_rho")
        if rho is not None and not bool(torch.as_tensor(rho).isnan()):
            self.current_rho.fill_(float(rho))
            self._push_rho()

    @property
    def learns_from_unlabeled(self) -> bool:
        """Whether the objective has a term over unlabeled examples (a fit without any is
        warned about); ``uses_unlabeled`` unless a subclass's configuration says otherwise."""
        return self.uses_unlabeled

    # ------------------------------------------------------------------ sizes
    def dataset_sizes(self) -> tuple[int, int]:
        """``(n, m)``: labeled and unlabeled training set sizes for the objective scaling.

        Raises:
            ValueError: neither the arguments nor an attached data module give them.
        """
        n, m = self.num_labeled, self.num_unlabeled
        dm = self._datamodule()
        if n is None:
            n = getattr(dm, "num_labeled_examples", None)
        if m is None:
            m = getattr(dm, "num_unlabeled_examples", None)
            if m is None and not self.uses_unlabeled:
                m = 0
        if n is None or m is None:
            raise ValueError(
                "num_labeled and num_unlabeled must be given to "
                f"{type(self).__name__} when the data module does not expose "
                "num_labeled_examples / num_unlabeled_examples; got "
                f"num_labeled={self.num_labeled!r}, num_unlabeled={self.num_unlabeled!r}"
            )
        return int(n), int(m)

    def require_whole_unlabeled(self, chunks: list[Batch], why: str) -> None:
        """Check that one training step's unlabeled chunks are the whole unlabeled set (what a
        step over corpus-level quantities needs: label switching, corpus constraints).

        Raises:
            ValueError: they hold fewer (or more) examples than ``m``; ``why`` says what needs
                the whole set.
        """
        m, got = self.dataset_sizes()[1], num_examples(chunks)
        if got != m:
            raise ValueError(
                f"{why}: every training step must see the whole unlabeled set, m = {m} examples, "
                f"in one batch or as length chunks (data unlabeled_batch_size null); got {got}"
            )

    def adopt_sizes(self, sizes: dict[str, Any]) -> None:
        """Take the sizes the data gives (``num_labels``, ``num_features``, ``task``, ``tags``,
        ...; a data module's ``model_sizes()``): the structure and the scorer fill in the sizes
        their configuration left out (their ``resolve_sizes``), and the task and tags of the
        metrics come from the data unless given.

        Raises:
            ValueError: a size, task or tag list given to the model differs from the data's.
        """
        resolve_sizes(sizes, self.structure, self.scorer)
        task, tags = sizes.get("task"), sizes.get("tags")
        tags = None if tags is None else tuple(tags)
        if self.tags is not None and tags is not None and self.tags != tags:
            raise ValueError(
                f"tags {list(self.tags)} given to {type(self).__name__} differ from the data's "
                f"{list(tags)} (leave tags out to take them from the data)"
            )
        if task is not None and self._given_task is not None and task != self._given_task:
            raise ValueError(
                f"task {self._given_task!r} given to {type(self).__name__} differs from the "
                f"data's {task!r} (leave task out to take it from the data)"
            )
        if task is not None and self._given_task is None and (task, tags) != (self.task, self.tags):
            self.tags = tags
            self._set_task(task)
        self._sizes = dict(sizes)

    def monitor(self) -> str:
        """The dev metric that selects the best checkpoint (higher is better): that of the
        task given, else the attached data module's (callbacks ask before :meth:`setup` has
        adopted it), else the current one."""
        task = self._given_task
        if task is None:
            sizes = getattr(self._datamodule(), "model_sizes", None)
            task = sizes().get("task") if callable(sizes) else None
        return "val/" + _PRIMARY_METRIC[task or self.task]

    def _datamodule(self) -> Any:
        """The data module of the attached trainer (``None`` outside a trainer or without one)."""
        trainer = self._trainer
        return getattr(trainer, "datamodule", None) if trainer is not None else None

    def bind_constraints(self, constraints: Any, estimate_targets: bool = True) -> Any:
        """``constraints`` (a :class:`~structssl.constraints.ConstraintSet`) bound to
        :meth:`label_names` when unbound, and with ``estimate_targets`` every
        ``target="labeled"`` estimated from the data module's labeled examples (logged; the
        counts are summed over the length chunks of
        :func:`~structssl.data.length_chunks`, so a large labeled file is never padded as one
        batch). Procedures call it at setup, estimating for ``fit``.

        Raises:
            ValueError: unbound constraints and no label names known; constraints bound to
                other labels (or another order) than the data's; a ``target="labeled"`` and no
                labeled examples.
        """
        if constraints.label_names is not None:
            names = self.label_names()
            if names is not None and tuple(names) != tuple(constraints.label_names):
                raise user_error(
                    f"{type(self).__name__}: the constraints are bound to the labels "
                    f"{list(constraints.label_names)[:20]}, the data's labels are {list(names)[:20]} "
                    "(label index order): leave labels out of the ConstraintSet (it is bound to "
                    "the data's labels at setup), or list them in the data's order"
                )
        if constraints.label_names is None:
            names = self.label_names()
            if names is None:
                raise ValueError(
                    f"{type(self).__name__}: the constraints {constraints.names} are not bound to "
                    "a label list, and neither the data module (label_names, tags) nor tags= "
                    "give one"
                )
            try:
                constraints = constraints.bind(names)
            except ValueError as err:  # the user's labels and constraints: one line on the CLI
                raise user_error(
                    f"{type(self).__name__}: the constraints {constraints.names} do not fit the "
                    f"data's labels {names[:20]}{' ...' if len(names) > 20 else ''}: {err} "
                    "(write the constraints over your tag set, or use a recipe without "
                    "constraints such as configs/tagger_ssl.yaml)"
                ) from None
        if not estimate_targets:
            return constraints
        pending = constraints.pending_targets
        dm = self._datamodule()
        splits = getattr(dm, "splits", None)
        examples = splits.get("labeled") if isinstance(splits, dict) else None
        if not examples:
            if pending:
                raise ValueError(
                    f"{type(self).__name__}: the constraints {pending} have target='labeled' "
                    "(estimated from the labeled examples), but the data has no labeled "
                    "examples; give the target as a number"
                )
            return constraints
        from pytorch_lightning.utilities.rank_zero import rank_zero_info

        from structssl.data.modules.conll import MIN_CHUNK_POSITIONS, length_chunks

        chunk_positions = getattr(dm, "chunk_positions", None)
        positions = chunk_positions() if chunk_positions is not None else MIN_CHUNK_POSITIONS
        chunks = [dm.collate(part) for part in length_chunks(examples, positions)]
        if pending:
            constraints = constraints.with_targets_from(
                [c["labels"] for c in chunks], [c["lengths"] for c in chunks],
                [c.get("tokens") for c in chunks],
            )
            for con in constraints:
                if con.name in pending:
                    rank_zero_info(
                        f"{type(self).__name__}: {con.name} target estimated from the "
                        f"{len(examples)} labeled examples: {getattr(con, 'target'):.6g}"
                    )
        self._report_gold_violations(constraints, chunks)
        return constraints

    def _report_gold_violations(self, constraints: Any, chunks: list[Batch]) -> None:
        """Log how many labeled examples break each instance-level constraint with their own
        gold labels, and warn when one breaks it in more than a quarter of them: constraints
        that contradict the user's own tagging (e.g. "a lower-case word does not begin an
        entity" on lower-case drug names) push the unlabeled data away from it.

        Raises:
            ValueError: a constraint reads tokens (``WordLabels``, ``PunctuationTransitions``)
                and the examples carry none (at setup, not after the supervised epochs).
        """
        from pytorch_lightning.utilities.rank_zero import rank_zero_info, rank_zero_warn

        instance = [c for c in constraints if c.level == "instance"]
        if not instance:
            return
        broken = dict.fromkeys((c.name for c in instance), 0)
        total = 0
        # how many labeled tokens each pattern rule restricts (logged)
        patterned = [c for c in instance if getattr(c, "pattern", None) is not None and hasattr(c, "restricted")]
        matched = dict.fromkeys((c.name for c in patterned), 0)
        num_tokens = 0
        with torch.no_grad():
            for chunk in chunks:
                labels, lengths, tokens = chunk["labels"], chunk["lengths"], chunk.get("tokens")
                needy = [c.name for c in instance if c.needs_tokens]
                if needy and tokens is None:
                    raise user_error(
                        f"{type(self).__name__}: the constraints {needy} read the tokens of "
                        f"each example, but the examples of {type(self._datamodule()).__name__} "
                        "carry no 'tokens' (a list of strings per example): add them in its "
                        "build(), or drop these constraints"
                    )
                total += int(lengths.shape[0])
                for c in instance:
                    broken[c.name] += int((c.violation(labels, lengths, tokens) > 0).sum())
                if patterned and tokens is not None:
                    words = [w for sentence in tokens for w in sentence]
                    num_tokens += len(words)
                    for c in patterned:
                        matched[c.name] += sum(map(c.restricted, words))
        shares = {name: count / max(total, 1) for name, count in broken.items()}
        rank_zero_info(
            f"{type(self).__name__}: labeled examples whose gold labels break each constraint: "
            + "; ".join(f"{name} {broken[name]} of {total}" for name in broken)
        )
        if matched:  # 0 tokens: the rule has no effect (e.g. Latin letters on another script)
            rank_zero_info(
                f"{type(self).__name__}: tokens of the labeled examples that each pattern rule "
                f"matches (0: the rule has no effect; check its pattern): "
                + "; ".join(f"{name} {count} of {num_tokens}" for name, count in matched.items())
            )
        high = [f"{name} ({100 * share:.0f} %)" for name, share in shares.items() if share > 0.25]
        if high:
            rank_zero_warn(
                f"{type(self).__name__}: the gold labels of the labeled examples break "
                f"{', '.join(high)}: these constraints contradict your own tagging and push the "
                "unlabeled data away from it; check or drop them"
            )

    def label_names(self) -> Optional[list[str]]:
        """The label names in label-index order, to bind constraints to: the data module's
        ``label_names``, else its ``tags`` (a tagging data module's tag set, BIO or plain
        tags such as part-of-speech), else the ``tags`` given to this module, else those of
        the data format saved with the weights (a checkpoint loaded to predict); ``None`` when
        none of them is known."""
        dm = self._datamodule()
        saved = self.data_format.get("tags") if isinstance(self.data_format, dict) else None
        for names in (getattr(dm, "label_names", None), getattr(dm, "tags", None), self.tags, saved):
            if names:
                return [str(name) for name in names]
        return None

    def setup(self, stage: str) -> None:
        dm = self._datamodule()
        model_sizes = getattr(dm, "model_sizes", None)
        if model_sizes is not None:
            try:
                self.adopt_sizes(model_sizes())
            except ValueError as err:  # the config's sizes against the data's: the user's
                raise user_error(str(err)) from None
        saved_format = getattr(dm, "saved_format", None)
        if saved_format is not None:
            self._adopt_format(saved_format())
        expected = getattr(self.structure, "num_labels", None)
        got = getattr(dm, "num_labels", None)
        if expected is not None and got and expected != got:
            raise user_error(
                f"structure.num_labels must match the data module's num_labels = {got}; got "
                f"{expected} (set --model.init_args.structure.init_args.num_labels {got})"
            )
        if stage == "fit" and getattr(dm, "num_labeled_examples", None) == 0:
            raise user_error(
                f"{type(self).__name__}: {type(dm).__name__} has no labeled training examples "
                "(an empty or unreadable training file?); nothing to train on"
            )
        if stage == "fit" and self.learns_from_unlabeled and getattr(dm, "num_unlabeled_examples", None) == 0:
            from pytorch_lightning.utilities.rank_zero import rank_zero_warn

            hint = getattr(dm, "unlabeled_hint", None)
            rank_zero_warn(
                f"{type(self).__name__} is a semi-supervised procedure, but the data has no "
                f"unlabeled examples: it trains on the labeled ones alone{f' ({hint})' if hint else ''}"
            )
        batch_size = getattr(dm, "batch_size", None)
        if stage == "fit" and self.optimizer_name == "lbfgs" and batch_size is not None:
            from pytorch_lightning.utilities.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"{type(self).__name__}: optimizer='lbfgs' on mini-batches (batch_size="
                f"{batch_size}): every batch takes {self.lbfgs_max_iter} L-BFGS iterations with "
                "a curvature history of other batches, which can diverge or collapse to one tag; "
                "train full-batch (batch_size null: length chunks) or set optimizer adam / sgd"
            )

    # ------------------------------------------------------------------ scoring
    def potentials(self, batch: Batch) -> Potentials:
        """The scorer's potentials of a batch (``L`` or ``U``)."""
        inputs = batch["inputs"]
        if self._scorer_takes_lengths:
            return self.scorer(inputs, batch.get("lengths"))
        return self.scorer(inputs)

    def decode_potentials(self, batch: Batch) -> Potentials:
        """The potentials decoded at evaluation and prediction: the scorer's (the joint ones
        for two views), restricted to valid BIO sequences with ``valid_spans``."""
        return self.span_constrained(self.potentials(batch), batch.get("lengths"))

    def span_constrained(self, potentials: Potentials, lengths: Optional[Tensor] = None) -> Potentials:
        """``potentials`` with ``-inf`` on the BIO transitions and first labels that no valid
        tag sequence uses (``valid_spans``, task ``"bio"``, a :class:`LinearChain`); else
        unchanged. Factored potentials keep a batch-shared transition matrix shared."""
        names = self.tags if self.tags is not None else (self.data_format or {}).get("tags")
        if not (self.valid_spans and self.task == "bio" and names and isinstance(self.structure, LinearChain)):
            return potentials
        allowed, first = _bio_masks(tuple(names))
        if isinstance(potentials, ChainPotentials):
            emissions, transitions, start, end = potentials
            return ChainPotentials(
                emissions, _forbid(transitions, allowed), _forbid(start, first), end
            )
        return self.structure.constrain(
            potentials, lengths, allowed_transitions=allowed, allowed_start=first
        )

    def decode(self, batch: Batch) -> Tensor:
        """The argmax labels of a batch (no autograd; works under ``inference_mode``)."""
        labels, _ = self.structure.argmax(self.decode_potentials(batch), batch.get("lengths"))
        return labels

    def forward(self, batch: Batch) -> Tensor:
        """Decode a batch: its argmax labels."""
        return self.decode(batch)

    def weight_norm_squared(self) -> Tensor:
        """``||w||^2`` of the scorer."""
        return weight_norm_squared(self.scorer, self.regularize_bias)

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        """``J(w)`` and its pieces on a training batch (see the module docstring)."""
        raise NotImplementedError

    def eval_loss(self, batch: Batch) -> Tensor:
        """Mean labeled loss of an evaluation batch (logged as ``val/loss``, ``test/loss``)."""
        raise NotImplementedError

    def objective_weights(self) -> tuple[float, float, float]:
        """``(d, a, b)`` of ``J(w) = ||w||^2 / d + a mean_L loss + b mean_U loss``: here
        ``(2 n, C, C_u m / n)``, the per-example scaling of the module docstring."""
        n, m = self.dataset_sizes()
        return 2 * n, self.current("C"), self.current("Cu") * (m / n)

    def _combine(
        self, norm: Tensor, labeled: Tensor, unlabeled: Optional[Tensor]
    ) -> ObjectiveTerms:
        divisor, weight_l, weight_u = self.objective_weights()
        # several processes: each shard's batch mean weighted by its share of the examples
        share_l, share_u = getattr(self, "_shard_shares", (1.0, 1.0))
        objective = norm / divisor + weight_l * share_l * labeled
        if unlabeled is None:
            unlabeled = torch.zeros((), dtype=labeled.dtype, device=labeled.device)
        else:
            objective = objective + weight_u * share_u * unlabeled
        return ObjectiveTerms(objective, norm, labeled, unlabeled)

    # ------------------------------------------------------------------ training
    @staticmethod
    def _split(batch: Batch) -> tuple[Batch, Optional[Batch]]:
        if "labeled" in batch:
            return batch["labeled"], batch.get("unlabeled")
        return batch, None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = [p for p in self.parameters() if p.requires_grad]
        if self.optimizer_name == "lbfgs":
            lbfgs = torch.optim.LBFGS if self.lbfgs_precondition is None else PreconditionedLBFGS
            return lbfgs(
                params,
                lr=self.lr,
                max_iter=self.lbfgs_max_iter,
                history_size=self.lbfgs_history,
                line_search_fn="strong_wolfe",
            )
        if self.optimizer_name == "adam":
            return torch.optim.Adam(params, lr=self.lr)
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum)

    def on_train_start(self) -> None:
        self._push_rho()

    #: why the procedure cannot train on several processes, ending with what to use instead
    #: (None: it can; see :mod:`structssl.training.distributed`)
    sharding_refusal: ClassVar[Optional[str]] = None

    def on_fit_start(self) -> None:
        from structssl.training.distributed import check_sharding

        check_sharding(self)

    def restore_resumed_rng(self) -> None:
        """Exact resume: restore the RNG state kept in the checkpoint (once; the data modules
        call it just before the first resumed epoch draws its shuffle)."""
        from structssl.training.distributed import restore_resumed_rng

        restore_resumed_rng(self)

    def on_train_epoch_start(self) -> None:
        self.restore_resumed_rng()  # (if the data module did not)
        self._epoch_track = _new_epoch_track()

    #: the standard deviation of the start :meth:`_leave_zero` draws when L-BFGS cannot leave
    #: all-zero weights (the configs' ``init_std`` of margin losses)
    STALL_INIT_STD: ClassVar[float] = 0.01

    def _leave_zero(self, optimizer: Any) -> bool:
        """After the fit's first L-BFGS step: when every trained weight is still exactly 0 (L-BFGS
        took no step), start them from N(0, STALL_INIT_STD^2) (torch's seeded RNG), clear
        L-BFGS's state, warn, and return True (the caller steps again); else False.

        A loss that scores violators found by a decoding (the structured hinge, nabla-SVM's and
        nabla-TSVM's k-best, ...) is a maximum over labelings, and at w = 0 every labeling
        ties: its gradient there is no descent direction, and L-BFGS's line search stays at 0.
        Smooth losses (CRF likelihood) leave 0 at the first step and never get here."""
        if self.optimizer_name != "lbfgs" or getattr(self, "_zero_checked", False):
            return False
        self._zero_checked = True
        params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        if not params or any(bool(p.detach().any()) for p in params):
            return False
        from pytorch_lightning.utilities.rank_zero import rank_zero_warn

        trainer = self._trainer
        with torch.no_grad():
            for p in params:
                p.normal_(0.0, self.STALL_INIT_STD)
                if trainer is not None and trainer.world_size > 1:  # every rank rank 0's start
                    p.copy_(trainer.strategy.broadcast(p.detach().clone(), src=0))
        optimizer.state.clear()
        losses = " + ".join(type(loss).__name__ for loss in self.losses()) or "this objective"
        rank_zero_warn(
            f"{type(self).__name__}: L-BFGS made no step from all-zero weights (with {losses}, "
            "a maximum over labelings, every labeling ties at w = 0 and the gradient is no "
            "descent direction); "
            f"the weights start from N(0, {self.STALL_INIT_STD}^2) instead: set the scorer's "
            f"init_std (e.g. {self.STALL_INIT_STD}) to choose the start"
        )
        return True

    def labeled_term(self, batch: Batch) -> Tensor:
        """``mean_i l_i`` over a labeled batch, for procedures whose objective is
        ``||w||^2 / (2n) + C mean_i l_i [+ C_u (m/n) mean_j u_j]`` (they set
        ``supports_chunks``)."""
        raise NotImplementedError

    def unlabeled_term(self, batch: Batch) -> Tensor:
        """``mean_j u_j`` over an unlabeled batch, for procedures with ``supports_chunks`` and
        an unlabeled term."""
        raise NotImplementedError

    #: whether the procedure evaluates a full batch given as length-bucketed chunks: its
    #: objective is additive over examples (:meth:`labeled_term`, and :meth:`unlabeled_term`
    #: for one with an unlabeled term), so the data modules may hand it one list of chunks per
    #: split and step, and the objective is evaluated chunk by chunk in bounded memory
    supports_chunks: ClassVar[bool] = False

    def backward_objective(self, batch: Batch) -> ObjectiveTerms:
        """Evaluate ``J(w)`` on a training batch and accumulate its gradient (the optimiser's
        closure). A labeled or unlabeled part given as a list of chunks (see
        :attr:`supports_chunks`) is evaluated and differentiated chunk by chunk: the same value
        and gradient as one padded batch, in the memory of the largest chunk."""
        labeled, unlabeled = self._split(batch)
        if not isinstance(labeled, list) and not isinstance(unlabeled, list):
            terms = self.objective_terms(batch)
            self.manual_backward(terms.objective)
            return terms
        divisor, weight_l, weight_u = self.objective_weights()
        norm = self.weight_norm_squared()
        self.manual_backward(norm / divisor)
        share_l, share_u = getattr(self, "_shard_shares", (1.0, 1.0))  # as in _combine
        loss = self._backward_chunks(labeled, self.labeled_term, weight_l * share_l)
        u_loss: Optional[Tensor] = None
        if unlabeled is not None and self.current("Cu") > 0:
            u_loss = self._backward_chunks(unlabeled, self.unlabeled_term, weight_u * share_u)
        # the values (not differentiated again): the same assembly as the one-batch path
        return self._combine(
            norm.detach(), loss.to(norm.dtype), None if u_loss is None else u_loss.to(norm.dtype)
        )

    def _backward_chunks(
        self, part: Any, term: Callable[[Batch], Tensor], weight: float
    ) -> Tensor:
        """Accumulate the gradient of ``weight * mean term`` over the examples of ``part`` (a
        batch or a list of chunks), chunk by chunk; the mean's value (float64, detached)."""
        chunks = as_chunks(part)
        mean = torch.zeros((), dtype=torch.float64, device=chunks[0]["inputs"].device)
        for chunk, share in zip(chunks, chunk_shares(chunks)):
            value = term(chunk)
            self.manual_backward(weight * share * value)
            mean = mean + share * value.detach().double()
        return mean

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        from structssl.training.distributed import reduced_evaluation, set_shard_shares

        opt = self.optimizers()
        last: dict[str, ObjectiveTerms] = {}
        set_shard_shares(self, batch)

        def closure() -> Tensor:
            opt.zero_grad()
            # several processes: objective and gradient of the whole corpus on every rank
            terms = reduced_evaluation(self, lambda: self.backward_objective(batch))
            last["terms"] = terms
            return terms.objective

        counts = _lbfgs_counts(opt)
        self._precondition(opt, batch)
        opt.step(closure=closure)
        if self._leave_zero(opt):
            opt.step(closure=closure)
        terms = last["terms"]
        labeled, _ = self._split(batch)
        chunks = as_chunks(labeled)
        size = num_examples(chunks)
        if self.tolerance is not None:
            self._track_step(terms.objective, size, opt, counts)
        self._log_train_values(terms, size, batch_idx)
        with torch.no_grad():
            for chunk in chunks:
                self.train_metrics.update(
                    self.decode(chunk), chunk["labels"], lengths=chunk.get("lengths")
                )
        return terms.objective.detach()

    #: the values logged as ``train/<name>`` per epoch (``rho`` only with a loss that has one)
    TRAIN_VALUES: ClassVar[tuple[str, ...]] = (
        "objective", "labeled_loss", "unlabeled_loss", "weight_norm_squared", "C", "Cu", "rho",
    )

    def _log_train_values(self, terms: ObjectiveTerms, size: int, batch_idx: int) -> None:
        """Log :attr:`TRAIN_VALUES` as their epoch means, weighted by each step's labeled
        examples: summed on the device over the epoch's steps and logged once, at its last
        step (a ``self.log`` per value and step took a third of a small mini-batch Adam step);
        every step when the loader's length is unknown."""
        values = torch.stack([
            terms.objective.detach().double(), terms.labeled_loss.detach().double(),
            terms.unlabeled_loss.detach().double(), terms.weight_norm_squared.detach().double(),
            self.current_C, self.current_Cu, self.current_rho.nan_to_num(nan=self._final_rho),
        ]) * size
        total = self.trainer.num_training_batches
        if not math.isfinite(total) or batch_idx == 0 or self._train_sums is None:
            self._train_sums, self._train_size = values, size
        else:
            self._train_sums, self._train_size = self._train_sums + values, self._train_size + size
        if math.isfinite(total) and batch_idx + 1 < total:
            return
        means = self._train_sums / self._train_size
        # sync_dist: the mean over processes (the values are already equal on every rank
        # after the closure's all-reduce; a no-op on one process)
        log = dict(on_step=False, on_epoch=True, batch_size=self._train_size, sync_dist=True)
        names = self.TRAIN_VALUES if self._has_rho() else self.TRAIN_VALUES[:-1]
        for name, value in zip(names, means):
            self.log(f"train/{name}", value, prog_bar=name == "objective", **log)
        self._train_sums = None

    def _precondition(self, opt: Any, batch: Batch) -> None:
        """Give a :class:`PreconditionedLBFGS` its scales, from the labeled part of the first
        training batch it sees (full batch: every labeled example; after a resume the same
        scales again, from the same data)."""
        inner = getattr(opt, "optimizer", opt)
        if not isinstance(inner, PreconditionedLBFGS) or inner.scale is not None:
            return
        labeled, _ = self._split(batch)
        scales, unscaled = curvature_scales(self, as_chunks(labeled), self.lbfgs_precondition)
        inner.set_scales(scales)
        if unscaled:
            from pytorch_lightning.utilities.rank_zero import rank_zero_info

            rank_zero_info(
                f"lbfgs_precondition: {', '.join(unscaled)} not preconditioned (their gold-score "
                "gradient is not a count)"
            )

    def _has_rho(self) -> bool:
        return any(_rho_holders(loss) for loss in self.losses())

    def _log_metrics(self, metrics: Any) -> None:
        if all(m.update_called for m in metrics.values()):
            values = metrics.compute()
            main = self.monitor().split("/", 1)[1]  # the progress bar shows the main metric
            shown = {k: v for k, v in values.items() if k.split("/", 1)[1] == main}
            # torchmetrics' compute() already reduced over processes: sync_dist averages
            # equal values and keeps Lightning from warning
            self.log_dict(shown, prog_bar=True, sync_dist=True)
            self.log_dict({k: v for k, v in values.items() if k not in shown}, sync_dist=True)
        metrics.reset()

    def on_train_epoch_end(self) -> None:
        self._log_metrics(self.train_metrics)
        if self.tolerance is not None:
            self._convergence_test()

    # ------------------------------------------------------------------ convergence
    def _final_objective(self) -> bool:
        """Whether every annealed hyper-parameter is at its configured (final) value."""
        names = [n for n in self.annealable if n != "rho" or self._has_rho()]
        return all(self.current(n) == self.final_value(n) for n in names)

    def _track_step(
        self, objective: Tensor, size: int, opt: Any, counts: Optional[tuple[int, int]]
    ) -> None:
        """Add one training step to the epoch's convergence record."""
        track = self._epoch_track
        track["objective"] += float(objective.detach()) * size
        track["size"] += size
        track["final"] = track["final"] and self._final_objective()
        if counts is None:
            track["lbfgs_exits"] = False
            return
        inner = getattr(opt, "optimizer", opt)
        group = inner.param_groups[0]
        iterations, evaluations = _lbfgs_counts(opt) or (0, 0)
        # fewer iterations than allowed, and not for lack of evaluations: its own tests held
        early = (iterations - counts[0] < group["max_iter"]
                 and evaluations - counts[1] < group["max_eval"])
        track["lbfgs"] = True
        track["lbfgs_exits"] = track["lbfgs_exits"] and early
        track["iterations"], track["evaluations"] = iterations, evaluations

    def _convergence_test(self) -> None:
        """The end-of-epoch test of ``tolerance`` (module docstring, "Convergence")."""
        track, self._epoch_track = self._epoch_track, _new_epoch_track()
        if track["size"] == 0:  # no training step this epoch
            return
        objective = track["objective"] / track["size"]
        final = bool(track["final"])
        previous = self._previous_objective
        self._previous_objective = objective if final else None
        decrease: Optional[float] = None
        if final and previous is not None:
            decrease = (previous - objective) / max(abs(objective), torch.finfo(torch.float64).tiny)
        reason: Optional[str] = None
        if final and track["lbfgs"] and track["lbfgs_exits"]:
            reason = "lbfgs"
        elif decrease is not None and decrease < self.tolerance:
            reason = "relative_decrease"
        # the objective is reduced across ranks, so the decision is already the same on every
        # rank; the reduction makes sure of it
        stop = self.trainer.strategy.reduce_boolean_decision(reason is not None, all=True)
        log = dict(on_step=False, on_epoch=True, sync_dist=True)
        if decrease is not None:
            self.log("train/relative_decrease", decrease, **log)
        self.log("train/converged", float(stop), **log)
        if not stop:
            return
        self.converged = {
            "epoch": int(self.current_epoch), "reason": reason, "objective": objective,
            "relative_decrease": decrease, "lbfgs_iterations": track.get("iterations"),
            "lbfgs_evaluations": track.get("evaluations"),
        }
        self.trainer.should_stop = True
        where = f"epoch {int(self.current_epoch)}"
        if track["lbfgs"]:
            where += (f" after {track['iterations']} L-BFGS iterations "
                      f"({track['evaluations']} evaluations)")
        test = (
            "L-BFGS stopped before lbfgs_max_iter by its own tolerances" if reason == "lbfgs"
            else f"relative decrease {decrease:.3g} < tolerance {self.tolerance:g}"
        )
        self._fit_end_lines.append(
            f"{type(self).__name__} converged at {where}: objective {objective:.6g}, {test}"
            + (f" (relative decrease over the epoch {decrease:.3g})"
               if reason == "lbfgs" and decrease is not None else "")
        )

    def on_fit_end(self) -> None:
        """Print what the procedures noted during fit (convergence, CCCP's outer iterations)
        once the progress bar is closed, one line each."""
        from pytorch_lightning.utilities.rank_zero import rank_zero_info

        for line in self._fit_end_lines:
            rank_zero_info(line)
        self._fit_end_lines = []

    # ------------------------------------------------------------------ evaluation
    def _eval_step(self, batch: Batch, metrics: Any, stage: str) -> None:
        labels = batch["labels"]
        metrics.update(self.decode(batch), labels, lengths=batch.get("lengths"))
        self.log(f"{stage}/loss", self.eval_loss(batch), on_epoch=True, batch_size=labels.shape[0],
                 sync_dist=True)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, self.val_metrics, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_metrics(self.val_metrics)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch, self.test_metrics, "test")

    def on_test_epoch_end(self) -> None:
        self._log_metrics(self.test_metrics)

    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """``{"labels": decoded labels, "lengths": lengths}`` of a batch."""
        return {"labels": self.decode(batch), "lengths": batch.get("lengths")}


class SupervisedModule(StructuredModule):
    """Supervised training with any loss: ``||w||^2 / (2n) + C mean_i loss_i``.

    Args:
        structure: the structure, e.g. ``LinearChain(num_labels)``.
        scorer: inputs -> potentials, e.g. ``LinearChainScorer(num_labels, input_dim=D)``.
        loss: any labeled loss ``loss(structure, potentials, target, lengths)`` with
            ``reduction="mean"`` (default: ``CRFNLLLoss()``; e.g. ``NablaSVMLoss()``,
            ``StructuredHingeLoss()``, ``CompositeLikelihoodLoss(...)``).
        C: labeled weight.
        **kwargs: the options of :class:`StructuredModule` (``optimizer``, ``lr``,
            ``lbfgs_max_iter``, ``lbfgs_history``, ``momentum``, ``regularize_bias``,
            ``num_labeled``, ``task``, ``tags``, ``tolerance``); configs give them as init args
            like the rest.
    """

    uses_unlabeled = False

    def __init__(
        self,
        structure: Structure,
        scorer: nn.Module,
        loss: Optional[nn.Module] = None,
        C: float = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(structure, scorer, C, 0.0, num_unlabeled=0, **kwargs)
        self.loss = CRFNLLLoss() if loss is None else loss
        if not isinstance(self.loss, nn.Module):
            raise TypeError(f"loss must be an nn.Module; got {type(self.loss).__name__}")
        self._init_rho()

    def losses(self) -> list[nn.Module]:
        return [self.loss]

    supports_chunks = True

    def labeled_term(self, batch: Batch) -> Tensor:
        pot = self.potentials(batch)
        return self.loss(self.structure, pot, batch["labels"], batch.get("lengths"))

    def objective_terms(self, batch: Batch) -> ObjectiveTerms:
        labeled, _ = self._split(batch)
        return self._combine(self.weight_norm_squared(), self.labeled_term(labeled), None)

    def eval_loss(self, batch: Batch) -> Tensor:
        return self.labeled_term(batch)
