"""Hostile tool calls for ToolWorld: a seeded generator and a runner that counts what breaks.

``hostile_turn`` writes an assistant turn of one to three ``<tool_call>`` blocks (now and then
one block repeated hundreds to tens of thousands of times, up to a megabyte: the ``many_calls``
kind, which the cap on calls per turn must answer in bounded time) aimed at the
places where model output has crashed or corrupted environments: JSON nested thousands of
levels deep, integer literals of thousands of digits, ``1e309``/``NaN``/``Infinity``,
lone surrogates and control characters, megabyte strings, booleans or lists where numbers or
strings are expected, extra keys (with dots, empty, ``null``), missing keys, non-object
arguments, unknown or non-string tool names, unclosed tags. Half of the arguments are plausible
(ids, names, times and dates taken from the live state, sensible amounts) so that calls also
get through and change the state: hostile values must fail without leaving a trace.

``run_fuzz(steps)`` plays episodes across every domain and reports the steps whose
``env.step`` raised, observations that are not valid Unicode or do not render (with a
tokenizer), turns answered with more observations than the cap allows (``uncapped``), finished
states that break an invariant (``Domain.state_problems``, or a generic non-finite/time check
where that method does not exist) and rewards outside [0, 1]; it records the slowest step. It also
parses every turn without schemas, as BFCL's relaxed parsing does. Run it with
``python -m lopd.envs.toolworld.fuzz --steps 20000``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lopd.chat import parse_tool_calls
from lopd.envs.toolworld import DOMAINS, ToolWorldEnv, load_tasks

_WEIRD_STRINGS = [
    "", " ", "null", "None", "\x00", "\x1b[2J", "\u202eevil", "\ufeff", "\u200b", "\ud800",
    "\udfff", "a\ud83dz", "\U0001f600", "é" * 3, "../../etc/passwd", "/", "//", "/home/",
    "/home/../..", "' OR 1=1 --", "{}", "[]", "\n", "\t\r", "ACC-", "SKU-", "EV-", "P-", "L-",
    "23:59", "24:00", "24:29", "9:00", "09:00\n", "٠٩:٠٠", "23:30", "00:00", "12:60",
    "2025-03-10", "2025-02-30", "2025-13-01", "２０２５-03-10", "2025-03-10\n", "0000-00-00",
    "SAVE10", "save10", "VIP20 ", "B3", "E6", "F1", "kitchen", "KITCHEN", "living room",
]
_RAW_NUMBERS = [
    "NaN", "-NaN", "Infinity", "-Infinity", "1e309", "-1e309", "1e400", "2e308", "1.7976931348623159e308",
    "9" * 5000, "-" + "9" * 4400, "1" * 101, "1" * 4301, "-0", "-0.0", "1e-400", "0.004",
    "5e-324", "1E2", "1.0", "01", "1.", ".5", "0x10", "1_000", "+1", "1e", "--1",
]
_EXTRA_KEYS = ["", "null", "a.b", "__class__", "amount ", "AMOUNT", "0", "\ud800", "x" * 300]


def _state_strings(state: Any, limit: int = 400) -> list[str]:
    """Keys and string values of a state (ids, names, paths, times) to aim calls at."""
    found, stack = [], [state]
    while stack and len(found) < limit:
        node = stack.pop()
        if isinstance(node, dict):
            found.extend(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            found.append(node)
    return found or ["x"]


def _nested(rng: random.Random) -> Any:
    depth = rng.choice([2, 8, 33, 200])
    value: Any = rng.choice([1, "x", None])
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def _number(rng: random.Random) -> Any:
    return rng.choice([
        0, 1, -1, 5, 50, 100, 101, 1440, 10**6, 10**9 + 1, 10**50, -(10**30), 0.0, -0.0, 0.004,
        0.01, 0.005, 1e-320, 12.5, 49.99, 1e9, 1e15, 1e308, -1e308, 2**63, float("nan"),
        float("inf"), -float("inf"), rng.uniform(-1000, 1000), rng.randrange(-500, 5000),
    ])


def _string(rng: random.Random, strings: list[str]) -> str:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(strings)
    if roll < 0.85:
        return rng.choice(_WEIRD_STRINGS)
    if roll < 0.95:
        return rng.choice(strings) + rng.choice(_WEIRD_STRINGS)
    if roll < 0.998:
        return "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(1, 30)))
    return "A" * (1 << 20)  # 1 MiB


def _value(rng: random.Random, kind: str, strings: list[str], care: float,
           known: list[Any]) -> Any:
    """A value for a parameter of JSON type ``kind``: plausible with probability ``care``
    (then often one of the ``known`` good values of this parameter)."""
    plausible = rng.random() < care
    if plausible and known and rng.random() < 0.7:
        return rng.choice(known)
    if kind == "string":
        if plausible:
            return rng.choice(strings) if rng.random() < 0.9 else rng.choice(_WEIRD_STRINGS)
        return _string(rng, strings) if rng.random() < 0.5 else _hostile(rng, strings)
    if kind in ("number", "integer"):
        if plausible:
            return rng.choice([rng.randrange(1, 200), round(rng.uniform(0.01, 900), 2), 30, 60])
        return _number(rng) if rng.random() < 0.7 else _hostile(rng, strings)
    if kind == "boolean":
        return rng.choice([True, False]) if plausible else _hostile(rng, strings)
    return _hostile(rng, strings)


def _hostile(rng: random.Random, strings: list[str]) -> Any:
    return rng.choice([
        lambda: None, lambda: True, lambda: False, list, dict,
        lambda: [_string(rng, strings)], lambda: {"$ref": _string(rng, strings)},
        lambda: _number(rng), lambda: _string(rng, strings), lambda: _nested(rng),
    ])()


def _arguments(rng: random.Random, schema: dict[str, Any], strings: list[str],
               known: dict[str, list[Any]]) -> Any:
    properties = schema["parameters"]["properties"]
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([None, [], "x", 7, [1, 2], True])
    care = rng.choice([0.97, 0.9, 0.5, 0.1])  # how plausible this call's values are
    arguments = {key: _value(rng, spec.get("type", "string"), strings, care, known.get(key, []))
                 for key, spec in properties.items() if rng.random() < 0.97}
    if roll > 0.9:
        arguments[rng.choice(_EXTRA_KEYS)] = _hostile(rng, strings)
    return arguments


def _dump(rng: random.Random, payload: Any) -> str:
    """JSON text of ``payload``, non-ASCII escaped (``"\\ud800"``) or raw, half and half;
    NaN and infinities come out as the ``NaN``/``Infinity`` literals."""
    return json.dumps(payload, ensure_ascii=rng.random() < 0.5)


def _splice_number(rng: random.Random, text: str) -> str:
    """Replace one number of ``text`` with a literal ``json.dumps`` never writes."""
    spots = [m.span() for m in re.finditer(r"(?<=: )-?[0-9][0-9.eE+-]*", text)]
    literal = rng.choice(_RAW_NUMBERS)
    if not spots:
        return text[:-1] + f', "n": {literal}}}' if text.endswith("}") else text
    start, end = rng.choice(spots)
    return text[:start] + literal + text[end:]


def _block(rng: random.Random, schemas: list[dict[str, Any]], strings: list[str],
           known: dict[str, list[Any]]) -> str:
    roll = rng.random()
    schema = rng.choice(schemas)
    if roll < 0.05:  # deep nesting in the payload itself
        n = rng.choice([33, 999, 1500, 5000, 100_000])
        return f'<tool_call>{{"name": "{schema["name"]}", "arguments": {"[" * n}{"]" * n}}}</tool_call>'
    if roll < 0.09:
        name = rng.choice([None, 7, ["x"], "", schema["name"].upper(), "__init__", "_lookup",
                           "call", "state", "generate", "x" * 5000, "\ud800"])
        body = _dump(rng, {"name": name, "arguments": _arguments(rng, schema, strings, known)})
    elif roll < 0.12:
        body = rng.choice(['{"name": ', "{", "[]", "null", '"x"', '{"arguments": {}}',
                           '{"name": "a", "name": "b"}', "{'name': 'x'}"])
    else:
        body = _dump(rng, {"name": schema["name"], "arguments": _arguments(rng, schema, strings, known)})
        if rng.random() < 0.15:
            body = _splice_number(rng, body)
    close = "" if rng.random() < 0.03 else "</tool_call>"
    return f"<tool_call>{body}{close}"


def hostile_turn(rng: random.Random, schemas: list[dict[str, Any]], state: Any,
                 known: dict[str, list[Any]] | None = None) -> str:
    """One assistant turn aimed at ``schemas`` and the live ``state`` (module docstring);
    ``known`` maps parameter names to good values (e.g. from the reference solution)."""
    strings, known = _state_strings(state), known or {}
    if rng.random() < 0.03:
        return rng.choice(["Done.", "", "<tool_call", "</tool_call>", "\ud800"])
    if rng.random() < 0.005:  # many_calls: one block over and over, up to about a megabyte
        block = _block(rng, schemas, strings, known)
        count = min(rng.choice([100, 1000, 10_000]), max(1, 1_000_000 // len(block)))
        return "\n".join([block] * count)
    blocks = [_block(rng, schemas, strings, known) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    text = rng.choice(["", "Let me do that. ", "\x00", "\ud800 "])
    return text + "\n".join(blocks)


@dataclass
class FuzzReport:
    steps: int = 0
    episodes: int = 0
    raised: Counter = field(default_factory=Counter)  # exception type -> steps
    examples: list[str] = field(default_factory=list)  # first few failures, described
    bad_observations: int = 0
    render_failures: int = 0
    corrupt_states: Counter = field(default_factory=Counter)  # domain -> episodes
    bad_rewards: int = 0
    parse_raised: int = 0
    uncapped: int = 0  # turns answered with more than max_calls + 1 observations
    calls_ok: int = 0
    call_errors: int = 0
    seconds: float = 0.0
    slowest_step: float = 0.0  # seconds of the slowest env.step

    @property
    def failures(self) -> int:
        return (sum(self.raised.values()) + self.bad_observations + self.render_failures
                + sum(self.corrupt_states.values()) + self.bad_rewards + self.parse_raised
                + self.uncapped)

    def note(self, text: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(text[:300])


_TIME = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


def state_problems(world: Any) -> list[str]:
    """The domain's own invariant check, or a generic one (non-finite numbers, bad times)."""
    if hasattr(world, "state_problems"):
        return world.state_problems()
    problems, stack = [], [world.state]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            problems.append(f"non-finite number {node}")
        elif isinstance(node, dict):
            for key in ("start", "end"):
                if key in node and "date" in node and not _TIME.fullmatch(str(node[key])):
                    problems.append(f"bad time {node[key]!r}")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return problems


