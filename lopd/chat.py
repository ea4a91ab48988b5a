"""Token-exact multi-turn chat rendering and tool-call parsing.

Rendering. A conversation is turned into token ids *one message at a time*: every message is
tokenised as its own segment and segments are concatenated. This gives the prefix property the
whole library relies on — appending a turn yields exactly the ids a full render would give — and
lets sampled assistant tokens be appended as they were sampled, never re-tokenised. For ChatML
models (SmolLM2, Qwen) a segment is ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, which is
token-for-token what the tokenizer's own chat template produces: system, user and tool segments
are tokenised as one string (BPE may merge the header's newline with leading whitespace), while
an assistant's content is tokenised apart from its header, as it is sampled. For other
templates a segment is the text the template adds for that message (render of ``messages[:k+1]`` minus render of
``messages[:k]``).

Action mask. 1 exactly on tokens the model produced: an assistant message's content and its
end-of-turn token. The role header (``<|im_start|>assistant\\n``) and the newline after the
end-of-turn token are 0, as are system, user and tool messages.

Tool calls. SmolLM2's chat template ignores ``tools=``, so the tool schemas, the call format
and one example go into the system prompt (``tool_system_prompt``). A call is written
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a turn may hold several.
``parse_tool_calls`` never raises: malformed output (bad JSON, unknown tool, wrong argument
types, an unclosed tag) becomes a readable error that environments return as an observation.

Hostile output. The parser also turns into errors what would otherwise crash the caller or
poison a state: nesting deeper than ``MAX_DEPTH``, integer literals of more than
``MAX_INT_DIGITS`` digits, NaN/Infinity and floats that overflow to infinity (JSON has no
non-finite numbers), and values outside a schema's ``minimum``/``maximum``/
``exclusiveMinimum``/``exclusiveMaximum``/``maxLength``. Text reaching the tokenizer goes
through ``safe_text`` (lone surrogates, e.g. from a ``"\\ud800"`` escape, become U+FFFD), so
every message renders whatever its characters. The parser reads at most ``MAX_TURN_CHARS``
characters of a turn (the rest is ignored), so one enormous turn costs a bounded parse.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lopd.types import Message, ToolSchema

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
MAX_DEPTH = 32  # nesting levels of a call's JSON payload
MAX_INT_DIGITS = 100  # digits of an integer literal (Python refuses 4300+, floats overflow ~309)
MAX_TURN_CHARS = 100_000  # characters of an assistant turn the parser reads (~25k tokens)
_CLIP = 80  # characters of a model-written name or key quoted back in an error
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def render(self) -> str:
        return format_tool_call(self.name, self.arguments)


@dataclass
class ParsedTurn:
    """An assistant turn split into free text, valid calls and errors (one per bad call)."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def attempted_calls(self) -> int:
        return len(self.calls) + len(self.errors)


class _BadNumber(ValueError):
    """A JSON number the parser refuses (non-finite, overflowing or too long)."""


def safe_text(text: str) -> str:
    """``text`` as valid Unicode: surrogate pairs are joined, lone surrogates become U+FFFD.

    Python strings may hold lone surrogates (``json.loads('"\\ud800"')``); tokenizers and UTF-8
    writers refuse them. Valid text is returned unchanged (same object).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clip(text: str, limit: int = _CLIP) -> str:
    """At most ``limit`` characters of ``text`` (marked when cut), for quoting in errors."""
    return text if len(text) <= limit else f"{text[:limit]}...[{len(text)} chars]"


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _BadNumber(f"number {clip(literal, 24)} is out of range")
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _BadNumber(f"integer literal with {len(literal)} digits is too long "
                         f"(at most {MAX_INT_DIGITS})")
    return int(literal)


def _no_constant(literal: str) -> Any:
    raise _BadNumber(f"{literal} is not a valid JSON number (use a finite number)")


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity, overflowing floats and very long integers
    (``_BadNumber``, a ``ValueError``) and nesting deeper than ``MAX_DEPTH`` (``ValueError``).
    Deep nesting that exhausts the interpreter's stack raises ``RecursionError``."""
    value = json.loads(text, parse_float=_finite_float, parse_int=_bounded_int,
                       parse_constant=_no_constant)
    if depth(value) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return value


