"""What a trained student says first: greedy first turns of checkpoints on a few tasks.

A quick look at a run that went wrong (``benchmarks/results/rules/README.md``: GRPO on the
business-rules suites): each checkpoint's student adapter on top of the warm start, the first
assistant turn of the first ``--tasks`` tier-``--tier`` tasks of ``--suite``, greedy, with
transformers' ``generate`` (no lopd decode loop, no engine, so neither is in the picture).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.studies.first_turns \\
        --checkpoints warm,runs/rules-learning/RUN/checkpoints/step-000016/student
"""

from __future__ import annotations

import argparse

import torch

WARM = "benchmarks/results/learning/warm-start-adapter"


def first_turns(checkpoints: list[str], suite: str, tier: int, n_tasks: int,
                max_new_tokens: int = 96, warm_adapter: str = WARM,
                ids: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(checkpoint, task id, decoded first turn) per checkpoint and task; ``warm`` is the warm
    start (``warm_adapter``) itself. ``ids``: these tasks instead of the first of ``tier``."""
    from peft import PeftModel

    from lopd.chat import ChatRenderer
    from lopd.envs.toolworld.env import ToolWorldEnv
    from lopd.envs.toolworld.suites import load_tasks
    from lopd.models import load_model, load_tokenizer

    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    base, _ = load_model(init_adapter=warm_adapter)
    tasks = ([t for t in load_tasks(suite) if t.id in ids] if ids else
             [t for t in load_tasks(suite) if t.metadata.get("tier") == tier][:n_tasks])
    found = []
    for checkpoint in checkpoints:
        model = base if checkpoint == "warm" else PeftModel.from_pretrained(base, checkpoint)
        for task in tasks:
            ids, _ = renderer.render(ToolWorldEnv(task).reset().messages, add_generation_prompt=True)
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens,
                                     do_sample=False)
            found.append((checkpoint, task.id, tokenizer.decode(out[0, len(ids):])))
        if checkpoint != "warm":
            base = model.unload()
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.first_turns",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", required=True,
                        help="comma-separated student adapter directories; warm = the warm start")
    parser.add_argument("--suite", default="rules-test")
    parser.add_argument("--tier", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--warm-adapter", default=WARM, help="the warm start the students began from")
    parser.add_argument("--ids", default="", help="comma-separated task ids (instead of --tier/--tasks)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for checkpoint, task_id, text in first_turns(args.checkpoints.split(","), args.suite,
                                                 args.tier, args.tasks,
                                                 warm_adapter=args.warm_adapter,
                                                 ids=tuple(filter(None, args.ids.split(",")))):
        print(f"{checkpoint} | {task_id}\n    {text!r}")


if __name__ == "__main__":
    main()