def _check_observation(report: FuzzReport, message: Any, renderer: Any) -> None:
    content = message.get("content") if isinstance(message, dict) else None
    try:
        content.encode("utf-8")
    except (AttributeError, UnicodeEncodeError):
        report.bad_observations += 1
        report.note(f"observation not valid text: {content!r}"[:300])
        return
    if renderer is not None:
        try:
            renderer.render_message(message)
        except Exception as err:  # noqa: BLE001 - counted, not raised
            report.render_failures += 1
            report.note(f"render {type(err).__name__}: {content[:120]!r}")


def _episode(report: FuzzReport, env: ToolWorldEnv, rng: random.Random, budget: int,
             renderer: Any) -> None:
    env.reset()
    known: dict[str, list[Any]] = {}
    for _, arguments in env.spec.reference:
        for key, value in arguments.items():
            known.setdefault(key, []).append(value)
    for key in ("start", "end"):  # edges of the day: where moved events used to spill over
        known.setdefault(key, []).extend(["23:30", "23:59", "22:45", "00:00"])
    done = False
    while not done and report.steps < budget:
        text = hostile_turn(rng, env.tools, env.world.state, known)
        report.steps += 1
        try:
            parse_tool_calls(text)
        except Exception as err:  # noqa: BLE001
            report.parse_raised += 1
            report.note(f"parse {type(err).__name__}: {text[:200]!r}")
        start = time.perf_counter()
        try:
            result = env.step(text)
        except Exception as err:  # noqa: BLE001 - what this runner counts
            report.raised[type(err).__name__] += 1
            report.note(f"{env.task.metadata['domain']} {type(err).__name__}: {text[:200]!r}")
            return
        report.slowest_step = max(report.slowest_step, time.perf_counter() - start)
        if len(result.observation) > env.max_calls + 1:
            report.uncapped += 1
            report.note(f"{len(result.observation)} observations for one turn")
        for message in result.observation:
            _check_observation(report, message, renderer)
            failed = str(message.get("content", "")).startswith('{"error"')
            report.call_errors += failed
            report.calls_ok += not failed
        done = result.done
        if done and not 0.0 <= result.reward <= 1.0:
            report.bad_rewards += 1
    problems = state_problems(env.world)
    if problems:
        report.corrupt_states[env.task.metadata["domain"]] += 1
        report.note(f"{env.task.metadata['domain']} state: {problems[:2]}")


