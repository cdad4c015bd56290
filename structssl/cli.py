"""The ``structssl`` command: a ``LightningCLI`` (fit / validate / test) plus ``predict``,
``baselines``, ``regression``, ``clustering`` and ``demo``, each configured by jsonargparse from
a ``--config`` YAML and flags.

Usage::

    structssl fit --config configs/quickstart.yaml
    structssl fit --config configs/quickstart.yaml --model.init_args.Cu=0.5 --trainer.max_epochs=5
    structssl test --config configs/quickstart.yaml --ckpt_path path/to/last.ckpt
    structssl fit --config configs/quickstart.yaml --print_config
    structssl demo --iterations 5        # the plain-torch CRF demo (structssl.demo)
    structssl baselines --config configs/baselines/cutting_plane.yaml
    structssl regression --config configs/corlsr/diabetes.yaml
    structssl clustering --config configs/clustering/synthetic.yaml

``--model`` is any :class:`~pytorch_lightning.LightningModule` (the procedures of
:mod:`structssl.training`) and ``--data`` any ``LightningDataModule`` (those of
:mod:`structssl.data.modules`), both given as ``class_path`` / ``init_args``; so are the
structure, the scorer and the losses inside the model's ``init_args``.

Additions to the stock ``LightningCLI``:

* the seed defaults to 0 (``seed_everything: 0``), so runs are reproducible by default;
* the default logger is a ``CSVLogger`` under ``trainer.default_root_dir`` (``metrics.csv`` in
  ``lightning_logs/version_N/``), unless ``trainer.logger`` is configured;
* ``test_after_fit: true`` tests the trained model on the data module's test split at the end
  of ``fit`` (the quick start prints its test accuracy this way): the best dev checkpoint
  (``best.ckpt``, what ``structssl predict --model RUN_DIR`` uses) when the data has a dev
  split, else the final weights;
* ``num_threads: k`` sets ``torch.set_num_threads(k)`` before anything runs. The small batched
  dynamic programs of the linear scorers are latency bound: one intra-op thread is often
  much faster than several on a busy or small CPU (the quick start uses 1).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

#: a deprecation warning raised inside Lightning 2.6's pytree helpers under recent torch
#: releases (not actionable by users of structssl)
_LIGHTNING_PYTREE_WARNING = r".*isinstance\(treespec, LeafSpec\)` is deprecated.*"


def _demo(argv: Sequence[str]) -> int:
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(
        prog="structssl demo",
        description="Train a linear-chain CRF on built-in synthetic HMM data (plain torch).",
    )
    parser.add_argument("--config", action=ActionConfigFile, help="YAML file of options")
    parser.add_argument("--states", type=int, default=5, help="number of HMM states (labels)")
    parser.add_argument("--dim", type=int, default=20, help="emission dimension")
    parser.add_argument("--train", type=int, default=200, help="training sequences")
    parser.add_argument("--test", type=int, default=200, help="test sequences")
    parser.add_argument("--iterations", type=int, default=60, help="L-BFGS iterations")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args(list(argv))
    for flag, value, least in (("--states", args.states, 2), ("--dim", args.dim, 1),
                               ("--train", args.train, 1), ("--test", args.test, 1),
                               ("--iterations", args.iterations, 1)):
        if value < least:
            parser.error(f"{flag} must be >= {least}; got {value}")
    from structssl.demo import run_demo

    run_demo(num_states=args.states, dim=args.dim, num_train=args.train, num_test=args.test,
             iterations=args.iterations, seed=args.seed)
    return 0


#: every ``structssl`` subcommand and what it does (``structssl --help``)
SUBCOMMANDS = {
    "fit": "train a model from a YAML config (Lightning CLI); checkpoints in "
    "<default_root_dir>/checkpoints/{best,last}.ckpt",
    "validate": "evaluate a checkpoint on the data module's dev split (--ckpt_path)",
    "test": "evaluate a checkpoint on the data module's test split (--ckpt_path)",
    "predict": "tag a file (or label an ARFF file) with a trained model: --model RUN_DIR --input FILE --output FILE",
    "baselines": "QP and perceptron baselines (cutting-plane structural SVM, perceptron) "
    "on a fit config's data, structure and scorer",
    "regression": "coRLSR vs RLSR by inverse cross-validation (thesis ch. 4; "
    "configs/corlsr/*.yaml)",
    "clustering": "supervised clustering of message streams (thesis ch. 8; "
    "configs/clustering/*.yaml)",
    "demo": "a linear-chain CRF on built-in synthetic data, in plain torch",
}


def _print_help() -> None:
    width = max(map(len, SUBCOMMANDS))
    print("usage: structssl SUBCOMMAND [options]   (structssl SUBCOMMAND --help for its options)")
    print()
    print("Semi-supervised structured prediction on batched semiring dynamic programs.")
    print()
    print("subcommands:")
    for name, text in SUBCOMMANDS.items():
        print(f"  {name:<{width}}  {text}")
    print()
    print("e.g. structssl fit --config configs/quickstart.yaml")


class _DropAdverts(logging.Filter):
    """Drop Lightning's "💡 Tip" adverts for cloud products (not actionable here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def _one_line_error(
    parser: Any, default: Callable[[str, Optional[Exception]], Any], message: str,
    ex: Optional[Exception],
) -> Any:
    """A command-line error in one line (the option and the reason, see
    :func:`short_parse_error`) instead of argparse's usage of every option (``default``, the
    parser's own ``error``, where it must not exit or ``JSONARGPARSE_DEBUG`` is set)."""
    if not parser.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
        return default(message, ex)
    owner = getattr(ex, "subcommand_parser", None) or parser
    prog = owner.prog.replace(" [options]", "")
    sys.stderr.write(
        f"{prog}: error: {short_parse_error(message)} (`{prog} --help` lists the options)\n"
    )
    parser.exit(2)


