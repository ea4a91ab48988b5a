"""The `lopd` command. Subcommands import their heavy modules lazily so `--help` is instant.

Bad input never ends in a traceback: each subcommand checks its paths and names first
(``lopd.preflight``, before any model loads), and ``main`` turns lopd's own errors (bad config,
bad path, unknown model, damaged run file) into one line on stderr with exit status 2.
``LOPD_DEBUG=1`` shows the traceback instead. ``section.field=value`` overrides of ``train``
may stand anywhere on the command line.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path

from lopd import __version__

DTYPES = ("auto", "fp32", "bf16", "bf16-autocast")
"""``model.dtype`` choices (``lopd.models.DTYPE_CHOICES``, kept here so `--help` needs no torch)."""

_EPILOG = """\
examples:
  lopd demo                                  a short GRPO run on SmolLM2-135M, held-out before/after (runs/demo/)
  lopd demo --method lopd --out runs/demo-lopd   the same with LOPD (bank, cold start, latent teacher)
  lopd train --method lopd --config configs/toolworld-smollm2.yaml optim.steps=40
  lopd eval --model smollm2-135m --suite toolworld-test,bfcl-multi-turn,humaneval
  lopd bank stats --run runs/demo-lopd/lopd
  lopd inspect --run runs/demo-lopd/lopd --task tw-test-banking-3
  lopd info
"""


DEVICE_HELP = "auto (the GPU where there is one, else the CPU), cpu, cuda or cuda:N"

def _cmd_info(args: argparse.Namespace) -> int:
    from lopd.info import report

    print(report())
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from lopd.config import describe, load_config
    from lopd.preflight import check_train

    if args.help_config:
        print(describe())
        return 0
    overrides = list(args.overrides)
    if args.method:
        overrides.append(f"method.name={args.method}")
    if args.out:
        overrides.append(f"run.out_dir={args.out}")
    config = load_config(args.config, overrides)
    check_train(config, args.resume)
    from lopd.trainer import train

    train(config, resume=args.resume)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from lopd.preflight import check_eval

    check_eval(args)
    from lopd.evaluate import EvalSpec, run_eval

    run_eval(EvalSpec(
        model=args.model, suites=args.suite.split(","), limit=args.limit, out_dir=args.out,
        adapter=args.adapter, init_adapter=args.init_adapter, run=args.run,
        latent_memory=args.latent_memory, threads=args.threads, dtype=args.dtype,
        device=args.device, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        max_steps=args.max_steps, samples=args.samples, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, backend=args.backend))
    return 0


def _cmd_bank(args: argparse.Namespace) -> int:
    from lopd.preflight import check_bank

    check_bank(args)
    from lopd.experience import cli as bank_cli

    if args.action == "stats":
        print(bank_cli.bank_stats(args.run))
    elif args.action == "query":
        print(bank_cli.bank_query(args.run, args.text, args.j))
    else:
        bank_cli.bank_export(args.run, args.out or f"{args.run}/bank.jsonl")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from lopd.preflight import check_inspect

    check_inspect(args)
    from lopd.inspect_run import inspect_run

    inspect_run(args.run, args.task, args.out)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from lopd.preflight import check_demo

    check_demo(args)
    from lopd.demo import run_demo

    run_demo(out_dir=args.out, quick=args.quick, method=args.method, steps=args.steps, dtype=args.dtype,
             seed=args.seed)
    return 0


def _cmd_sft(args: argparse.Namespace) -> int:
    from lopd.preflight import check_sft

    check_sft(args)
    from lopd.sft import run_sft

    run_sft(model=args.model, suite=args.suite, out_dir=args.out, steps=args.steps,
            threads=args.threads, batch_size=args.batch_size, lr=args.lr, device=args.device,
            mixed_batches=args.mixed_batches, experience_suite=args.experience_suite,
            experience_share=args.experience_share, num_experiences=args.num_experiences)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from lopd.preflight import check_export

    check_export(args)
    from lopd.policy import export_student

    print(export_student(args.run, args.out, merge=args.merge))
    return 0


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as an exception, so ``main`` prints it as one line."""

    def error(self, message: str):
        from lopd.preflight import InputError

        raise InputError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """The `lopd` parser: one sub-command per task, each added by its own function below."""
    parser = _Parser(
        prog="lopd", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description="Latent On-Policy Self-Distillation for LLM agents, with GRPO, SDFT, OPSD, "
                    "SDPO and Skill-SD in the same loop.")
    parser.add_argument("--version", action="version", version=f"lopd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_demo, _add_train, _add_eval, _add_bank, _add_inspect, _add_sft,
                _add_export, _add_info):
        add(sub)
    return parser