def run_fuzz(steps: int = 20_000, seed: int = 0, renderer: Any = None,
             max_steps: int = 12) -> FuzzReport:
    """Play hostile episodes round-robin over every domain until ``steps`` turns were taken."""
    rng = random.Random(seed)
    tasks = {name: [] for name in DOMAINS}
    for split in ("train", "transfer"):
        for task in load_tasks(split):
            tasks[task.metadata["domain"]].append(task)
    report = FuzzReport()
    start = time.perf_counter()
    names = sorted(tasks)
    while report.steps < steps:
        domain = names[report.episodes % len(names)]
        env = ToolWorldEnv(rng.choice(tasks[domain]), max_steps=max_steps)
        report.episodes += 1
        _episode(report, env, rng, steps, renderer)
    report.seconds = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--render", action="store_true",
                        help="also render every observation with the SmolLM2 tokenizer")
    args = parser.parse_args(argv)
    renderer = None
    if args.render:
        from lopd.chat import ChatRenderer
        from lopd.models import load_tokenizer

        renderer = ChatRenderer(load_tokenizer("smollm2-135m"))
    report = run_fuzz(args.steps, args.seed, renderer)
    print(json.dumps({
        "steps": report.steps, "episodes": report.episodes, "seconds": round(report.seconds, 1),
        "raised": dict(report.raised), "bad_observations": report.bad_observations,
        "render_failures": report.render_failures, "corrupt_states": dict(report.corrupt_states),
        "bad_rewards": report.bad_rewards, "parse_raised": report.parse_raised,
        "uncapped": report.uncapped, "slowest_step": round(report.slowest_step, 3),
        "calls_ok": report.calls_ok, "call_errors": report.call_errors,
        "failures": report.failures, "examples": report.examples,
    }, indent=1, ensure_ascii=True))
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