def depth(value: Any) -> int:
    """Nesting depth of lists/dicts in ``value`` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, (list, tuple)):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in node)
    return deepest


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"


def _type_matches(value: Any, expected: str | list[str]) -> bool:
    names = expected if isinstance(expected, list) else [expected]
    for name in names:
        types = _JSON_TYPES.get(name)
        if types is None:
            return True  # a type we do not check
        if isinstance(value, bool) and bool not in types:
            continue  # JSON booleans are not integers
        if isinstance(value, types):
            return True
    return False


def _bound_problem(value: Any, spec: dict[str, Any]) -> str | None:
    """Why ``value`` breaks the range/length keywords of ``spec`` (None if it does not)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in spec and value < spec["minimum"]:
            return f"must be at least {spec['minimum']}, got {_show(value)}"
        if "exclusiveMinimum" in spec and value <= spec["exclusiveMinimum"]:
            return f"must be greater than {spec['exclusiveMinimum']}, got {_show(value)}"
        if "maximum" in spec and value > spec["maximum"]:
            return f"must be at most {spec['maximum']}, got {_show(value)}"
        if "exclusiveMaximum" in spec and value >= spec["exclusiveMaximum"]:
            return f"must be less than {spec['exclusiveMaximum']}, got {_show(value)}"
    if isinstance(value, str) and "maxLength" in spec and len(value) > spec["maxLength"]:
        return f"is too long ({len(value)} characters, at most {spec['maxLength']})"
    return None


def _show(value: float) -> str:
    """A short rendering of a number (huge integers by their size: ``str`` would refuse them)."""
    if isinstance(value, int) and abs(value) >= 10 ** 24:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    return clip(repr(value), 24)


def validate_arguments(arguments: Any, schema: ToolSchema) -> list[str]:
    """Check ``arguments`` against a tool's JSON-schema ``parameters``; returns the problems.

    Checked: required keys, unknown keys, ``type``, ``enum``, finite numbers and the range and
    length keywords (``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
    ``maxLength``). Never raises on any ``arguments``.
    """
    name = clip(str(schema.get("name", "?")))
    if not isinstance(arguments, dict):
        return [f"{name}: 'arguments' must be a JSON object, got {type(arguments).__name__}"]
    params = schema.get("parameters") or {}
    properties: dict[str, Any] = params.get("properties") or {}
    problems = [
        f"{name}: missing required argument '{key}'"
        for key in params.get("required", [])
        if key not in arguments
    ]
    for key, value in arguments.items():
        spec = properties.get(key) if isinstance(key, str) else None
        if spec is None:
            allowed = ", ".join(properties) or "none"
            problems.append(f"{name}: unknown argument '{clip(str(key))}' (allowed: {allowed})")
            continue
        expected = spec.get("type")
        if expected is not None and not _type_matches(value, expected):
            problems.append(
                f"{name}: argument '{key}' must be {expected}, got {type(value).__name__}"
            )
        elif "enum" in spec and not _in_enum(value, spec["enum"]):
            problems.append(f"{name}: argument '{key}' must be one of {spec['enum']}")
        elif (bound := _bound_problem(value, spec)) is not None:
            problems.append(f"{name}: argument '{key}' {bound}")
    return problems


def _in_enum(value: Any, options: list[Any]) -> bool:
    try:
        return value in options
    except Exception:  # noqa: BLE001 - exotic values never match
        return False


