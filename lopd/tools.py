"""Tools from plain Python functions: OpenAI-style schemas, validated calls, safe results.

``function_schema(fn)`` reads a typed, docstringed function and returns the tool schema lopd
shows the model (``{"name", "description", "parameters"}``, see ``lopd.types``):

- the description is the docstring's first paragraph; each argument's description comes from
  its Google-style ``Args:`` entry (``name: text``), a Sphinx ``:param name: text`` line, or
  ``typing.Annotated[T, "text"]``;
- types: ``str``, ``int``, ``float``, ``bool``, ``list[T]``, ``tuple[T, ...]``, ``dict[str, T]``,
  ``Literal[...]`` and ``Enum`` subclasses (an ``enum``), ``T | None`` (the type of ``T``);
- an argument without a default is required.

A function it cannot describe (no docstring, an argument without a type, ``*args``, a type with
no JSON form) raises ``ToolSchemaError``, a ``TypeError`` whose one-line message names the
function and the argument.

``ToolBox.call`` never raises: wrong arguments (checked against the schema, array items
included), an exception in the tool (``ToolError`` for expected failures such as an unknown id;
any other exception is reported with its type), a result that does not serialise to JSON, and
a result holding NaN or an infinity each come back as ``{"error": ...}``. A good result comes
back as plain JSON data (tuples become lists, dataclasses dicts, enums their values).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from lopd.chat import clip, validate_arguments
from lopd.types import ToolSchema

MAX_ERROR = 300  # characters of an exception message quoted back to the model


class ToolError(Exception):
    """An expected failure of a tool (unknown id, nothing to undo, ...): the message is what
    the model reads back as ``{"error": message}``."""


class ToolSchemaError(TypeError):
    """A function lopd cannot turn into a tool schema (the message says which and why)."""


_SCALARS: dict[type, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _enum_schema(values: list[Any], where: str) -> dict[str, Any]:
    kinds = {_SCALARS.get(type(v)) for v in values}
    if None in kinds or not values:
        raise ToolSchemaError(f"{where}: enum values must be str, int, float or bool")
    kind = kinds.pop() if len(kinds) == 1 else sorted(kinds)
    return {"type": kind, "enum": list(values)}


def json_schema(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON-schema property of one annotation (``where`` names it in errors)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        spec = json_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**spec, "description": notes[0]} if notes else spec
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if origin is typing.Literal:
        return _enum_schema(list(args), where)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([member.value for member in annotation], where)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            return json_schema(present[0], where)
        kinds = [json_schema(a, where) for a in present]
        if all(set(k) == {"type"} and isinstance(k["type"], str) for k in kinds):
            return {"type": [k["type"] for k in kinds]}
        raise ToolSchemaError(f"{where}: unions other than of plain types are not supported")
    if annotation in (list, tuple) or origin in (list, tuple):
        spec: dict[str, Any] = {"type": "array"}
        items = [a for a in args if a is not Ellipsis]
        if len(set(items)) == 1:
            spec["items"] = json_schema(items[0], where)
        elif items:
            raise ToolSchemaError(f"{where}: tuples must hold one type (tuple[T, ...])")
        return spec
    if annotation is dict or origin is dict:
        if args and args[0] is not str:
            raise ToolSchemaError(f"{where}: dictionary keys must be str (JSON objects)")
        return {"type": "object"}
    shown = getattr(annotation, "__name__", repr(annotation))
    raise ToolSchemaError(f"{where}: type {shown} has no JSON-schema form (use str, int, float, "
                          "bool, list[...], dict[str, ...], Literal[...], an Enum or T | None)")


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)"
                      r"\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary, argument descriptions) of a Google- or Sphinx-style docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or line.strip().startswith(":"):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    section, current, indent = None, None, 0
    for line in lines:
        if (sphinx := _SPHINX.match(line)) is not None:
            current, section = sphinx.group(1), None
            params[current] = sphinx.group(2).strip()
            continue
        if (heading := _SECTION.match(line)) is not None:
            section, current = heading.group(1), None
            continue
        if section not in ("Args", "Arguments", "Parameters") or not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        entry = _ARG_LINE.match(line)
        if entry is not None and (current is None or width <= indent):
            current, indent = entry.group(1), width
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary), params


def function_schema(fn: Callable, name: str | None = None) -> ToolSchema:
    """The OpenAI-style tool schema of ``fn`` (see the module docstring)."""
    label = name or getattr(fn, "__name__", None) or type(fn).__name__
    if not callable(fn):
        raise ToolSchemaError(f"tool {label!r} is not callable ({type(fn).__name__})")
    if not (fn.__doc__ or "").strip():
        raise ToolSchemaError(f"tool {label!r} has no docstring; its first line becomes the "
                              "description the model reads")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
    except (NameError, TypeError, ValueError) as error:
        raise ToolSchemaError(f"tool {label!r}: cannot read its signature ({error})") from None
    summary, docs = parse_docstring(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, param in signature.parameters.items():
        where = f"tool {label!r}, argument {key!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSchemaError(f"{where}: *args and **kwargs cannot be described; list "
                                  "the arguments")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolSchemaError(f"{where}: positional-only arguments cannot be passed by name")
        if key not in hints:
            raise ToolSchemaError(f"{where} has no type annotation")
        spec = json_schema(hints[key], where)
        if key in docs and "description" not in spec:
            spec["description"] = docs[key]
        properties[key] = spec
        if param.default is param.empty:
            required.append(key)
    return {"name": label, "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required}}


def _item_problems(name: str, arguments: dict[str, Any], schema: ToolSchema) -> list[str]:
    """Element types of array arguments (``validate_arguments`` checks the top level only)."""
    problems = []
    for key, spec in schema["parameters"]["properties"].items():
        value, items = arguments.get(key), spec.get("items")
        if not isinstance(value, list) or not items:
            continue
        probe = {"name": name, "parameters": {"type": "object", "properties": {"item": items}}}
        for index, element in enumerate(value):
            found = validate_arguments({"item": element}, probe)
            if found:
                problems.append(found[0].replace("argument 'item'", f"argument '{key}[{index}]'"))
                break
    return problems


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: dataclasses, enums, sets and tuples as plain JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _non_finite_path(value: Any) -> str | None:
    stack = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path or "the result"
        if isinstance(node, dict):
            stack.extend((f"{path}/{k}", v) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((f"{path}/{i}", v) for i, v in enumerate(node))
    return None


def plain_result(name: str, result: Any) -> Any:
    """``result`` as plain JSON data, or ``{"error": ...}`` when it cannot be sent back."""
    try:
        bad = _non_finite_path(dataclasses.asdict(result) if dataclasses.is_dataclass(result)
                               and not isinstance(result, type) else result)
        if bad is not None:
            return {"error": f"{name} returned a non-finite number at {bad}"}
        return json.loads(json.dumps(result, default=_plain, allow_nan=False))
    except (TypeError, ValueError, RecursionError, OverflowError) as error:
        return {"error": f"{name} returned a result that is not JSON data "
                         f"({type(error).__name__}: {clip(str(error), MAX_ERROR)})"}


_DESCRIBED: dict[tuple[Any, str], tuple[ToolSchema, dict[str, type[enum.Enum]]]] = {}


def _enum_arguments(fn: Callable) -> dict[str, type[enum.Enum]]:
    """Arguments typed with an ``Enum``: the model sends values, the tool gets members."""
    found = {}
    for key, hint in typing.get_type_hints(fn).items():
        for option in (hint, *typing.get_args(hint)):
            if isinstance(option, type) and issubclass(option, enum.Enum):
                found[key] = option
    return found


def _described(fn: Callable, name: str) -> tuple[ToolSchema, dict[str, type[enum.Enum]]]:
    """(schema, enum arguments) of ``fn``, cached per underlying function (a method's schema
    is the same for every instance of its class)."""
    key = (getattr(fn, "__func__", fn), name)
    try:
        return _DESCRIBED[key]
    except TypeError:  # an unhashable callable object: describe it every time
        return function_schema(fn, name), _enum_arguments(fn)
    except KeyError:
        pass
    _DESCRIBED[key] = (function_schema(fn, name), _enum_arguments(fn))
    return _DESCRIBED[key]


class ToolBox:
    """Named callables with their schemas; ``call`` validates, runs and cleans up results."""

    def __init__(self, functions: dict[str, Callable] | Iterable[Callable]):
        if not isinstance(functions, dict):
            functions = {getattr(f, "__name__", repr(f)): f for f in functions}
        if not functions:
            raise ToolSchemaError("a tool set needs at least one tool")
        self.functions = dict(functions)
        self.schemas, self._enums = {}, {}
        for name, fn in self.functions.items():
            self.schemas[name], self._enums[name] = _described(fn, name)

    def tool_schemas(self) -> list[ToolSchema]:
        return [json.loads(json.dumps(s)) for s in self.schemas.values()]

    def call(self, name: Any, arguments: Any) -> Any:
        """Run one tool; every failure comes back as ``{"error": ...}`` (never raises)."""
        if not isinstance(name, str) or name not in self.functions:
            known = ", ".join(self.functions)
            return {"error": f"unknown tool '{clip(str(name))}' (available: {known})"}
        schema = self.schemas[name]
        problems = validate_arguments(arguments, schema)
        problems = problems or _item_problems(name, arguments, schema)
        if problems:
            return {"error": "; ".join(problems)}
        try:
            values = {key: self._enums[name][key](value) if key in self._enums[name] else value
                      for key, value in arguments.items()}
            result = self.functions[name](**values)
        except ToolError as error:
            return {"error": clip(str(error), MAX_ERROR)}
        except Exception as error:  # noqa: BLE001 - a tool's bug must not end the episode
            return {"error": f"{name} failed: {type(error).__name__}: "
                             f"{clip(str(error), MAX_ERROR)}"}
        return plain_result(name, result)


__all__ = ["ToolBox", "ToolError", "ToolSchemaError", "function_schema", "json_schema",
           "parse_docstring", "plain_result"]
