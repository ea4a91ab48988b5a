"""Plain data across a process boundary: a tagged JSON form that keeps Python's built-in types.

Sandboxed candidate code reports the values its function returned, and the trusted side
compares them. What crosses the boundary must be data, never objects with behaviour: ``encode``
accepts only the exact built-in types (``None``, ``bool``, ``int``, ``float``, ``str``,
``bytes``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``; no subclasses, so no custom
``__eq__``), and ``decode`` rebuilds only those types from the tagged form, checking every
node. ``decode`` raises ``ValueError`` on anything malformed (wrong tags, unhashable keys, too
deep, too large) and nothing else.

Form: ``None``/``True``/``False`` are JSON literals; every other value is a pair
``[tag, payload]``: ``"i"`` int as a hex string (exact at any size, no decimal digit limit),
``"f"`` float as ``float.hex`` (keeps inf and nan), ``"s"`` str, ``"b"`` bytes as hex,
``"l"``/``"t"``/``"set"``/``"fs"`` a list of items, ``"d"`` a list of ``[key, value]`` pairs,
``"r"`` a range as three hex ints. An iterator (generator, ``map``, ``zip``...) is drained
(within the size budget) into ``"it"`` and comes back as an iterator over a list, so it
compares as the original would (an iterator is not equal to a list) and can be consumed.

This file runs on both sides: the sandbox prepends its source to the harness (so it sticks to
the standard library and Python 3.9 syntax, and has no ``__future__`` import).
"""

import json

MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_INT_HEX_DIGITS = 100_000
_SEQUENCE_TAGS = {list: "l", tuple: "t", set: "set", frozenset: "fs"}
_SEQUENCE_TYPES = {"l": list, "t": tuple, "set": set, "fs": frozenset}


class _Budget:
    def __init__(self, max_nodes):
        self.left = max_nodes

    def spend(self):
        self.left -= 1
        if self.left < 0:
            raise ValueError("too many values")


def encode(value, max_depth=MAX_DEPTH, max_nodes=MAX_NODES):
    """The tagged form of ``value``; ``TypeError`` for anything but exact built-in data."""
    return _encode(value, max_depth, _Budget(max_nodes))


def _encode(value, depth, budget):
    budget.spend()
    if depth < 0:
        raise ValueError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return ["i", hex(value)]
    if kind is float:
        return ["f", float.hex(value)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["b", value.hex()]
    if kind in _SEQUENCE_TAGS:
        items = sorted(value, key=repr) if kind in (set, frozenset) else value
        return [_SEQUENCE_TAGS[kind], [_encode(item, depth - 1, budget) for item in items]]
    if kind is dict:
        return ["d", [[_encode(k, depth - 1, budget), _encode(v, depth - 1, budget)]
                      for k, v in dict.items(value)]]
    if kind is range:
        return ["r", [hex(value.start), hex(value.stop), hex(value.step)]]
    if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):  # generator, map, zip, ...
        items = []
        for item in value:
            items.append(_encode(item, depth - 1, budget))
        return ["it", items]
    raise TypeError(f"not plain data: {kind.__name__}")


def decode(data, max_depth=MAX_DEPTH, max_nodes=MAX_NODES):
    """The value for a tagged form; ``ValueError`` if it is malformed in any way."""
    try:
        return _decode(data, max_depth, _Budget(max_nodes))
    except ValueError:
        raise
    except (TypeError, KeyError, IndexError, OverflowError, RecursionError, MemoryError) as err:
        raise ValueError(f"malformed plain data: {type(err).__name__}") from None


def _decode(data, depth, budget):
    budget.spend()
    if depth < 0:
        raise ValueError("value nested too deeply")
    if data is None or type(data) is bool:
        return data
    if type(data) is not list or len(data) != 2 or type(data[0]) is not str:
        raise ValueError("malformed plain data")
    tag, payload = data
    if tag in ("i", "f", "s", "b") and type(payload) is not str:
        raise ValueError("malformed plain data")
    if tag == "i":
        if len(payload) > MAX_INT_HEX_DIGITS:
            raise ValueError("integer too large")
        return int(payload, 16)
    if tag == "f":
        return float.fromhex(payload)
    if tag == "s":
        return payload
    if tag == "b":
        return bytes.fromhex(payload)
    if type(payload) is not list:
        raise ValueError("malformed plain data")
    if tag in _SEQUENCE_TYPES:
        return _SEQUENCE_TYPES[tag](_decode(item, depth - 1, budget) for item in payload)
    if tag == "it":
        return iter([_decode(item, depth - 1, budget) for item in payload])
    if tag == "r" and len(payload) == 3 and all(type(x) is str for x in payload):
        if any(len(x) > MAX_INT_HEX_DIGITS for x in payload):
            raise ValueError("integer too large")
        return range(*(int(x, 16) for x in payload))
    if tag == "d":
        pairs = []
        for pair in payload:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed plain data")
            pairs.append((_decode(pair[0], depth - 1, budget), _decode(pair[1], depth - 1, budget)))
        return dict(pairs)
    raise ValueError("unknown tag")


def loads_json(text):
    """``json.loads`` that raises only ``ValueError`` (deep nesting, huge numbers, bad text)."""
    try:
        return json.loads(text)
    except ValueError:
        raise
    except (RecursionError, MemoryError, TypeError, OverflowError) as err:
        raise ValueError(f"unreadable JSON: {type(err).__name__}") from None
