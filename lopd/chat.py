"""Token-exact multi-turn chat rendering and tool-call parsing.

Rendering. A conversation is turned into token ids *one message at a time*: every message is
tokenised as its own segment and segments are concatenated. This gives the prefix property the
whole library relies on — appending a turn yields exactly the ids a full render would give — and
lets sampled assistant tokens be appended as they were sampled, never re-tokenised. For ChatML
models (SmolLM2, Qwen) a segment is ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, which is
token-for-token what the tokenizer's own chat template produces. For other templates a segment
is the text the template adds for that message (render of ``messages[:k+1]`` minus render of
``messages[:k]``).

Action mask. 1 exactly on tokens the model produced: an assistant message's content and its
end-of-turn token. The role header (``<|im_start|>assistant\\n``) and the newline after the
end-of-turn token are 0, as are system, user and tool messages.

Tool calls. SmolLM2's chat template ignores ``tools=``, so the tool schemas, the call format
and one example go into the system prompt (``tool_system_prompt``). A call is written
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a turn may hold several.
``parse_tool_calls`` never raises: malformed output (bad JSON, unknown tool, wrong argument
types, an unclosed tag) becomes a readable error that environments return as an observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lopd.types import Message, ToolSchema

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
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


def validate_arguments(arguments: Any, schema: ToolSchema) -> list[str]:
    """Check ``arguments`` against a tool's JSON-schema ``parameters``; returns the problems."""
    name = schema.get("name", "?")
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
        spec = properties.get(key)
        if spec is None:
            allowed = ", ".join(properties) or "none"
            problems.append(f"{name}: unknown argument '{key}' (allowed: {allowed})")
            continue
        expected = spec.get("type")
        if expected is not None and not _type_matches(value, expected):
            problems.append(
                f"{name}: argument '{key}' must be {expected}, got {type(value).__name__}"
            )
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"{name}: argument '{key}' must be one of {spec['enum']}")
    return problems


def _parse_one(raw: str, tools_by_name: dict[str, ToolSchema] | None) -> ToolCall | str:
    try:
        payload = json.loads(raw.strip())
    except json.JSONDecodeError as err:
        return f"invalid JSON in tool call ({err.msg} at char {err.pos}): {raw.strip()[:120]}"
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return 'a tool call must be {"name": <string>, "arguments": {...}}'
    name, arguments = payload["name"], payload.get("arguments", {})
    if arguments is None:
        arguments = {}
    if tools_by_name is not None:
        if name not in tools_by_name:
            return f"unknown tool '{name}' (available: {', '.join(tools_by_name) or 'none'})"
        problems = validate_arguments(arguments, tools_by_name[name])
        if problems:
            return "; ".join(problems)
    elif not isinstance(arguments, dict):
        return f"{name}: 'arguments' must be a JSON object"
    return ToolCall(name, arguments)


def parse_tool_calls(text: str, tools: Sequence[ToolSchema] | None = None) -> ParsedTurn:
    """Extract every ``<tool_call>`` block of an assistant turn. Never raises.

    With ``tools`` given, names and arguments are validated against the schemas; each failing
    block becomes one entry of ``errors`` instead of a call.
    """
    tools_by_name = None if tools is None else {t["name"]: t for t in tools}
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in _CALL_BLOCK.finditer(text):
        if not match.group(0).endswith(CALL_CLOSE):
            errors.append(f"unclosed {CALL_OPEN}: end each call with {CALL_CLOSE}")
            continue
        parsed = _parse_one(match.group(1), tools_by_name)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    content = _CALL_BLOCK.sub("", text).strip()
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
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

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