def _parse_one(raw: str, tools_by_name: dict[str, ToolSchema] | None) -> ToolCall | str:
    try:
        payload = loads_strict(raw.strip())
    except json.JSONDecodeError as err:
        return f"invalid JSON in tool call ({err.msg} at char {err.pos}): {clip(raw.strip(), 120)}"
    except _BadNumber as err:
        return f"invalid number in tool call: {err}"
    except (ValueError, RecursionError) as err:
        reason = err if isinstance(err, ValueError) else f"nested more than {MAX_DEPTH} levels deep"
        return f"invalid tool call: {reason}"
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return 'a tool call must be {"name": <string>, "arguments": {...}}'
    name, arguments = payload["name"], payload.get("arguments", {})
    if arguments is None:
        arguments = {}
    if tools_by_name is not None:
        if name not in tools_by_name:
            return f"unknown tool '{clip(name)}' (available: {', '.join(tools_by_name) or 'none'})"
        problems = validate_arguments(arguments, tools_by_name[name])
        if problems:
            return "; ".join(problems)
    elif not isinstance(arguments, dict):
        return f"{clip(name)}: 'arguments' must be a JSON object"
    return ToolCall(name, arguments)


def parse_tool_calls(text: str, tools: Sequence[ToolSchema] | None = None) -> ParsedTurn:
    """Extract every ``<tool_call>`` block of an assistant turn. Never raises.

    With ``tools`` given, names and arguments are validated against the schemas; each failing
    block becomes one entry of ``errors`` instead of a call. Only the first ``MAX_TURN_CHARS``
    characters are read.
    """
    if not isinstance(text, str):
        text = str(text)
    text = text[:MAX_TURN_CHARS]
    tools_by_name = None if tools is None else {t["name"]: t for t in tools}
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in CALL_BLOCK.finditer(text):
        if not match.group(0).endswith(CALL_CLOSE):
            errors.append(f"unclosed {CALL_OPEN}: end each call with {CALL_CLOSE}")
            continue
        parsed = _parse_one(match.group(1), tools_by_name)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    content = CALL_BLOCK.sub("", text).strip()
    return ParsedTurn(content=content, calls=calls, errors=errors)


def _example_value(spec: dict[str, Any]) -> Any:
    if "enum" in spec:
        return spec["enum"][0]
    kind = spec.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    return {"integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(
        kind, "value"
    )


def example_call(tool: ToolSchema) -> str:
    """A syntactically valid call of ``tool`` with placeholder values for its required args."""
    params = tool.get("parameters") or {}
    properties = params.get("properties") or {}
    required = params.get("required") or list(properties)[:1]
    return format_tool_call(tool["name"], {k: _example_value(properties.get(k, {})) for k in required})


def tool_signature(tool: ToolSchema) -> str:
    """One line per tool: ``name(arg: type, opt?: type) - description`` (enums listed)."""
    params = tool.get("parameters") or {}
    required = set(params.get("required") or [])
    args = []
    for key, spec in (params.get("properties") or {}).items():
        kind = spec.get("type", "any")
        kind = "|".join(kind) if isinstance(kind, list) else kind
        if "enum" in spec:
            kind = "|".join(json.dumps(v) for v in spec["enum"])
        args.append(f"{key}{'' if key in required else '?'}: {kind}")
    description = " ".join(str(tool.get("description", "")).split())
    return f"- {tool['name']}({', '.join(args)})" + (f" - {description}" if description else "")


def tool_system_prompt(instructions: str, tools: Sequence[ToolSchema], example: str | None = None,
                       style: str = "compact") -> str:
    """System prompt with the tools, the call format and one example call.

    ``style="compact"`` lists one signature line per tool (``tool_signature``): about a third of
    the tokens of the JSON schemas, which matters because the prompt is re-read by every
    forward pass of rollouts and training. ``style="json"`` lists the full JSON schemas.
    """
    if not tools:
        return instructions
    if style == "json":
        listing = "\n".join(json.dumps(t, separators=(",", ":")) for t in tools)
    elif style == "compact":
        listing = "\n".join(tool_signature(t) for t in tools)
    else:
        raise ValueError(f"style must be 'compact' or 'json', got {style!r}")
    example = example or example_call(tools[0])
    return (
        f"{instructions}\n\nYou can call these tools (? marks an optional argument):\n{listing}\n\n"
        f"To call a tool, write {CALL_OPEN}{{\"name\": <tool name>, \"arguments\": "
        f"{{<argument>: <value>}}}}{CALL_CLOSE}. You may write several calls in one turn. "
        f"Example:\n{example}\n"
        "Tool results come back in the next message. When the task is done, reply with a "
        "short final answer and no tool call."
    )


