"""An undo log for a JSON-like state: a failed tool call is rolled back without a copy.

``track(state)`` returns a deep copy of ``state`` whose dicts and lists are ``TrackedDict`` and
``TrackedList``: subclasses of ``dict`` and ``list``, so reading, ``==``, ``isinstance`` and
``json.dumps`` behave as before, and reads cost what they cost on plain containers. While the
``Journal`` records (``begin()`` .. ``commit()``/``undo()``), each mutation first logs how to
undo it: a dict key's old value (or its absence), a list's old length on ``append``/``extend``,
a shallow copy of the list for the other list operations (sort, remove, slices: they cost the
length of that one list anyway). ``undo()`` replays the log backwards. A call therefore costs
what it changes, not the size of the state, however many calls came before it.

Containers a call stores are plain until the call ends; ``commit()`` turns them into tracked
ones (so a tool may build a dict, store it and keep filling it) and returns the paths of any
NaN or infinity among the values the call wrote, which is what the environments reject.
Copies of tracked containers (``copy.copy``, ``copy.deepcopy``, pickling) are plain.

Not logged: mutations of objects other than dicts and lists inside the state (sets, custom
objects: a JSON-like state has none) and mutations made outside ``begin()``..``commit()``.
Such outside mutations may store plain containers; they mark the journal ``dirty``, and
``adopt(state)`` (which the environments call before each call) then puts tracked copies in
their place.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Self

_ABSENT = object()


class Journal:
    """The undo records of the call in progress (none while not recording)."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.recording = False
        self.dirty = False  # changed outside a call: may hold plain containers

    def adopt(self, state: Any) -> Any:
        """``state`` with every plain dict/list in it replaced by a tracked copy (the root is
        replaced only if it is not tracked here). Costs nothing unless ``state`` is not tracked
        by this journal or the journal is ``dirty``; then one walk of the state."""
        tracked = (TrackedDict, TrackedList)
        if type(state) in tracked and state._journal is self and not self.dirty:
            return state
        self.dirty = False
        root = _track(state, self)
        stack = [root] if type(root) in tracked else []
        while stack:
            node = stack.pop()
            keys = list(node.keys()) if isinstance(node, dict) else range(len(node))
            for key in keys:
                child = node[key]
                if _foreign(child, self):
                    child = _track(child, self)
                    _store(node, key, child)
                if type(child) in tracked:
                    stack.append(child)
        return root

    def begin(self) -> None:
        self.log.clear()
        self.recording = True

    def changed(self) -> bool:
        return bool(self.log)

    def undo(self) -> None:
        """Put every container the call changed back as it was; stop recording."""
        self.recording = False
        for record in reversed(self.log):
            kind, target, *rest = record
            if kind == "key":
                key, old = rest
                if old is _ABSENT:
                    dict.pop(target, key, None)
                else:
                    dict.__setitem__(target, key, old)
            elif kind == "items":
                dict.clear(target)
                dict.update(target, rest[0])
            elif kind == "length":
                list.__delitem__(target, slice(rest[0], None))
            else:  # "list"
                list.__setitem__(target, slice(None), rest[0])
        self.log.clear()

    def commit(self) -> list[tuple]:
        """Stop recording, track what the call stored; paths of non-finite values it wrote.
        The log is kept until the next ``begin()``: the call may still be undone."""
        self.recording = False
        bad: list[tuple] = []
        for kind, target, *rest in self.log:
            if kind == "key":
                keys = [rest[0]] if rest[0] in target else []
            elif kind == "length":
                keys = range(min(rest[0], len(target)), len(target))
            else:
                keys = list(target.keys()) if isinstance(target, dict) else range(len(target))
            for key in keys:
                value = target[key]
                if _foreign(value, self):
                    _store(target, key, _track(value, self))
                bad += [(key, *path) for path in non_finite_paths(target[key])]
        return bad

    def note(self, record: tuple) -> None:
        self.log.append(record)


def track(state: Any, journal: Journal) -> Any:
    """A tracked deep copy of a JSON-like ``state`` (see the module docstring)."""
    return _track(copy.deepcopy(state), journal)


def _foreign(node: Any, journal: Journal) -> bool:
    """A plain dict or list, or one tracked by another journal (exact types: a ``defaultdict``
    or other subclass is left as it is, and not journaled)."""
    kind = type(node)
    return kind in (dict, list) or (kind in (TrackedDict, TrackedList)
                                     and node._journal is not journal)


def _track(node: Any, journal: Journal) -> Any:
    if not _foreign(node, journal):
        return node
    if isinstance(node, dict):
        return TrackedDict(journal, {k: _track(v, journal) for k, v in node.items()})
    return TrackedList(journal, [_track(v, journal) for v in node])


def _store(target: Any, key: Any, value: Any) -> None:
    (dict.__setitem__ if isinstance(target, dict) else list.__setitem__)(target, key, value)


def non_finite_paths(value: Any) -> list[tuple]:
    """Paths of every NaN or infinite float in a JSON-like value (iterative walk)."""
    found, stack = [], [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            found.append(path)
        elif isinstance(node, dict):
            stack.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((path + (i,), v) for i, v in enumerate(node))
    return found


class TrackedDict(dict):
    """A dict whose mutations are logged in its journal while it records."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: dict) -> None:
        dict.__init__(self, items)
        self._journal = journal

    def _key(self, key: Any) -> None:
        if self._journal.recording:
            self._journal.note(("key", self, key, dict.get(self, key, _ABSENT)))
        else:
            self._journal.dirty = True

    def _all(self) -> None:
        if self._journal.recording:
            self._journal.note(("items", self, dict(self)))
        else:
            self._journal.dirty = True

    def __setitem__(self, key: Any, value: Any) -> None:
        self._key(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self._key(key)
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._key(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple:
        self._all()
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._key(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._all()
        dict.update(self, *args, **kwargs)

    def clear(self) -> None:
        self._all()
        dict.clear(self)

    def __ior__(self, other: Any) -> Self:
        self.update(other)
        return self

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return dict, (dict(self),)


class TrackedList(list):
    """A list whose mutations are logged in its journal while it records."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal, items: list) -> None:
        list.__init__(self, items)
        self._journal = journal

    def _grow(self) -> None:
        if self._journal.recording:
            self._journal.note(("length", self, len(self)))
        else:
            self._journal.dirty = True

    def _all(self) -> None:
        if self._journal.recording:
            self._journal.note(("list", self, list(self)))
        else:
            self._journal.dirty = True

    def append(self, value: Any) -> None:
        self._grow()
        list.append(self, value)

    def extend(self, values: Any) -> None:
        self._grow()
        list.extend(self, values)

    def __iadd__(self, values: Any) -> Self:
        self.extend(values)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        self._all()
        list.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        self._all()
        list.__delitem__(self, index)

    def __imul__(self, times: Any) -> Self:
        self._all()
        list.__imul__(self, times)
        return self

    def insert(self, index: Any, value: Any) -> None:
        self._all()
        list.insert(self, index, value)

    def pop(self, *index: Any) -> Any:
        self._all()
        return list.pop(self, *index)

    def remove(self, value: Any) -> None:
        self._all()
        list.remove(self, value)

    def clear(self) -> None:
        self._all()
        list.clear(self)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._all()
        list.sort(self, *args, **kwargs)

    def reverse(self) -> None:
        self._all()
        list.reverse(self)

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return list, (list(self),)


__all__ = ["Journal", "TrackedDict", "TrackedList", "track"]
