"""References to the user's code by import path: ``module:attr`` or ``file.py:attr``.

Plugin suites (``lopd.envs.plugins``) and task files (``lopd.envs.taskfile``) both name the
user's factories, tool sets and environment makers this way; resolving them lives here, below
both, so neither imports the other for it. Every failure is a ``PluginError`` (a
``ValueError``) with a one-line message naming the reference.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from lopd.chat import clip


class PluginError(ValueError):
    """A plugin that cannot be imported or used (one-line message naming it)."""


class PluginTypeError(PluginError, TypeError):
    """A plugin that returned or built something of the wrong type."""


def is_plugin_name(name: str) -> bool:
    """``module:attr`` or ``file.py:attr`` (a built-in suite name has no colon)."""
    head, _, tail = name.partition(":")
    return bool(head) and bool(tail)


def one_line_error(error: BaseException) -> str:
    return clip(" ".join(f"{type(error).__name__}: {error}".split()), 300)


def _import_file(path: Path, ref: str) -> Any:
    if not path.is_file():
        raise PluginError(f"plugin {ref!r}: no file {path}")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"lopd_plugin_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginError(f"plugin {ref!r}: importing {path} failed ({one_line_error(error)})") from error
    return module


def _import_module(name: str, ref: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        cwd = str(Path.cwd())
        if name.split(".")[0] == missing.split(".")[0] and cwd not in sys.path:
            sys.path.insert(0, cwd)  # as `python -m` would: modules of the working directory
            return _import_module(name, ref)
        raise PluginError(f"plugin {ref!r}: cannot import {name!r} ({one_line_error(error)}); run from "
                          "the directory that holds it or install it") from error
    except Exception as error:
        raise PluginError(f"plugin {ref!r}: importing {name!r} failed ({one_line_error(error)})") from error


def resolve(ref: str, base_dir: Path | None = None) -> Any:
    """The object at ``module:attr`` or ``file.py:attr`` (``attr`` may be dotted); a relative
    file path is read from ``base_dir`` (default: the working directory)."""
    module_part, _, attr = ref.partition(":")
    if not module_part or not attr:
        raise PluginError(f"plugin {ref!r}: expected 'module:name' or 'file.py:name'")
    if module_part.endswith(".py") or "/" in module_part:
        path = Path(module_part).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        module = _import_file(path.resolve(), ref)
    else:
        module = _import_module(module_part, ref)
    found: Any = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise PluginError(f"plugin {ref!r}: {module_part} has no attribute {attr!r}")
        found = getattr(found, part)
    return found
