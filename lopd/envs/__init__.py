"""Environments: ToolWorld (generated tool-use domains), Python coding, HumanEval, BFCL.

Every environment follows ``lopd.types.Env``: ``reset() -> ResetResult`` (system + user
messages and the tool schemas) and ``step(assistant_text) -> StepResult``; malformed output
never raises. ``make_env`` picks the environment from ``task.metadata["env"]`` (or
``task.domain``); ``load_suite`` names the task suites used by training and evaluation.
Imports are light: the sandbox, HumanEval and BFCL modules load on first use.
"""

from __future__ import annotations

from lopd.types import Env, Task

SUITES = [
    "toolworld-train", "toolworld-test", "toolworld-transfer", "code-train", "humaneval",
    "bfcl-multi-turn", "bfcl-base", "bfcl-miss_func", "bfcl-miss_param", "bfcl-long_context",
]


def make_env(task: Task, seed: int = 0, max_steps: int = 30) -> Env:
    """The environment for one episode of ``task``."""
    kind = task.metadata.get("env", task.domain)
    if kind == "toolworld":
        from lopd.envs.toolworld import ToolWorldEnv

        return ToolWorldEnv(task, seed=seed, max_steps=max_steps)
    if kind in ("code", "humaneval"):
        from lopd.envs.code import CodeEnv

        return CodeEnv(task, seed=seed)
    if kind == "bfcl":
        from lopd.envs.bfcl import BFCLEnv

        return BFCLEnv(task, seed=seed, max_steps=max_steps)
    raise ValueError(f"no environment for task {task.id!r} (env={kind!r})")


def load_suite(name: str, n: int | None = None) -> list[Task]:
    """Tasks of a named suite (see ``SUITES``); ``n`` keeps the first ``n``.

    For ``bfcl-multi-turn`` (all four categories) ``n`` applies per category.
    """
    if name.startswith("toolworld-"):
        from lopd.envs.toolworld import load_tasks

        return load_tasks(name.removeprefix("toolworld-"), n=n)
    if name == "code-train":
        from lopd.envs.code import load_code_tasks

        return load_code_tasks(n)
    if name == "humaneval":
        from lopd.envs.code import load_humaneval

        return load_humaneval(n)
    if name.startswith("bfcl-"):
        from lopd.envs.bfcl import CATEGORIES, load_bfcl_tasks

        category = name.removeprefix("bfcl-")
        return load_bfcl_tasks(CATEGORIES if category == "multi-turn" else [category], n=n)
    raise ValueError(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")


__all__ = ["SUITES", "load_suite", "make_env"]
