"""Checks of command-line inputs, run before any model loads.

Each ``check_*`` raises ``InputError`` whose message names the bad input and what to do; the
``lopd`` command prints it as one line and exits with status 2 (``lopd.cli.main``). The checks
only look at paths and names: nothing here loads a model, a tokenizer or a bank.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lopd.run_dir import output_dir_problem


class InputError(ValueError):
    """A bad command-line input; the message names it and says what to do."""


def check_model(name: str, option: str) -> None:
    """A built-in model name or a local HF model directory (with config.json)."""
    from lopd.models import BUILTIN_MODELS

    if name in BUILTIN_MODELS:
        return
    path = Path(name).expanduser()
    builtins = ", ".join(BUILTIN_MODELS)
    if not path.exists():
        raise InputError(f"{option}: {name!r} is neither a built-in model ({builtins}) nor an "
                         "existing directory; pass one of those or a local HF model directory")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise InputError(f"{option}: {name} is not an HF model directory (no config.json in "
                         f"it); pass a directory saved with save_pretrained, or {builtins}")


def check_adapter(path: str, option: str) -> None:
    """A PEFT adapter directory (adapter_config.json plus its weights)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is a file"
        raise InputError(f"{option}: {path} {what}; pass a PEFT adapter directory "
                         "(e.g. the output of `lopd sft` or `lopd export`)")
    if not (folder / "adapter_config.json").is_file() or not (
            any(folder.glob("adapter_model.*"))):
        raise InputError(f"{option}: {path} is not a PEFT adapter directory (needs "
                         "adapter_config.json and adapter_model.safetensors)")


def check_suites(names: list[str], option: str) -> None:
    from lopd.envs import suite_problem

    for name in names:
        problem = suite_problem(name)
        if problem is not None:
            raise InputError(f"{option}: {problem}")


def check_output_dir(path: str, option: str) -> None:
    problem = output_dir_problem(path)
    if problem is not None:
        raise InputError(f"{option}: {problem}; pass a directory path")


def check_positive(value: int, option: str, minimum: int = 1) -> None:
    if value < minimum:
        raise InputError(f"{option} must be >= {minimum}, got {value}")


def check_run_dir(run: str, option: str = "--run") -> Path:
    """An existing lopd run directory (it holds config.yaml)."""
    folder = Path(run).expanduser()
    if not folder.exists():
        raise InputError(f"{option}: {run} does not exist; pass the run directory of "
                         "`lopd train` (run.out_dir)")
    if not folder.is_dir():
        raise InputError(f"{option}: {run} is a file; pass a run directory")
    if not (folder / "config.yaml").is_file():
        raise InputError(f"{option}: {run} is not a lopd run directory (no config.yaml); "
                         "pass the run directory of `lopd train`")
    return folder


def check_has_checkpoint(run: Path, what: str) -> None:
    from lopd.checkpoint import latest_checkpoint

    if latest_checkpoint(run) is None:
        raise InputError(f"{what}: {run} has no complete checkpoint yet; train it first "
                         f"(checkpoints go to {run / 'checkpoints'})")


def check_train(config, resume: bool) -> None:
    """Everything ``lopd train`` reads from disk, and the run directory it writes."""
    check_model(config.model.name, "model.name")
    if config.model.init_adapter:
        check_adapter(config.model.init_adapter, "model.init_adapter")
    check_suites([config.data.train_suite], "data.train_suite")
    check_suites([config.data.eval_suite], "data.eval_suite")
    bank_file = getattr(config.method, "bank_file", "")
    if bank_file and not Path(bank_file).expanduser().is_file():
        raise InputError(f"method.bank_file: {bank_file} is not a file; pass a JSONL file of "
                         "trajectories or leave it empty")
    check_output_dir(config.run.out_dir, "run.out_dir")
    if resume:
        from lopd.checkpoint import latest_checkpoint

        if latest_checkpoint(config.run.out_dir) is None:
            raise InputError(f"--resume: no usable checkpoint under "
                             f"{Path(config.run.out_dir) / 'checkpoints'}; start the run "
                             "without --resume (or check run.out_dir)")


