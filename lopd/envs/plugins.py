"""Environment plugins: task suites and environments from the user's code, by import path.

A suite named ``module:factory`` (or ``path/to/file.py:factory``; ``module:factory:ARG`` calls
``factory("ARG")``, e.g. one factory for ``:train`` and ``:test``) is loaded by importing the
module and calling the factory, which returns one of:

- ``PluginSuite(tasks, make_env)``, or the pair ``(tasks, make_env)``: ``make_env(task, seed=,
  max_steps=)`` builds one episode (an object with ``task``, ``reset()`` and ``step(text)``,
  the ``lopd.types.Env`` protocol; a maker taking fewer keywords gets only those);
- a list of tasks alone, when they run on an environment lopd knows (e.g. built with
  ``lopd.envs.function_env.tool_task``).

Tasks are ``lopd.types.Task`` records or task-file rows (dicts, ``lopd.envs.taskfile``).
Loading checks all of it: the module imports, the factory returns the right types, task ids
are unique, and the first task's environment resets to a ``ResetResult``. Any problem is a
``PluginError`` (a ``ValueError``; ``PluginTypeError`` is also a ``TypeError``) with a one-line
message naming the plugin. The environments are wrapped (``CheckedEnv``) so that a malformed
answer of the user's environment (wrong result type, a reward outside [0, 1], an exception)
stops the run with such a message rather than deep inside training; when an episode ends
without ``info["success"]``, success is ``reward >= 1``. The wrapper also applies lopd's caps
on a turn (``lopd.envs.common``): the user's environment reads at most ``MAX_TURN_CHARS``
characters and ``max_calls`` tool-call blocks of a turn (the text is cut after the last block
kept, and a note says what was left out), and each observation message is cut to
``MAX_OBSERVATION_CHARS``. A maker that takes ``max_calls`` also gets the cap.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from lopd.envs.common import MAX_CALLS_PER_TURN, bound_turn, bounded_text, cap_note
from lopd.envs.references import (
    PluginError,
    PluginTypeError,
    is_plugin_name,
    one_line_error,
    resolve,
)
from lopd.types import Env, ResetResult, StepResult, Task


@dataclass
class PluginSuite:
    """What a suite factory returns: its tasks and the maker of one episode's environment."""

    tasks: list[Task]
    make_env: Callable[..., Env] | None = None


def _as_tasks(raw: Any, name: str) -> list[Task]:
    from lopd.envs.taskfile import task_from_row

    if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__iter__"):
        raise PluginTypeError(f"plugin {name!r}: tasks must be a list of Task (or task rows), "
                              f"got {type(raw).__name__}")
    tasks = []
    for index, item in enumerate(raw):
        if isinstance(item, dict):
            item = task_from_row(item, where=f"plugin {name!r}, task {index}")
        if not isinstance(item, Task):
            raise PluginTypeError(f"plugin {name!r}: task {index} is a {type(item).__name__}, "
                                  "not a lopd.types.Task or a task row (dict)")
        tasks.append(item)
    if not tasks:
        raise PluginError(f"plugin {name!r}: the factory returned no tasks")
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise PluginError(f"plugin {name!r}: task id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks


def _unpack(result: Any, name: str) -> tuple[Any, Any]:
    if isinstance(result, PluginSuite):
        return result.tasks, result.make_env
    if isinstance(result, tuple) and len(result) == 2 and (result[1] is None or callable(result[1])):
        return result
    if isinstance(result, (list, tuple)):
        return result, None
    raise PluginTypeError(f"plugin {name!r}: the factory returned a {type(result).__name__}; "
                          "return PluginSuite(tasks, make_env), (tasks, make_env) or a list of "
                          "tasks")


@lru_cache(maxsize=32)
def load_plugin(name: str, known_env: Callable[..., Env] | None = None) -> PluginSuite:
    """Import, call and check the suite factory ``name`` (see the module docstring); cached,
    so every environment of the suite comes from one import. ``known_env`` builds the
    environment of tasks that come without a maker (``lopd.envs.make_env``, which passes it)."""
    ref, _, argument = name.partition(":")
    ref = f"{ref}:{argument.split(':', 1)[0]}"
    call_args = [argument.split(":", 1)[1]] if ":" in argument else []
    factory = resolve(ref)
    if not callable(factory):
        raise PluginTypeError(f"plugin {name!r}: {ref} is a {type(factory).__name__}, not a "
                              "callable factory")
    try:
        result = factory(*call_args)
    except Exception as error:
        raise PluginError(f"plugin {name!r}: the factory failed ({one_line_error(error)})") from error
    raw_tasks, maker = _unpack(result, name)
    if maker is not None and not callable(maker):
        raise PluginTypeError(f"plugin {name!r}: make_env is a {type(maker).__name__}, not "
                              "callable")
    tasks = [replace(t, metadata={**t.metadata, "env": "plugin", "plugin": name})
             if maker is not None else t for t in _as_tasks(raw_tasks, name)]
    suite = PluginSuite(tasks, maker)
    try:  # the first task's environment must build and reset
        if maker is not None:
            build_env(suite, name, tasks[0], seed=0, max_steps=2).reset()
        elif known_env is None:
            raise PluginError(f"plugin {name!r}: its tasks come without make_env and no "
                              "environment lopd knows was given to build them")
        else:
            known_env(tasks[0], seed=0, max_steps=2).reset()
    except PluginError:
        raise
    except Exception as error:
        raise PluginError(f"plugin {name!r}: the environment of task {tasks[0].id!r} failed "
                          f"({one_line_error(error)})") from error
    return suite


def _call_maker(maker: Callable[..., Any], task: Task, seed: int, max_steps: int,
                max_calls: int) -> Any:
    try:
        accepted = inspect.signature(maker).parameters
    except (TypeError, ValueError):
        accepted = {}
    takes_all = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    extra = {k: v for k, v in (("seed", seed), ("max_steps", max_steps), ("max_calls", max_calls))
             if takes_all or k in accepted}
    return maker(task, **extra)


def build_env(suite: PluginSuite, name: str, task: Task, seed: int, max_steps: int,
              max_calls: int = MAX_CALLS_PER_TURN) -> Env:
    """One checked environment of ``task`` from the suite's maker."""
    try:
        env = _call_maker(suite.make_env, task, seed, max_steps, max_calls)
    except PluginError:
        raise
    except Exception as error:
        raise PluginError(f"plugin {name!r}: make_env failed for task {task.id!r} "
                          f"({one_line_error(error)})") from error
    missing = [m for m in ("reset", "step") if not callable(getattr(env, m, None))]
    if missing:
        raise PluginTypeError(f"plugin {name!r}: make_env returned a {type(env).__name__!r} "
                              f"without {' and '.join(m + '()' for m in missing)} "
                              "(see lopd.types.Env)")
    return CheckedEnv(env, task, name, max_calls)


def _check_messages(messages: Any, what: str) -> None:
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str) for m in messages):
        raise PluginTypeError(f"{what} must be a list of {{'role': str, 'content': str}} messages")


