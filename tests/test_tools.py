"""Tools from Python functions: derived schemas, and calls whose every failure is an error."""

import dataclasses
import enum
import math
from typing import Annotated, Literal

import pytest

from lopd.tools import ToolBox, ToolError, ToolSchemaError, function_schema, parse_docstring


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def convert(value: float, unit: Literal["m", "ft"], places: int = 2,
            note: str | None = None) -> dict:
    """Convert a length.

    Longer explanation that is not part of the summary.

    Args:
        value: The length to convert.
        unit: Unit of ``value``;
            either metres or feet.
        places: Decimal places of the result.
    """
    factor = 3.28084 if unit == "m" else 1 / 3.28084
    return {"value": round(value * factor, places), "note": note}


def paint(colour: Colour, tags: list[str], weights: dict[str, float],
          size: Annotated[int, "Brush size in mm."] = 3) -> str:
    """Paint something.

    :param colour: The colour to use.
    :param tags: Labels.
    """
    return f"{colour.value}:{','.join(tags)}:{size}:{len(weights)}"


def test_schema_types_required_and_descriptions():
    schema = function_schema(convert)
    assert schema["name"] == "convert"
    assert schema["description"] == "Convert a length."
    params = schema["parameters"]
    assert params["required"] == ["value", "unit"]
    props = params["properties"]
    assert props["value"] == {"type": "number", "description": "The length to convert."}
    assert props["unit"]["enum"] == ["m", "ft"] and props["unit"]["type"] == "string"
    assert props["unit"]["description"] == "Unit of ``value``; either metres or feet."
    assert props["places"]["type"] == "integer"
    assert props["note"] == {"type": "string"}  # T | None -> T, optional, no description


def test_schema_sphinx_enum_containers_and_annotated():
    props = function_schema(paint)["parameters"]["properties"]
    assert props["colour"] == {"type": "string", "enum": ["red", "blue"],
                               "description": "The colour to use."}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "Labels."}
    assert props["weights"]["type"] == "object"
    assert props["size"] == {"type": "integer", "description": "Brush size in mm."}


def test_docstring_parser_keeps_summary_only():
    summary, params = parse_docstring("Do it\nnow.\n\nArgs:\n    a (int): first\n    b: second\n")
    assert summary == "Do it now."
    assert params == {"a": "first", "b": "second"}


def _no_doc(x: int) -> int:
    return x


def _untyped(x):
    """Untyped."""
    return x


def _star(*values: int) -> int:
    """Star."""
    return sum(values)


def _object_arg(x: object) -> int:
    """Object."""
    return 0


@pytest.mark.parametrize("fn, words", [
    (_no_doc, "no docstring"), (_untyped, "no type annotation"), (_star, "*args"),
    (_object_arg, "no JSON-schema form"), (42, "not callable"),
])
def test_schema_it_cannot_derive_is_a_one_line_type_error(fn, words):
    with pytest.raises(ToolSchemaError) as caught:
        function_schema(fn)
    assert isinstance(caught.value, TypeError)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def _raises(x: int) -> int:
    """Always fails."""
    raise RuntimeError("boom")


def _expected(x: int) -> int:
    """Fails as designed."""
    raise ToolError(f"no record {x}")


def _not_json(x: int) -> object:
    """Returns an object."""
    return object()


def _nan(x: int) -> dict:
    """Returns NaN."""
    return {"values": [1.0, math.nan]}


def _infinite(x: int) -> float:
    """Returns infinity."""
    return math.inf


@dataclasses.dataclass
class Point:
    x: int
    y: tuple


def _point(x: int) -> Point:
    """Returns a dataclass."""
    return Point(x, (1, 2))


@pytest.fixture
def box():
    return ToolBox([convert, paint, _raises, _expected, _not_json, _nan, _infinite, _point])


def test_good_calls_return_plain_json(box):
    assert box.call("convert", {"value": 1, "unit": "m", "places": 1}) == {"value": 3.3, "note": None}
    assert box.call("paint", {"colour": "blue", "tags": ["a", "b"], "weights": {}}) == "blue:a,b:3:0"
    assert box.call("_point", {"x": 4}) == {"x": 4, "y": [1, 2]}


@pytest.mark.parametrize("name, arguments, words", [
    ("convert", {"unit": "m"}, "missing required argument 'value'"),
    ("convert", {"value": "one", "unit": "m"}, "must be number"),
    ("convert", {"value": 1, "unit": "yd"}, "must be one of"),
    ("convert", {"value": 1, "unit": "m", "speed": 2}, "unknown argument 'speed'"),
    ("convert", ["not", "a", "dict"], "must be a JSON object"),
    ("paint", {"colour": "red", "tags": ["a", 3], "weights": {}}, "'tags[1]' must be string"),
    ("nope", {}, "unknown tool 'nope'"),
    ("_raises", {"x": 1}, "_raises failed: RuntimeError: boom"),
    ("_expected", {"x": 7}, "no record 7"),
    ("_not_json", {"x": 1}, "not JSON data"),
    ("_nan", {"x": 1}, "non-finite number at /values/1"),
    ("_infinite", {"x": 1}, "non-finite number"),
    ("convert", {"value": math.nan, "unit": "m"}, "finite"),
])
def test_every_failure_is_an_error_observation(box, name, arguments, words):
    result = box.call(name, arguments)
    assert isinstance(result, dict) and set(result) == {"error"}
    assert words in result["error"]


def test_enum_arguments_arrive_as_members():
    seen = []

    def pick(colour: Colour) -> str:
        """Pick a colour."""
        seen.append(colour)
        return colour.name

    assert ToolBox([pick]).call("pick", {"colour": "red"}) == "RED"
    assert seen == [Colour.RED]