def check_eval(args: argparse.Namespace) -> None:
    from lopd.checkpoint import latest_checkpoint

    if args.run:
        run = check_run_dir(args.run)
        if args.latent_memory:  # the run's composer: its newest checkpoint's, else phi_0
            if latest_checkpoint(run) is None and not (run / "composer_phi0").is_dir():
                raise InputError(f"--run: {args.run} has neither a checkpoint nor "
                                 "composer_phi0/; --latent-memory needs a LOPD run")
        else:
            check_has_checkpoint(run, "--run")
    else:
        check_model(args.model, "--model")
    if args.latent_memory and not args.run:
        raise InputError("--latent-memory needs --run RUN (a LOPD run directory)")
    for option, path in (("--adapter", args.adapter), ("--init-adapter", args.init_adapter)):
        if path:
            check_adapter(path, option)
    check_suites([s for s in args.suite.split(",")], "--suite")
    check_output_dir(args.out, "--out")
    check_positive(args.limit, "--limit", 0)
    for option in ("threads", "max_new_tokens", "max_steps", "batch_size", "samples"):
        check_positive(getattr(args, option), f"--{option.replace('_', '-')}")


def check_sft(args: argparse.Namespace) -> None:
    check_model(args.model, "--model")
    check_suites([args.suite], "--suite")
    check_output_dir(args.out, "--out")
    for option in ("steps", "threads", "batch_size"):
        check_positive(getattr(args, option), f"--{option.replace('_', '-')}")
    if not args.lr > 0:
        raise InputError(f"--lr must be > 0, got {args.lr}")
    if getattr(args, "experience_suite", None):
        check_suites([args.experience_suite], "--experience-suite")
        check_positive(args.num_experiences, "--num-experiences")
        if not 0 < args.experience_share <= 1:
            raise InputError(f"--experience-share must be in (0, 1], got {args.experience_share}")


def check_bank(args: argparse.Namespace) -> None:
    from lopd.experience.bank import bank_path

    folder = Path(args.run).expanduser()
    path = folder if folder.suffix == ".sqlite" else bank_path(folder)
    if not path.is_file():
        raise InputError(f"--run: no experience bank at {path}; pass a LOPD run directory "
                         "(one that holds bank.sqlite) or the .sqlite file")
    if args.action == "query" and not args.text:
        raise InputError("bank query needs --text TEXT")
    check_positive(args.j, "-j")
    if args.action == "export" and args.out:
        _check_export_file(args.out)


def _check_export_file(path: str) -> None:
    out = Path(path).expanduser()
    if out.is_dir():
        raise InputError(f"--out: {path} is a directory; pass a file path (e.g. bank.jsonl)")
    check_output_dir(str(out.parent), "--out")


def check_inspect(args: argparse.Namespace) -> None:
    import yaml

    folder = check_run_dir(args.run)
    saved = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    method, data = saved.get("method", {}), saved.get("data", {})
    if method.get("name", "lopd") != "lopd":
        raise InputError(f"--run: {args.run} is a {method.get('name')} run; inspect needs a "
                         "LOPD run")
    from lopd.inspect_run import find_task

    try:
        find_task(args.task, tuple(data[k] for k in ("eval_suite", "train_suite") if k in data))
    except KeyError as error:
        raise InputError(f"--task: {error.args[0]}") from None
    if args.out:
        check_output_dir(args.out, "--out")


def check_export(args: argparse.Namespace) -> None:
    run = check_run_dir(args.run)
    out = Path(args.out).expanduser().resolve()
    if out == run.resolve() or out in run.resolve().parents:
        raise InputError(f"--out: {args.out} would replace the run directory itself; pass "
                         "another directory")
    check_output_dir(str(out), "--out")
    check_has_checkpoint(run, "--run")


def check_demo(args: argparse.Namespace) -> None:
    check_output_dir(args.out, "--out")