def _add_demo(sub) -> None:
    """`lopd demo`."""
    demo = sub.add_parser("demo", help="warm start -> held-out eval -> training -> held-out eval -> report")
    demo.add_argument("--out", default="runs/demo", help="run directory (default: runs/demo)")
    demo.add_argument("--method", default="grpo",
                      help="training method, as method.name (default: grpo, the setting measured "
                           "to learn at this budget; lopd adds the bank seeding and the cold start)")
    demo.add_argument("--steps", type=int, default=0,
                      help="training steps of 32 rollouts (default 8: with rollouts on vLLM "
                           "the whole demo takes about 4.5 min on 2 cores)")
    demo.add_argument("--dtype", default="auto", choices=DTYPES,
                      help="model.dtype (default auto: bf16 autocast where the CPU has fast bf16, "
                           "else fp32; fp32 times the demo as a CPU without it runs)")
    demo.add_argument("--seed", type=int, default=0,
                      help="run.seed: the tasks each step draws and the sampling (default 0)")
    demo.add_argument("--quick", action="store_true", help="tiny budget, for smoke tests")
    demo.set_defaults(func=_cmd_demo)


def _add_train(sub) -> None:
    """`lopd train`."""
    train = sub.add_parser("train", help="train with LOPD or a baseline",
                           description="Train a student. Overrides: section.field=value "
                                       "(see --help-config).")
    train.add_argument("--method", choices=["lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"])
    train.add_argument("--config", help="YAML config (see configs/)")
    train.add_argument("--out", help="run directory (run.out_dir)")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    train.add_argument("--help-config", action="store_true", help="list every config field")
    train.add_argument("overrides", nargs="*", metavar="section.field=value")
    train.set_defaults(func=_cmd_train)


def _add_eval(sub) -> None:
    """`lopd eval`."""
    ev = sub.add_parser("eval", help="evaluate a model on task suites (JSON + markdown report)")
    ev.add_argument("--model", default="smollm2-135m", help="model name or HF directory")
    ev.add_argument("--adapter", default="", help="PEFT adapter directory of a trained student")
    ev.add_argument("--init-adapter", default="",
                    help="warm-start adapter merged before --adapter (as model.init_adapter)")
    ev.add_argument("--run", default="",
                    help="evaluate a run's newest student (its model and warm start included)")
    ev.add_argument("--latent-memory", action="store_true",
                    help="with --run (LOPD): the frozen teacher acting with latents composed "
                         "from the run's bank, to see what the latent context alone is worth")
    ev.add_argument("--samples", type=int, default=1,
                    help="episodes per task; > 1 also reports pass@k (use with --temperature)")
    ev.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ev.add_argument("--top-p", type=float, default=1.0)
    ev.add_argument("--top-k", type=int, default=0, help="0 = off")
    ev.add_argument("--suite", default="toolworld-test",
                    help="comma-separated: toolworld-test, toolworld-test-tier1, toolworld-transfer, "
                         "bfcl-multi-turn, humaneval, code-train, ..., a task file (tasks.jsonl) "
                         "or a plugin (module:factory, file.py:factory[:ARG])")
    ev.add_argument("--limit", type=int, default=0, help="tasks per suite (0 = all)")
    ev.add_argument("--out", default="runs/eval", help="where eval.json and eval.md go")
    ev.add_argument("--threads", type=int, default=2)
    ev.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="auto = bf16 where it is fast (GPU, AVX-512 BF16, AMX), else fp32")
    ev.add_argument("--device", default="auto", help=DEVICE_HELP)
    ev.add_argument("--max-new-tokens", type=int, default=192)
    ev.add_argument("--max-steps", type=int, default=30,
                    help="assistant turns per ToolWorld/code episode (paper: 30); BFCL has its own")
    ev.add_argument("--batch-size", type=int, default=32, help="episodes generated together")
    ev.add_argument("--backend", default="auto", choices=["auto", "hf", "vllm"],
                    help="who decodes: vllm where installed (auto), or lopd's own loop (hf)")
    ev.set_defaults(func=_cmd_eval)


def _add_bank(sub) -> None:
    """`lopd bank`."""
    bank = sub.add_parser("bank", help="look into a run's experience bank")
    bank.add_argument("action", choices=["stats", "query", "export"])
    bank.add_argument("--run", required=True, help="run directory")
    bank.add_argument("--text", help="query text (for query)")
    bank.add_argument("-j", type=int, default=3, help="neighbours to show (for query)")
    bank.add_argument("--out", help="export path (default RUN/bank.jsonl)")
    bank.set_defaults(func=_cmd_bank)


