"""Parent-side housekeeping for the sandbox: deleting its directories, its cgroup.

``remove_tree(path)`` deletes a directory tree whatever the candidate left in it (deep
nesting, unreadable modes, many files) and never raises: it walks the tree with a constant
number of descriptors (down by name, back up through ``..``), so depth costs neither recursion
nor file descriptors; if that fails it falls back to ``rm -rf``. It returns whether the path is
gone.

``make_cgroup(memory_mb, max_procs)`` creates a cgroup v2 child of this process's own cgroup
with ``memory.max`` (swap off) and ``pids.max``, when the hierarchy is cgroup v2 with both
controllers delegated and writable; otherwise it returns None and the sandbox falls back to
rlimits. ``remove_cgroup`` kills what is left in it and removes it, never raising.

``live_processes(pgid, uid)`` lists the sandbox's processes (its process group, and every
process of its private uid) that have not exited yet (zombies excluded): SIGKILL is
asynchronous, so a killed process can still be running its exit for a few milliseconds on a
loaded machine, and the sandbox waits on this list (bounded) before it reports a run as
finished.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import time
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _empty_directory(fd: int) -> str | None:
    """Delete the non-directories in the directory ``fd``; returns one subdirectory's name."""
    for entry in list(os.scandir(fd)):
        if entry.is_dir(follow_symlinks=False):
            return entry.name
        os.unlink(entry.name, dir_fd=fd)
    return None


def _remove_walk(path: str) -> None:
    fd = os.open(path, _DIR_FLAGS)
    names: list[str] = []
    try:
        while True:
            sub = _empty_directory(fd)
            if sub is not None:
                try:
                    os.chmod(sub, stat.S_IRWXU, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    pass
                child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def remove_tree(path: str | os.PathLike) -> bool:
    """Delete ``path`` (a directory tree or a file); never raises; True if it is gone."""
    path = os.fspath(path)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            _remove_walk(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return True
    except (OSError, RecursionError, ValueError):
        pass
    if not os.path.lexists(path):
        return True
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", path], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        pass
    return not os.path.lexists(path)


def _own_cgroup_v2() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        controllers = (_CGROUP_ROOT / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if not {"memory", "pids"} <= set(controllers):
        return None
    for line in lines:
        if line.startswith("0::"):
            return _CGROUP_ROOT / line[3:].lstrip("/")
    return None


def make_cgroup(memory_mb: int, max_procs: int) -> str | None:
    """A fresh cgroup v2 capping memory and processes, or None where none can be made."""
    parent = _own_cgroup_v2()
    if parent is None:
        return None
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            return None  # the delegating manager did not enable them for our children
        group = parent / f"lopd-sbx-{secrets.token_hex(6)}"
        group.mkdir()
    except OSError:
        return None
    try:
        (group / "memory.max").write_text(str(memory_mb * 1024 * 1024))
        (group / "pids.max").write_text(str(max_procs))
        swap = group / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")
    except OSError:
        remove_cgroup(str(group))
        return None
    return str(group)


def remove_cgroup(group: str | None) -> None:
    """Kill every process left in ``group`` and remove it; never raises."""
    if not group or not os.path.isdir(group):
        return
    try:
        kill = Path(group, "cgroup.kill")
        if kill.exists():
            kill.write_text("1")
        else:
            for pid in Path(group, "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
    except OSError:
        pass
    for _ in range(50):
        try:
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def live_processes(pgid: int, uid: int | None = None) -> list[int]:
    """Pids in process group ``pgid`` or (with ``uid``) of real uid ``uid`` that have not
    exited (zombies excluded), read from ``/proc``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat_line = Path(entry.path, "stat").read_text()
            owner = None if uid is None else _real_uid(entry.path)
        except (OSError, ValueError):
            continue
        fields = stat_line[stat_line.rindex(")") + 2:].split()
        state, group = fields[0], int(fields[2])
        if state not in ("Z", "X") and (group == pgid or (uid is not None and owner == uid)):
            found.append(int(entry.name))
    return found


def _real_uid(proc_dir: str) -> int:
    for line in Path(proc_dir, "status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError(f"no Uid line in {proc_dir}/status")