def _predict(argv: Sequence[str]) -> int:
    from jsonargparse import ActionConfigFile, ArgumentParser

    class PredictParser(ArgumentParser):
        def error(self, message: str, ex: Optional[Exception] = None) -> Any:
            return _one_line_error(self, super().error, message, ex)

    parser = PredictParser(
        prog="structssl predict",
        description="Tag a file with a trained sequence tagger. The output has one "
        "'token<TAB>tag' line per token and a blank line after each sentence, in the input's "
        "order (a -DOCSTART- line comes back as '-DOCSTART-<TAB>O' and a blank line); "
        "--confidence adds the marginal probability of each tag, --kbest K the tags of "
        "the 2nd..K-th best taggings. An input that carries tags in the training layout is "
        "also scored. A multi-label classifier (ArffDataModule, MulanDataModule) labels an ARFF "
        "file instead: a header line of the label names, then one line of tab-separated 0/1 "
        "per row (--confidence adds p(LABEL) columns); an input whose rows all carry their "
        "labels is scored (micro-F1).",
    )
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument(
        "--model", type=str, required=True,
        help="a run directory of `structssl fit` (its checkpoints/best.ckpt, else last.ckpt) or "
        "a .ckpt file",
    )
    parser.add_argument(
        "--input", type=str, required=True,
        help="sentences to tag: one token per line (other columns allowed), blank line between "
        "sentences",
    )
    parser.add_argument("--output", type=str, required=True,
                        help="where the predictions go; '-': standard output (the summary line "
                        "then goes to standard error)")
    parser.add_argument("--confidence", type=bool, default=False,
                        help="add each tag's marginal probability as a third column")
    parser.add_argument("--kbest", type=int, default=1,
                        help="add the tags of the 2nd..k-th best taggings as further columns")
    parser.add_argument("--batch_size", type=int, default=256, help="sentences decoded at once")
    parser.add_argument("--num_threads", type=int, default=1,
                        help="torch.set_num_threads(num_threads) (default 1, as the configs' "
                        "num_threads: more threads spin-wait when the machine is busy)")
    parser.add_argument("--encoding", type=Optional[str], default=None,
                        help="the input's text encoding (default: the training files')")
    parser.add_argument("--comments", type=Optional[bool], default=None,
                        help="taggers: lines of the input that start with '#' are comments, "
                        "written back as they are (default: as the training files, "
                        "--data.comments)")
    parser.add_argument("--constraints", type=Optional[bool], default=None,
                        help="multi-label classifiers: decode with the procedure's corpus "
                        "constraints, the file as one corpus (default true, as structssl test); "
                        "false: each row alone. Taggers trained by CoDL or label switching: "
                        "decode with their constraint-guided search (default: their "
                        "constrained_decoding)")
    cfg = parser.parse_args(list(argv))
    if cfg.num_threads < 1:
        parser.error(f"--num_threads must be an int >= 1; got {cfg.num_threads}")
    from pathlib import Path

    import torch

    from structssl.predict import Tagger, load_predictor

    torch.set_num_threads(cfg.num_threads)

    # `--output -`: the predictions go to standard output (in UTF-8, as a file's) and the
    # summary line to standard error, so that stdout holds the predictions alone
    to_stdout = cfg.output == "-"
    if not to_stdout and Path(cfg.output).resolve() == Path(cfg.input).resolve():
        print(f"structssl predict: --output must differ from --input ({cfg.input})", file=sys.stderr)
        return 2
    if to_stdout and (sys.stdout.encoding or "").replace("_", "-").lower() not in ("utf-8", "utf8"):
        reconfigure = getattr(sys.stdout, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8")
    try:
        tagger = load_predictor(cfg.model, batch_size=cfg.batch_size)
        if not isinstance(tagger, Tagger):  # a multi-label classifier
            return _predict_multilabel(tagger, cfg, to_stdout)
        if cfg.constraints is not None:
            if not hasattr(tagger.model, "constrained_decoding"):
                raise ValueError(
                    f"--constraints applies to multi-label classifiers and to taggers trained by "
                    f"CoDL or label switching (their constraint-guided search); this tagger was "
                    f"trained by {type(tagger.model).__name__}, which decodes without constraints"
                )
            tagger.model.constrained_decoding = cfg.constraints
        summary = tagger.tag_file(cfg.input, sys.stdout if to_stdout else cfg.output,
                                  confidence=cfg.confidence, kbest=cfg.kbest,
                                  encoding=cfg.encoding, comments=cfg.comments)
    except BrokenPipeError:
        # `--output - | head`: the reader stopped; no traceback, and none at exit's flush
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (FileNotFoundError, ValueError) as err:
        # a missing or bad checkpoint or input file, as `structssl fit` reports its data errors
        print(f"structssl predict: {err}", file=sys.stderr)
        return 2
    line = (f"tagged {summary['sentences']} sentences ({summary['tokens']} tokens) of "
            f"{cfg.input} -> {'standard output' if to_stdout else cfg.output}")
    scores = [f"{k} {summary[k]:.4f}" for k in ("span_f1", "token_accuracy") if k in summary]
    if scores:
        line += "; against the input's tags: " + ", ".join(scores)
    if "unseen_tags" in summary:
        as_bio = "" if tagger.format.scheme in (None, "bio", "plain") else ", as BIO"
        line += (f" (tags the model never saw{as_bio}, counted as errors: "
                 f"{summary['unseen_tags']})")
    if "not_scored" in summary:
        line += f"; not scored against the input's tags: {summary['not_scored']}"
    print(line, file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _predict_multilabel(predictor: Any, cfg: Any, to_stdout: bool) -> int:
    """``structssl predict`` of a multi-label classifier (its errors are reported by the
    caller)."""
    given = [f"--{k}" for k, unused in (("kbest", cfg.kbest != 1), ("encoding", cfg.encoding is not None),
                                        ("comments", cfg.comments is not None)) if unused]
    if given:
        raise ValueError(f"{', '.join(given)} applies to sequence taggers; this model is a "
                         "multi-label classifier (options: --confidence, --constraints)")
    summary = predictor.predict_file(cfg.input, sys.stdout if to_stdout else cfg.output,
                                     confidence=cfg.confidence,
                                     constraints=cfg.constraints is not False)
    n = summary["examples"]
    line = (f"labeled {n} example{'' if n == 1 else 's'} of {cfg.input} -> "
            f"{'standard output' if to_stdout else cfg.output}")
    if "micro_f1" in summary:
        rows = f" ({summary['scored']} of the {n} rows carry them)" if "scored" in summary else ""
        line += f"; against the input's labels{rows}: micro_f1 {summary['micro_f1']:.4f}"
    print(line, file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _cli_class() -> Any:
    """The ``LightningCLI`` subclass (built lazily: ``structssl demo`` needs no Lightning)."""
    import torch
    from pytorch_lightning.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

    # the procedures and data modules, so that short class names work (--data.help
    # CoNLLDataModule, class_path: SupervisedModule)
    import structssl.data.modules  # noqa: F401
    import structssl.training  # noqa: F401

    for name in ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropAdverts) for f in logger.filters):
            logger.addFilter(_DropAdverts())

    class StructSSLParser(LightningArgumentParser):
        """A command-line error in one line (the option and the reason, see
        :func:`short_parse_error`) instead of argparse's usage of every option; options are
        never abbreviated (``--trainer.max_epoch`` is an error, not ``max_epochs``)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("allow_abbrev", False)
            super().__init__(*args, **kwargs)

        def error(self, message: str, ex: Optional[Exception] = None) -> Any:
            return _one_line_error(self, super().error, message, ex)

    class StructSSLCLI(LightningCLI):
        """``LightningCLI`` with ``test_after_fit``, ``num_threads``, a CSV logger default,
        fixed-name checkpoints (:func:`~structssl.training.checkpointing.run_checkpoints`) and
        one-line command-line errors."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("parser_class", StructSSLParser)
            given = kwargs.get("args")
            #: the command line's words (the model options given there are checked against a
            #: checkpoint's in _parse_ckpt_path)
            self._words = [w for w in (sys.argv[1:] if given is None else given) if isinstance(w, str)]
            super().__init__(*args, **kwargs)

        def instantiate_classes(self) -> None:
            try:
                super().instantiate_classes()
            except (ValueError, TypeError) as err:
                from structssl.data.modules.base import user_error

                reason = _argument_error(err)
                if reason is None:
                    raise
                raise user_error(reason) from None  # one line: an option's value is refused

        @staticmethod
        def subcommands() -> dict[str, set[str]]:
            # `predict` is structssl's own (it writes files); see structssl.predict
            return {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            from pytorch_lightning.callbacks import ModelCheckpoint

            from structssl.training.checkpointing import run_checkpoints

            trainer = self._get(self.config_init, "trainer", default={})
            callbacks = trainer.get("callbacks") or []
            callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
            if trainer.get("enable_checkpointing") is not False and not any(
                isinstance(c, ModelCheckpoint) for c in callbacks
            ):
                folder = Path(trainer.get("default_root_dir") or ".") / "checkpoints"
                ckpt_path = self._sub().get("ckpt_path")
                if self.subcommand != "fit" and ckpt_path:
                    folder = Path(ckpt_path).parent  # evaluating a run: the run's own callback
                if self.subcommand == "fit":
                    _warn_replaced_checkpoints(folder, resumed=bool(ckpt_path))
                kwargs["callbacks"] = [*callbacks, *run_checkpoints(folder)]
            splits = getattr(self.datamodule, "splits", None)
            if isinstance(splits, dict) and not splits.get("dev"):
                kwargs["limit_val_batches"] = 0  # no dev set: no validation loop
            return super().instantiate_trainer(**kwargs)

        def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
            parser.add_argument(
                "--test_after_fit",
                type=bool,
                default=False,
                help="after fit, test the trained model on the data module's test split",
            )
            parser.add_argument(
                "--num_threads",
                type=Optional[int],
                default=None,
                help="torch.set_num_threads(num_threads) before running (default: torch's)",
            )

        def _sub(self) -> Any:
            return self.config[self.subcommand] if self.subcommand else self.config

        def _parse_ckpt_path(self) -> None:
            # Lightning reads --ckpt_path here first: a bad file gets an error naming it
            sub = self.config.get("subcommand")
            if sub and self.config[sub].get("ckpt_path"):
                model = self.config[sub].get("model")
                procedure = model.get("class_path") if hasattr(model, "get") else None
                try:
                    check_checkpoint_file(
                        self.config[sub]["ckpt_path"], resume=sub == "fit", procedure=procedure
                    )
                except (OSError, ValueError) as err:  # the user's path: one line, no traceback
                    err._structssl_data_error = True  # type: ignore[attr-defined]
                    raise
            model = self.config[sub].get("model") if sub else None
            before = model.clone() if hasattr(model, "clone") else None
            super()._parse_ckpt_path()
            if sub in ("validate", "test") and before is not None and self.config[sub].get("ckpt_path"):
                self._apply_command_line_options(sub, before, self.config[sub].get("model"))

        def _apply_command_line_options(self, sub: str, before: Any, after: Any) -> None:
            """Lightning rebuilds the model from the checkpoint's hyper-parameters, over the
            command line's: a ``--model.*`` option given there is put back over the saved value
            (e.g. a CoDL or label-switching model's ``constrained_decoding``, its
            ``penalty_scale``), and the options that differ from the checkpoint's are named."""
            applied = []
            for option in sorted({w.split("=", 1)[0] for w in self._words if w.startswith("--model.")}):
                key = option[len("--model."):]
                try:
                    given, saved = before.get(key), after.get(key)
                except (AttributeError, KeyError, TypeError):
                    continue
                if given != saved:
                    after[key] = given
                    applied.append(f"{option}={given!r} (saved: {saved!r})")
            if applied:
                from pytorch_lightning.utilities.rank_zero import rank_zero_info

                rank_zero_info(
                    f"structssl {sub}: the model is rebuilt from the hyper-parameters saved in "
                    f"{self.config[sub]['ckpt_path']}, with the command line's "
                    f"{', '.join(applied)}"
                )

        def before_instantiate_classes(self) -> None:
            config = self._sub()
            threads = config.get("num_threads")
            if threads is not None:
                if threads < 1:
                    from structssl.data.modules.base import user_error

                    raise user_error(f"--num_threads must be an int >= 1; got {threads}")
                torch.set_num_threads(threads)
            trainer = config["trainer"]
            if trainer.get("logger") in (None, True):
                from jsonargparse import Namespace

                root = trainer.get("default_root_dir") or "."
                trainer["logger"] = Namespace(
                    class_path="pytorch_lightning.loggers.CSVLogger",
                    init_args=Namespace(save_dir=str(root), name="lightning_logs"),
                )

        def before_fit(self) -> None:
            if hasattr(self.model, "data_options"):  # kept in checkpoints for structssl test
                self.model.data_options = self._data_options()

        def _data_options(self) -> Optional[dict[str, Any]]:
            """The data module's class path and options of this command, as plain data."""
            data = self._sub().get("data")
            if not hasattr(data, "as_dict"):
                return None
            options = data.as_dict()
            return {"class_path": options.get("class_path"), "init_args": options.get("init_args") or {}}

        def after_fit(self) -> None:
            self._report_best()
            if not self._sub().get("test_after_fit"):
                return
            splits = getattr(self.datamodule, "splits", None)
            if isinstance(splits, dict) and not splits.get("test"):
                print("test_after_fit: the data module has no test examples; not tested")
                return
            # the model `structssl predict --model RUN_DIR` uses: the best dev checkpoint when
            # there is one, else the final weights
            from structssl.training.checkpointing import BestCheckpoint

            best = next((cb.best_model_path for cb in self.trainer.checkpoint_callbacks
                         if isinstance(cb, BestCheckpoint) and cb.monitor and cb.best_model_path), None)
            if best:
                print(f"test_after_fit: testing the best dev checkpoint {best}")
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best)

        def before_validate(self) -> None:
            self._check_evaluation("dev")

        def before_test(self) -> None:
            self._check_evaluation("test")

        def _check_evaluation(self, split: str) -> None:
            """``structssl test|validate``: one line instead of a silent or wrong score when
            there is no checkpoint to evaluate (an untrained model), no ``split`` examples, or
            a checkpoint whose saved data format differs from the one the data module builds
            now from the files given (the dev / test file would be encoded with other features
            than the model was trained on)."""
            ckpt_path = self._sub().get("ckpt_path")
            splits = getattr(self.datamodule, "splits", None)
            problem = None
            if not ckpt_path:
                problem = (f"`structssl {self.subcommand}` evaluates a trained model: pass "
                           "--ckpt_path RUN_DIR/checkpoints/best.ckpt")
            elif isinstance(splits, dict) and not splits.get(split):
                option = "--data.dev_file" if split == "dev" else "--data.test_file"
                problem = f"the data module has no {split} examples to evaluate: pass {option} FILE"
            else:  # the checkpoint's structssl state, read once for both comparisons
                ckpt = _read_checkpoint(ckpt_path) if Path(str(ckpt_path)).is_file() else None
                saved = (ckpt.get("structssl") or {}) if isinstance(ckpt, dict) else {}
                problem = (self._format_mismatch(str(ckpt_path), saved)
                           or self._options_mismatch(str(ckpt_path), saved))
            if problem is not None:
                from structssl.data.modules.base import user_error

                raise user_error(problem)

        def _format_mismatch(self, ckpt_path: str, saved: dict[str, Any]) -> Optional[str]:
            """The checkpoint's saved tagging format (``saved``: its structssl state) against
            the one the data module builds now (CoNLL)."""
            saved_format = getattr(self.datamodule, "saved_format", None)
            if not callable(saved_format) or (saved.get("data_format") or {}).get("kind") != "tagging":
                return None
            now, then = saved_format(), saved["data_format"]
            if now == then:
                return None
            scheme = ""
            if now.get("scheme") != then.get("scheme"):  # e.g. IOB1 files for a BILOU model
                scheme = (f"the files are read as tag scheme {now.get('scheme')!r} and the "
                          f"checkpoint's as {then.get('scheme')!r} (--data.tag_scheme); ")
            return (f"--ckpt_path {ckpt_path}: {scheme}the tags and features built now from the "
                    "data files differ from the checkpoint's (give the fit's --data.train_file, "
                    "--data.unlabeled_file and --data.dev_file); "
                    "to score a tagged file with the checkpoint's own features: structssl predict "
                    f"--model {ckpt_path} --input FILE --output PREDICTIONS")

        def _options_mismatch(self, ckpt_path: str, saved: dict[str, Any]) -> Optional[str]:
            """A checkpoint without a saved tagging format (data modules other than CoNLL
            rebuild their features and splits from their options): the options of the fit that
            change them (``saved``: its structssl state), compared with this command's."""
            fit, now = saved.get("data_options"), self._data_options()
            if (saved.get("data_format") or {}).get("kind") == "tagging" or not fit or not now:
                return None
            if fit["class_path"] != now["class_path"]:
                return (f"--ckpt_path {ckpt_path}: the model was trained on {fit['class_path']}, "
                        f"and this config's data is {now['class_path']}")
            differ = [
                f"--data.{key} {now['init_args'].get(key)!r} (the fit's: {fit['init_args'].get(key)!r})"
                for key in sorted(set(fit["init_args"]) | set(now["init_args"]))
                if key not in EVALUATION_OPTIONS and fit["init_args"].get(key) != now["init_args"].get(key)
            ]
            if not differ:
                return None
            return (f"--ckpt_path {ckpt_path}: {'; '.join(differ[:4])}{' ...' if len(differ) > 4 else ''}: "
                    f"{now['class_path'].rsplit('.', 1)[-1]} builds its examples (features, "
                    "splits) from these options, so the score would not be of the fit's data "
                    "and features; give the fit's (RUN_DIR/lightning_logs/version_*/config.yaml)")

        def _report_best(self) -> None:
            """One line after fit: which epoch ``best.ckpt`` holds and its dev score (or that it
            is the last epoch's model, without dev examples)."""
            from structssl.training.checkpointing import BestCheckpoint

            cb = next((c for c in self.trainer.checkpoint_callbacks if isinstance(c, BestCheckpoint)), None)
            if cb is None or not cb.best_model_path or not self.trainer.is_global_zero:
                return
            epoch = _read_checkpoint(cb.best_model_path).get("epoch")
            if cb.monitor and cb.best_model_score is not None:
                # a procedure whose best epoch is before the unlabeled data enters: say so
                start = next((getattr(self.model, k) for k in ("supervised_epochs", "warm_start_epochs")
                              if isinstance(getattr(self.model, k, None), int)), 0)
                supervised = (
                    f" (a supervised epoch: the epochs with the unlabeled data, from epoch "
                    f"{start} on, did not do better on dev, so the kept model never trained on it)"
                    if isinstance(epoch, int) and epoch < start < self.trainer.current_epoch else ""
                )
                print(f"best dev {cb.monitor} {float(cb.best_model_score):.4f} at epoch {epoch}: "
                      f"{cb.best_model_path}{supervised}")
            elif getattr(self.datamodule, "dev_from_unlabeled", False):
                print(f"the dev split is the unlabeled training examples (their labels are "
                      f"reported, never used to choose): {cb.best_model_path} holds the last "
                      f"epoch's model (epoch {epoch})")
            else:
                print(f"no dev examples: {cb.best_model_path} holds the last epoch's model (epoch {epoch})")

    class StructSSLSaveConfig(SaveConfigCallback):
        """Lightning's config save, which never replaces a file it did not write: with a
        logger the config goes to the logger's own run folder (``config.yaml`` replaced there);
        without one (``--trainer.logger=false``) it would go to ``default_root_dir`` (the working
        directory by default), so an existing ``config.yaml`` there is kept (a warning says
        so)."""

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if trainer.logger is None and trainer.is_global_zero:
                target = Path(trainer.log_dir or trainer.default_root_dir) / self.config_filename
                if target.exists():
                    warnings.warn(
                        f"not saving the run's config to {target}: the file exists and the run "
                        "has no logger folder of its own (--trainer.logger=false); the config "
                        "is kept in the checkpoints (hparams)",
                        stacklevel=2,
                    )
                    return
                self.overwrite = False
            super().setup(trainer, pl_module, stage)

    StructSSLCLI.save_config_class = StructSSLSaveConfig
    return StructSSLCLI


def _warn_replaced_checkpoints(folder: Path, resumed: bool) -> None:
    """One warning, in place of Lightning's "Checkpoint directory ... exists and is not empty"
    (twice, once per checkpoint callback, also when resuming from that folder), when a new fit
    is about to replace the checkpoints of an earlier run."""
    import warnings

    from pytorch_lightning.utilities.rank_zero import rank_zero_warn

    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    earlier = sorted(p.name for p in folder.glob("*.ckpt")) if folder.is_dir() else []
    if earlier and not resumed:
        rank_zero_warn(
            f"{folder} holds {', '.join(earlier)} of an earlier run; this fit replaces them "
            f"(to continue that run instead: --ckpt_path {folder / 'last.ckpt'})"
        )


def _read_checkpoint(path: Any) -> Any:
    """A checkpoint's contents on the CPU, memory-mapped when it is a zip archive (as
    ``torch.save`` writes it)."""
    import zipfile

    import torch

    return torch.load(path, map_location="cpu", weights_only=False, mmap=zipfile.is_zipfile(path))


def check_checkpoint_file(path: Any, resume: bool = False, procedure: Optional[str] = None) -> None:
    """Fail early, naming the file, when ``--ckpt_path`` is not a readable checkpoint (missing,
    empty, truncated or corrupt), or with ``resume`` (``structssl fit``) one without the
    optimizer state (``best.ckpt``), instead of a bare ``OSError`` / ``EOFError`` / ``KeyError``
    from deep inside Lightning; or, with ``procedure`` (the config's model ``class_path``), one
    written by another procedure (a run resumed or scored under another recipe's config would
    go on as the config's procedure with the other's weights and state). Lightning's own names
    (``last``, ``best``, ``hpc``, ``registry...``) pass.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a checkpoint ``torch.load`` can read, or cannot be resumed.
    """
    import zipfile

    name = str(path)
    if name in ("last", "best", "hpc") or name.startswith("registry"):
        return
    if "://" in name:  # a remote path (fsspec): Lightning reads it
        return
    file = Path(name)
    if not file.is_file():
        raise FileNotFoundError(f"--ckpt_path {file}: no such checkpoint file")
    size = file.stat().st_size
    hint = "(a truncated or partly written file? resume from an earlier checkpoint)"
    if size == 0:
        raise ValueError(f"--ckpt_path {file}: the file is empty, not a checkpoint {hint}")
    if zipfile.is_zipfile(file):
        try:
            with zipfile.ZipFile(file) as archive:
                bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            raise ValueError(
                f"--ckpt_path {file}: corrupt checkpoint ({type(err).__name__}: {err}) {hint}"
            ) from None
        if bad is not None:
            raise ValueError(f"--ckpt_path {file}: corrupt checkpoint (bad entry {bad}) {hint}")
    try:
        ckpt = _read_checkpoint(file)
    except Exception as err:  # noqa: BLE001 - any failure means: not a readable checkpoint
        raise ValueError(
            f"--ckpt_path {file}: not a readable checkpoint ({size} bytes; "
            f"{type(err).__name__}: {err}) {hint}"
        ) from None
    written_by = (ckpt.get("hyper_parameters") or {}).get("_class_path") if isinstance(ckpt, dict) else None
    if procedure and isinstance(written_by, str) and written_by != procedure:
        raise ValueError(
            f"--ckpt_path {file}: the checkpoint was written by {written_by}, and this config's "
            f"model is {procedure}; give the config of the run that wrote it (RUN_DIR/"
            "lightning_logs/version_*/config.yaml)"
            + (", or start a new run without --ckpt_path" if resume else "")
        )
    if resume and isinstance(ckpt, dict) and "optimizer_states" not in ckpt:
        raise ValueError(
            f"--ckpt_path {file}: the checkpoint holds the model alone, without the optimizer "
            f"state (best.ckpt is written so), so a run cannot resume from it; resume from "
            f"{file.with_name('last.ckpt')}, or evaluate it with `structssl test --ckpt_path`"
        )


#: data options that only choose or batch the evaluated examples (free to differ from the fit's
#: in ``structssl test`` / ``validate``)
EVALUATION_OPTIONS = frozenset({
    "dev_file", "test_file", "max_dev", "max_test", "eval_batch_size", "batch_size",
    "unlabeled_batch_size", "num_workers", "shuffle", "data_dir", "evaluate_unlabeled",
})


def _argument_error(err: BaseException) -> Optional[str]:
    """The reason a structssl class refused its arguments while the CLI built it (the innermost
    ``ValueError`` / ``TypeError`` of the chain jsonargparse wraps it in, raised in structssl's
    code), prefixed by the class; ``None`` for anything else."""
    inner: BaseException = err
    while inner.__cause__ is not None:
        inner = inner.__cause__
    if not isinstance(inner, (ValueError, TypeError)) or inner.__traceback__ is None:
        return None
    frames = list(traceback.walk_tb(inner.__traceback__))
    owner = next(
        (type(frame.f_locals["self"]).__name__ for frame, _ in reversed(frames)
         if frame.f_code.co_name == "__init__" and "self" in frame.f_locals
         and "/structssl/" in frame.f_code.co_filename.replace("\\", "/")),
        None,
    )
    return None if owner is None else f"{owner}: {inner}"


def short_parse_error(message: str) -> str:
    """jsonargparse's nested error message as ``--data.tag_scheme: <the reason>``: the keys of
    its ``Parser key "..."`` lines joined, and the innermost reason (the message unchanged
    when it has no such line)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    keys: list[str] = []
    reason: Optional[str] = None
    innermost = 0  # the line of the last "Parser key"
    for i, line in enumerate(lines):
        match = re.match(r'Parser key "([^"]+)":\s*(.*)', line)
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if match:
            keys.append(match.group(1))
            innermost = i
            reason, at = (match.group(2), i) if match.group(2) else (following, i + 1)
            inner = lines[at + 1] if at + 1 < len(lines) else ""
            if reason.endswith(":") and inner and not inner.startswith(("Parser key", "- ")):
                reason = f"{reason} {inner}"  # e.g. "... class_path 'm.X': No module named 'm'"
        elif line.startswith("- Problem with given class_path") and following and not following.startswith("Parser key"):
            reason = following  # e.g. "Option 'x' is not accepted"
    required = re.match(r"(?:(--[\w.]+): )?the following arguments are required: (.+)$", lines[0]) if lines else None
    if required and len(lines) == 1:  # "output" -> "--output", "--data: labels" -> "--data.labels"
        parent = required.group(1)
        names = [n.strip() for n in required.group(2).split(",")]
        named = [n if n.startswith("-") else f"{parent}.{n}" if parent else f"--{n}" for n in names]
        return f"missing required option(s): {', '.join(named)}"
    if not keys or not reason:
        return message
    if reason.startswith("Does not validate against any of the Union subtypes"):
        branches, given = [], ""  # the innermost union's subtypes, up to its given value's type
        for line in lines[innermost + 1:]:
            if line.startswith("Given value type:"):
                given = f" ({line[:1].lower()}{line[1:]})"
                break
            if line.startswith("- "):
                branches.append(line[2:])
        reason = "; ".join(branches) + given if branches else reason
    return f"--{'.'.join(keys)}: {reason}"


def cli_main(args: Optional[Sequence[str]] = None, run: bool = True) -> Any:
    """Build (and with ``run``, execute) the LightningCLI on ``args`` (default: ``sys.argv``).

    Returns:
        The CLI object (``cli.model``, ``cli.datamodule``, ``cli.trainer``).
    """
    import pytorch_lightning as pl
    from jsonargparse._deprecated import JsonargparseDeprecationWarning

    cls = _cli_class()
    with warnings.catch_warnings():
        # raised inside Lightning 2.6 (its pytree helper under recent torch; its calls of
        # jsonargparse APIs deprecated in 4.49), not actionable by structssl users
        warnings.filterwarnings(
            "ignore", message=_LIGHTNING_PYTREE_WARNING, category=FutureWarning
        )
        warnings.filterwarnings("ignore", category=JsonargparseDeprecationWarning)
        return cls(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_callback=cls.save_config_class,
            save_config_kwargs={"overwrite": True},
            args=None if args is None else list(args),
            run=run,
            auto_configure_optimizers=False,
        )


def _one_line_warning(message: Any, category: type, filename: str, lineno: int, line: Optional[str] = None) -> str:
    """Warnings of the command as ``UserWarning: message`` lines, without the source file and
    line of the library code that raised them (``warnings.formatwarning``'s default)."""
    return f"{category.__name__}: {message}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``structssl`` command: ``predict``, ``baselines``, ``regression``,
    ``clustering``, ``demo`` (each parsed by its own jsonargparse parser, ``structssl
    SUBCOMMAND --help``) or a LightningCLI subcommand (``fit``, ``validate``, ``test``).
    Warnings print as one line each. Returns the exit status."""
    default_format = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        return _main(argv)
    finally:
        warnings.formatwarning = default_format


def _main(argv: Optional[Sequence[str]]) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        _print_help()
        return 0
    command, rest = args[0], args[1:]
    if command == "demo":
        return _demo(rest)
    if command == "predict":
        return _predict(rest)
    if command == "regression":
        from structssl.regression.cli import main as regression_main

        return regression_main(rest)
    if command == "clustering":
        from structssl.clustering.cli import main as clustering_main

        return clustering_main(rest)
    from pytorch_lightning.utilities.exceptions import MisconfigurationException

    from structssl.data.modules.base import is_data_error

    try:
        if command == "baselines":
            from structssl.baselines.__main__ import main as baselines_main

            baselines_main(rest)
        else:
            cli_main(None if argv is None else args)
    except (OSError, ValueError) as err:
        if not is_data_error(err):
            raise
        # a missing or malformed data file: its message names the file and line
        print(f"structssl {command}: {err}", file=sys.stderr)
        return 2
    except MisconfigurationException as err:
        # Lightning's own refusal of the trainer's options (e.g. --trainer.accelerator cuda on
        # a machine without a GPU): one line, as the other option errors
        print(f"structssl {command}: {err} (the trainer's options: --trainer.accelerator, "
              "--trainer.devices, --trainer.strategy)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