def _add_inspect(sub) -> None:
    """`lopd inspect`."""
    ins = sub.add_parser("inspect", help="what the composer reads and how the teacher reacts")
    ins.add_argument("--run", required=True, help="run directory")
    ins.add_argument("--task", required=True, help="task id")
    ins.add_argument("--out", default="", help="output directory (default RUN/inspect/TASK)")
    ins.set_defaults(func=_cmd_inspect)


def _add_sft(sub) -> None:
    """`lopd sft`."""
    sft = sub.add_parser("sft", help="supervised warm start on reference trajectories")
    sft.add_argument("--model", default="smollm2-135m")
    sft.add_argument("--suite", default="toolworld-train",
                     help="training suite with reference solutions: a built-in name, a task "
                          "file (tasks.jsonl) or a plugin (module:factory)")
    sft.add_argument("--out", default="runs/sft")
    sft.add_argument("--steps", type=int, default=60)
    sft.add_argument("--threads", type=int, default=2)
    sft.add_argument("--batch-size", type=int, default=4)
    sft.add_argument("--device", default="auto", help=DEVICE_HELP)
    sft.add_argument("--mixed-batches", action="store_true",
                     help="draw each batch from all domains (default: one domain per step, so "
                          "its shared system prompt runs once)")
    sft.add_argument("--lr", type=float, default=5e-4)
    sft.add_argument("--experience-suite", default=None,
                     help="also train to act on experience in the context: this suite's "
                          "references (tasks that name an organisation, e.g. "
                          "toolworld-rules-icl) with J retrieved-style successes spliced after "
                          "the prompt as method.context=text does (lopd.sft_experience)")
    sft.add_argument("--experience-share", type=float, default=0.75,
                     help="share of the steps that train on the experience suite")
    sft.add_argument("--num-experiences", type=int, default=3,
                     help="J: successes shown per experience row (method.num_experiences)")
    sft.set_defaults(func=_cmd_sft)


def _add_export(sub) -> None:
    """`lopd export`."""
    export = sub.add_parser("export", help="write the trained student as an HF/PEFT directory")
    export.add_argument("--run", required=True, help="run directory")
    export.add_argument("--out", required=True, help="output directory")
    export.add_argument("--merge", action="store_true", help="merge LoRA into a full HF model")
    export.set_defaults(func=_cmd_export)


def _add_info(sub) -> None:
    """`lopd info`."""
    info = sub.add_parser("info", help="versions, threads, dtype support, cache, bundled assets")
    info.set_defaults(func=_cmd_info)

_OVERRIDE = re.compile(r"^[A-Za-z_][\w-]*\.[\w.-]+=")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``section.field=value`` items of ``train`` may stand anywhere
    (before or after options such as ``--resume``)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [item for item in extra if _OVERRIDE.match(item)]
    unknown = [item for item in extra if not _OVERRIDE.match(item)]
    if overrides and args.command != "train":
        unknown = overrides + unknown
    if unknown:
        from lopd.preflight import InputError

        raise InputError(f"unrecognized arguments: {' '.join(unknown)} "
                         f"(see `lopd {args.command} --help`)")
    if args.command == "train":
        args.overrides = list(args.overrides) + overrides
    return args


def _is_input_error(error: BaseException) -> bool:
    """lopd's own reports of bad input: config, paths, models, damaged run files, and
    ValueErrors raised by lopd's code (not by a library it calls)."""
    from lopd.atomic import DamagedRunFile
    from lopd.config import ConfigError
    from lopd.preflight import InputError

    models = sys.modules.get("lopd.models")
    if models is not None and isinstance(error, models.ModelNotAvailable):
        return True
    if isinstance(error, (InputError, ConfigError, DamagedRunFile, FileNotFoundError, NotADirectoryError,
                          IsADirectoryError, PermissionError, FileExistsError)):
        return True
    if isinstance(error, ValueError):
        frames = traceback.extract_tb(error.__traceback__)
        package = str(Path(__file__).resolve().parent)
        return bool(frames) and str(Path(frames[-1].filename).resolve()).startswith(package)
    return False


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input is one line on stderr and exit status 2."""
    from lopd.run_dir import one_line

    try:
        args = parse_args(argv)
        return int(args.func(args) or 0)
    except Exception as error:
        if os.environ.get("LOPD_DEBUG") or not _is_input_error(error):
            raise
        print(f"lopd: error: {one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
