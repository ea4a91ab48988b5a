"""Environments: ToolWorld (generated tool-use domains), Python coding, HumanEval, BFCL,
ACEBench, and the user's own (plugins, Python tool sets, task files).

Every environment follows ``lopd.types.Env``: ``reset() -> ResetResult`` (system + user
messages and the tool schemas) and ``step(assistant_text) -> StepResult``; malformed output
never raises. ``make_env`` picks the environment from ``task.metadata["env"]`` (or
``task.domain``); ``load_suite`` names the task suites used by training and evaluation:

- a built-in name (``SUITES``);
- ``module:factory`` (or ``file.py:factory``, ``module:factory:ARG``): a plugin suite from the
  user's code (``lopd.envs.plugins``);
- ``path/to/tasks.jsonl``: a task file (``lopd.envs.taskfile``), whose tasks name their tool set
  (``lopd.envs.function_env``) or environment maker by import path.

Imports are light: the sandbox, HumanEval, BFCL, ACEBench and plugin modules load on first
use.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from lopd.envs.common import MAX_CALLS_PER_TURN
from lopd.types import Env, Task

SUITES = [
    "toolworld-train", "toolworld-test", "toolworld-test-tier1", "toolworld-transfer", "toolworld-rules-train",
    "toolworld-rules-test", "toolworld-rules-transfer", "toolworld-rules-icl", "code-train",
    "humaneval",
    "bfcl-multi-turn", "bfcl-base", "bfcl-miss_func", "bfcl-miss_param", "bfcl-long_context",
    "acebench", "acebench-multi-step", "acebench-multi-turn",
]


def make_env(task: Task, seed: int = 0, max_steps: int = 30,
             max_calls: int = MAX_CALLS_PER_TURN) -> Env:
    """The environment for one episode of ``task``; ``max_calls`` caps the tool calls executed
    per assistant turn (``lopd.envs.common.MAX_CALLS_PER_TURN``)."""
    kind = task.metadata.get("env", task.domain)
    if kind == "toolworld":
        from lopd.envs.toolworld import ToolWorldEnv

        return ToolWorldEnv(task, seed=seed, max_steps=max_steps, max_calls=max_calls)
    if kind in ("code", "humaneval"):
        from lopd.envs.code import CodeEnv

        return CodeEnv(task, seed=seed)
    if kind == "bfcl":
        from lopd.envs.bfcl import BFCLEnv

        return BFCLEnv(task, seed=seed, max_steps=max_steps, max_calls=max_calls)
    if kind == "acebench":
        from lopd.envs.acebench import ACEBenchEnv

        return ACEBenchEnv(task, seed=seed, max_steps=max_steps, max_calls=max_calls)
    if kind in ("function", "plugin", "custom"):
        return _user_env(kind, task, seed, max_steps, max_calls)
    raise ValueError(f"no environment for task {task.id!r} (env={kind!r})")


def task_pool(suite: str, max_tasks: int = 0, max_tier: int = 0) -> list[Task]:
    """A run's training or held-out tasks: ``suite`` without the tasks above tier ``max_tier``
    (0 = keep every tier; tasks without a ``tier`` are kept), then its first ``max_tasks``
    (0 = all)."""
    if not max_tier:
        return load_suite(suite, n=max_tasks or None)
    tasks = [t for t in load_suite(suite) if int(t.metadata.get("tier", 0)) <= max_tier]
    if not tasks:
        raise ValueError(f"a tier cap of {max_tier} leaves no task of {suite!r}")
    return tasks[:max_tasks] if max_tasks else tasks


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
    if name in ("acebench", "acebench-multi-step", "acebench-multi-turn"):
        from lopd.envs.acebench import load_acebench_tasks

        split = name.removeprefix("acebench").removeprefix("-").replace("-", "_")
        return load_acebench_tasks(split or None, n=n)
    if name.endswith(".jsonl"):
        from lopd.envs.taskfile import read_task_file

        return read_task_file(name, n=n)
    if ":" in name:
        from lopd.envs.plugins import load_plugin

        tasks = load_plugin(name, make_env).tasks
        return [replace(t, tools=copy.deepcopy(t.tools), metadata=copy.deepcopy(t.metadata))
                for t in (tasks[:n] if n is not None else tasks)]
    raise ValueError(f"unknown suite {name!r}; {SUITE_FORMS}")


SUITE_FORMS = (f"choose from {', '.join(SUITES)}, a task file (path/to/tasks.jsonl) or a "
               "plugin (module:factory or file.py:factory)")


def suite_problem(name: str) -> str | None:
    """Why ``name`` cannot be a suite (None when it can). Task files and plugins are loaded
    (and cached) to check them, so a bad one is reported before any model loads."""
    if name in SUITES:
        return None
    if name.endswith(".jsonl") or ":" in name:
        try:
            load_suite(name)
        except (ValueError, TypeError) as error:
            return str(error)
        return None
    return f"unknown suite {name!r}; {SUITE_FORMS}"


REFERENCE_METHODS = {"sdft": "its demonstrations", "opsd": "the teacher's oracle answer"}


def check_references(method: str, tasks: list[Task], suite: str) -> None:
    """Methods that read ``task.reference`` for every task (SDFT, OPSD) need one on each:
    raise ``ValueError`` naming the method and the first task without one."""
    if method not in REFERENCE_METHODS:
        return
    missing = [t.id for t in tasks if not t.reference]
    if missing:
        raise ValueError(
            f"method {method} needs a reference solution for every training task "
            f"({REFERENCE_METHODS[method]}), but task {missing[0]!r} of suite {suite!r} has none "
            f"({len(missing)} of {len(tasks)} lack one); add 'reference' to them or use "
            "lopd, grpo, sdpo or skill-sd")


def _user_env(kind: str, task: Task, seed: int, max_steps: int, max_calls: int) -> Env:
    """Environments of the user's code: a tool set, a plugin suite, or an env maker."""
    from lopd.envs.plugins import PluginSuite, build_env, load_plugin, resolve

    if kind == "function":
        from lopd.envs.function_env import FunctionEnv

        return FunctionEnv(task, resolve(task.metadata["toolset"]), seed=seed,
                           max_steps=max_steps, max_calls=max_calls)
    if kind == "plugin":
        name = task.metadata["plugin"]
        return build_env(load_plugin(name, make_env), name, task, seed, max_steps, max_calls)
    ref = task.metadata["env_maker"]
    return build_env(PluginSuite([], resolve(ref)), ref, task, seed, max_steps, max_calls)


__all__ = ["SUITES", "check_references", "load_suite", "make_env", "suite_problem", "task_pool"]