class CheckedEnv:
    """The user's environment with its answers checked (see the module docstring)."""

    def __init__(self, env: Any, task: Task, plugin: str, max_calls: int = MAX_CALLS_PER_TURN):
        self.env, self.task, self.plugin = env, task, plugin
        self.max_calls = max_calls

    def _where(self, method: str) -> str:
        return f"plugin {self.plugin!r}: {method} of task {self.task.id!r}"

    def reset(self) -> ResetResult:
        try:
            result = self.env.reset()
        except Exception as error:
            raise PluginError(f"{self._where('reset()')} raised ({one_line_error(error)})") from error
        if not isinstance(result, ResetResult):
            raise PluginTypeError(f"{self._where('reset()')} returned a "
                                  f"{type(result).__name__}, not a lopd.types.ResetResult")
        _check_messages(result.messages, self._where("reset().messages"))
        if not result.messages or not isinstance(result.tools, list):
            raise PluginTypeError(f"{self._where('reset()')} needs at least one message and a "
                                  "list of tool schemas (possibly empty)")
        return result

    def step(self, assistant_text: str) -> StepResult:
        text, skipped, unread = bound_turn(assistant_text, self.max_calls)
        try:
            result = self.env.step(text)
        except Exception as error:
            raise PluginError(f"{self._where('step()')} raised ({one_line_error(error)})") from error
        if not isinstance(result, StepResult):
            raise PluginTypeError(f"{self._where('step()')} returned a "
                                  f"{type(result).__name__}, not a lopd.types.StepResult")
        _check_messages(result.observation, self._where("step().observation"))
        reward = result.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not (
                math.isfinite(reward) and 0.0 <= reward <= 1.0):
            raise PluginError(f"{self._where('step()')} gave reward {reward!r}; rewards are "
                              "numbers in [0, 1]")
        if not isinstance(result.info, dict):
            raise PluginTypeError(f"{self._where('step()')}: info must be a dict")
        if result.done and "success" not in result.info:
            result.info["success"] = reward >= 1.0
        result.observation = [{**m, "content": bounded_text(m["content"])}
                              for m in result.observation]
        note = None if result.done else cap_note(skipped, unread, self.max_calls)
        if note is not None:
            result.observation.append(note)
        return result


__all__ = ["CheckedEnv", "PluginError", "PluginSuite", "PluginTypeError", "build_env",
           "is_plugin_name", "load_plugin", "resolve"]