class ChatRenderer:
    """Renders messages to token ids segment by segment (see the module docstring)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab()
        self.chatml = "<|im_start|>" in vocab and "<|im_end|>" in vocab
        if self.chatml:
            self.end_of_turn_id = vocab["<|im_end|>"]
        else:
            self.end_of_turn_id = tokenizer.eos_token_id
        self._turn_separator = self._encode("\n") if self.chatml else []

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(safe_text(text), add_special_tokens=False)["input_ids"]

    @property
    def stop_ids(self) -> set[int]:
        """Token ids that end an assistant turn."""
        ids = {self.end_of_turn_id}
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def generation_prompt(self) -> list[int]:
        """Ids that open an assistant turn (never supervised)."""
        if self.chatml:
            return self._encode("<|im_start|>assistant\n")
        without = self.tokenizer.apply_chat_template([{"role": "user", "content": ""}], tokenize=False)
        with_prompt = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True
        )
        return self._encode(with_prompt[len(without):])

    def close_sampled_turn(self, sampled: list[int]) -> tuple[list[int], list[int]]:
        """Ids and mask that follow sampled tokens to close the turn.

        A turn that stopped on its end-of-turn token gets only the separator; one cut by the
        token budget also gets the end-of-turn token, unsupervised (the model did not emit it).
        """
        closing: list[int] = []
        if not sampled or sampled[-1] not in self.stop_ids:
            closing.append(self.end_of_turn_id)
        return closing + self._turn_separator, [0] * (len(closing) + len(self._turn_separator))

    def render_message(self, message: Message, history: Sequence[Message] = ()) -> tuple[list[int], list[int]]:
        """Ids and action mask of one message (``history`` is only used for non-ChatML)."""
        role, content = message["role"], message["content"]
        if self.chatml:
            if role != "assistant":  # one string, as the template tokenizes it ("\n " merges)
                ids = self._encode(f"<|im_start|>{role}\n{content}") + [self.end_of_turn_id]
                return ids + self._turn_separator, [0] * (len(ids) + len(self._turn_separator))
            # an assistant turn's ids are the sampled ones, which follow the header's newline
            header = self._encode(f"<|im_start|>{role}\n")
            body = self._encode(content) + [self.end_of_turn_id]
            ids = header + body + self._turn_separator
            supervised = role == "assistant"
            mask = [0] * len(header) + [int(supervised)] * len(body) + [0] * len(self._turn_separator)
            return ids, mask
        return self._render_by_template(message, history)

    def _render_by_template(self, message: Message, history: Sequence[Message]) -> tuple[list[int], list[int]]:
        before = self.tokenizer.apply_chat_template(list(history), tokenize=False) if history else ""
        after = self.tokenizer.apply_chat_template([*history, message], tokenize=False)
        if not after.startswith(before):
            raise ValueError("this chat template is not prefix-stable; lopd cannot render it exactly")
        ids = self._encode(after[len(before):])
        if message["role"] != "assistant":
            return ids, [0] * len(ids)
        prompt = self.generation_prompt()
        head = len(prompt) if ids[: len(prompt)] == prompt else 0
        return ids, [0] * head + [1] * (len(ids) - head)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = False) -> tuple[list[int], list[int]]:
        """Ids and action mask of a whole conversation (concatenated segments)."""
        ids: list[int] = []
        mask: list[int] = []
        for index, message in enumerate(messages):
            seg_ids, seg_mask = self.render_message(message, messages[:index])
            ids += seg_ids
            mask += seg_mask
        if add_generation_prompt:
            prompt = self.generation_prompt()
            ids += prompt
            mask += [0] * len(prompt)
        return ids, mask
