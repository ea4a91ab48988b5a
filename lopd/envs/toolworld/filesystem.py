"""ToolWorld domain: a small in-memory file system (absolute paths, files and directories).

Tiers: 1 = one call with the full path in the goal; 2 = find a file by name, then delete or
move it; 3 = copy a file to a new path (find, read, write) or create a directory and move a
file into it; 4 = copy a file into a new directory; 5 = append one file to another (two finds,
two reads, one write).
"""

from __future__ import annotations

import posixpath
import random

from lopd.envs.toolworld.base import Check, Domain, Param, TaskSpec, ToolError, pick, tool

_PATH = Param("string", "Absolute path, e.g. '/home/ana/notes.txt'.")
_USERS = ["ana", "ben", "chen", "dara", "eli", "fay", "gus", "hana"]
_PROJECTS = ["alpha", "beacon", "comet", "delta", "ember", "falcon", "granite", "harbor"]
_FILES = [
    ("notes.txt", "meeting at 10"), ("todo.md", "- buy milk"), ("report.txt", "Q3 revenue up"),
    ("budget.csv", "item,cost"), ("old.log", "error 42"), ("draft.txt", "chapter one"),
    ("ideas.md", "solar kite"), ("config.yaml", "debug: false"), ("readme.md", "hello"),
    ("data.json", "{}"), ("plan.txt", "launch in may"), ("summary.txt", "all good"),
    ("invoice.pdf", "total 120"), ("photo.jpg", "<binary>"), ("script.py", "print(1)"),
]


class FileSystem(Domain):
    name = "filesystem"
    description = "a file system"
    example = ("list_dir", {"path": "/home"})

    def _norm(self, path: str) -> str:
        if not path.startswith("/"):
            raise ToolError(f"'{path}' is not an absolute path")
        return posixpath.normpath(path)

    def _parent_exists(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.state["dirs"]:
            raise ToolError(f"directory '{parent}' does not exist")

    def _file(self, path: str) -> str:
        path = self._norm(path)
        if path not in self.state["files"]:
            raise ToolError(f"no such file '{path}'")
        return path

    @tool("List the files and directories directly inside a directory.", path=_PATH)
    def list_dir(self, path: str) -> dict:
        path = self._norm(path)
        if path not in self.state["dirs"]:
            raise ToolError(f"no such directory '{path}'")
        dirs = sorted(d for d in self.state["dirs"] if d != path and posixpath.dirname(d) == path)
        files = sorted(f for f in self.state["files"] if posixpath.dirname(f) == path)
        return {"path": path, "dirs": dirs, "files": files}

    @tool("Find files whose file name contains the given text; returns their full paths.",
          name=Param("string", "File name or part of it, e.g. 'notes'."))
    def search_files(self, name: str) -> dict:
        found = sorted(f for f in self.state["files"] if name in posixpath.basename(f))
        return {"matches": found}

    @tool("Read a file's content.", path=_PATH)
    def read_file(self, path: str) -> dict:
        path = self._file(path)
        return {"path": path, "content": self.state["files"][path]}

    @tool("Write text to a file, creating it or replacing its content.", path=_PATH,
          content=Param("string", "The full new content of the file.", max_length=20_000))
    def write_file(self, path: str, content: str) -> dict:
        path = self._norm(path)
        if path in self.state["dirs"]:
            raise ToolError(f"'{path}' is a directory")
        self._parent_exists(path)
        self.state["files"][path] = content
        return {"path": path, "size": len(content)}

    @tool("Delete a file.", path=_PATH)
    def delete_file(self, path: str) -> dict:
        path = self._file(path)
        del self.state["files"][path]
        return {"path": path, "deleted": True}

    @tool("Move a file. If the destination is an existing directory, the file keeps its name.",
          source=Param("string", "Absolute path of the file to move."),
          destination=Param("string", "Absolute path of the new file, or of a directory."))
    def move_file(self, source: str, destination: str) -> dict:
        source = self._file(source)
        destination = self._norm(destination)
        if destination in self.state["dirs"]:
            destination = posixpath.join(destination, posixpath.basename(source))
        self._parent_exists(destination)
        if destination in self.state["files"]:
            raise ToolError(f"'{destination}' already exists")
        self.state["files"][destination] = self.state["files"].pop(source)
        return {"source": source, "destination": destination}

    @tool("Create a directory (its parent must exist).", path=_PATH)
    def make_dir(self, path: str) -> dict:
        path = self._norm(path)
        if path in self.state["dirs"] or path in self.state["files"]:
            raise ToolError(f"'{path}' already exists")
        self._parent_exists(path)
        self.state["dirs"][path] = True
        return {"path": path, "created": True}

    def domain_problems(self) -> list[str]:
        dirs, files = self.state["dirs"], self.state["files"]
        problems = []
        for path in dirs:
            if path != "/" and (not _is_clean(path) or posixpath.dirname(path) not in dirs):
                problems.append(f"directory {path!r} is not under an existing directory")
        for path, content in files.items():
            if not _is_clean(path) or posixpath.dirname(path) not in dirs or path in dirs:
                problems.append(f"file {path!r} is not in an existing directory")
            if not isinstance(content, str):
                problems.append(f"file {path!r} has no text content")
        return problems

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        state = _make_state(rng)
        maker = {1: _tier1, 2: _tier2, 3: _tier3, 4: _tier4, 5: _tier5}[tier]
        return maker(rng, state, tier)


def _is_clean(path: str) -> bool:
    """An absolute, normalised path (no trailing slash, no '.' or '..' parts)."""
    return path.startswith("/") and posixpath.normpath(path) == path


def _make_state(rng: random.Random) -> dict:
    users, projects = rng.sample(_USERS, 3), rng.sample(_PROJECTS, 2)
    dirs = ["/", "/home", "/projects", "/archive"]
    dirs += [f"/home/{u}" for u in users] + [f"/home/{u}/docs" for u in users[:2]]
    dirs += [f"/projects/{p}" for p in projects]
    files = {}
    for name, content in rng.sample(_FILES, 8):
        folder = rng.choice(dirs[1:])
        files[posixpath.join(folder, name)] = f"{content} ({rng.randrange(1, 99)})"
    return {"dirs": {d: True for d in dirs}, "files": files}


def _guards(touched_files, allow_new_dir=False):
    files = Check("other_files", "no other file changed", "same_except", ("files",),
                  list(touched_files), guard=True)
    dirs = Check("dirs_kept", "no directory was removed", "kept_except" if allow_new_dir
                 else "same_except", ("dirs",), [], guard=True)
    return [files, dirs]


def _new_dir(rng, state):
    base = rng.choice([d for d in state["dirs"] if d not in ("/",)])
    return posixpath.join(base, rng.choice(["backup", "old", "shared", "2024", "review"]))


def _tier1(rng, state, tier):
    files = state["files"]
    action = rng.choice(["mkdir", "delete", "write"])
    if action == "mkdir":
        path = _new_dir(rng, state)
        goal = pick(rng, ["Create the directory {p}.", "Make a new folder at {p}.",
                          "I need an empty directory {p}."], p=path)
        checks = [Check("dir_exists", f"{path} exists", "eq", ("dirs", path), True),
                  *_guards([], allow_new_dir=True)]
        return TaskSpec(goal, state, checks, [("make_dir", {"path": path})], tier)
    if action == "delete":
        path = rng.choice(sorted(files))
        goal = pick(rng, ["Delete the file {p}.", "Remove {p}.", "{p} is obsolete; delete it."],
                    p=path)
        checks = [Check("deleted", f"{path} is gone", "missing", ("files", path)),
                  *_guards([path])]
        return TaskSpec(goal, state, checks, [("delete_file", {"path": path})], tier)
    folder = rng.choice(sorted(state["dirs"]))
    path = posixpath.join(folder, rng.choice(["memo.txt", "hello.txt", "list.md"]))
    text = rng.choice(["call the bank", "ship on friday", "review the draft", "book a room"])
    goal = pick(rng, ["Write '{t}' to the file {p}.", "Create {p} containing the text '{t}'.",
                      "Save the note '{t}' as {p}."], t=text, p=path)
    checks = [Check("written", f"{path} contains '{text}'", "eq", ("files", path), text),
              *_guards([path])]
    return TaskSpec(goal, state, checks, [("write_file", {"path": path, "content": text})], tier)


def _tier2(rng, state, tier):
    path = rng.choice(sorted(state["files"]))
    name = posixpath.basename(path)
    search = ("search_files", {"name": name})
    if rng.random() < 0.5:
        goal = pick(rng, ["Delete the file named {n}; I do not know which folder it is in.",
                          "Find {n} and remove it.", "Get rid of {n} wherever it is."], n=name)
        checks = [Check("deleted", f"{path} is gone", "missing", ("files", path)),
                  *_guards([path])]
        return TaskSpec(goal, state, checks, [search, ("delete_file", {"path": path})], tier)
    target = rng.choice([d for d in sorted(state["dirs"]) if d != posixpath.dirname(path)])
    new = posixpath.join(target, name)
    goal = pick(rng, ["Move the file {n} into the directory {d}.", "Find {n} and move it to {d}.",
                      "{n} belongs in {d}; move it there."], n=name, d=target)
    checks = [Check("moved", f"{new} holds the file", "eq", ("files", new), state["files"][path]),
              Check("old_gone", f"{path} is gone", "missing", ("files", path)),
              *_guards([path, new])]
    return TaskSpec(goal, state, checks, [search, ("move_file", {"source": path,
                                                                 "destination": new})], tier)


def _copy_calls(path, new, content):
    return [("search_files", {"name": posixpath.basename(path)}), ("read_file", {"path": path}),
            ("write_file", {"path": new, "content": content})]


def _tier3(rng, state, tier):
    path = rng.choice(sorted(state["files"]))
    name, content = posixpath.basename(path), state["files"][path]
    if rng.random() < 0.5:
        target = rng.choice([d for d in sorted(state["dirs"]) if d != posixpath.dirname(path)])
        new = posixpath.join(target, "copy_of_" + name)
        goal = pick(rng, ["Make a copy of {n} at {p}.", "Copy the file {n} to {p}.",
                          "Duplicate {n}: the copy should be {p}."], n=name, p=new)
        checks = [Check("copied", f"{new} has the content of {name}", "eq", ("files", new),
                        content),
                  Check("original_kept", f"{path} unchanged", "unchanged", ("files", path),
                        guard=True),
                  *_guards([new])]
        return TaskSpec(goal, state, checks, _copy_calls(path, new, content), tier)
    folder = _new_dir(rng, state)
    new = posixpath.join(folder, name)
    goal = pick(rng, ["Create the directory {d} and move {n} into it.",
                      "Make a folder {d}, then move the file {n} there."], d=folder, n=name)
    checks = [Check("moved", f"{new} holds the file", "eq", ("files", new), content),
              Check("old_gone", f"{path} is gone", "missing", ("files", path)),
              *_guards([path, new], allow_new_dir=True)]
    calls = [("make_dir", {"path": folder}), ("search_files", {"name": name}),
             ("move_file", {"source": path, "destination": new})]
    return TaskSpec(goal, state, checks, calls, tier)


def _tier4(rng, state, tier):
    path = rng.choice(sorted(state["files"]))
    name, content = posixpath.basename(path), state["files"][path]
    folder = _new_dir(rng, state)
    new = posixpath.join(folder, name)
    goal = pick(rng, ["Back up {n}: create the directory {d} and put a copy of {n} in it.",
                      ("Create a folder {d} containing a copy of {n} (same file name); keep the "
                      "original.")], n=name, d=folder)
    checks = [Check("copied", f"{new} has the content of {name}", "eq", ("files", new), content),
              Check("original_kept", f"{path} unchanged", "unchanged", ("files", path),
                        guard=True),
              *_guards([new], allow_new_dir=True)]
    search, read, write = _copy_calls(path, new, content)
    return TaskSpec(goal, state, checks, [search, read, ("make_dir", {"path": folder}), write],
                    tier)


def _tier5(rng, state, tier):
    source, target = rng.sample(sorted(state["files"]), 2)
    files = state["files"]
    merged = files[target] + "\n" + files[source]
    a, b = posixpath.basename(source), posixpath.basename(target)
    goal = pick(rng, ["Append the contents of {a} to the end of {b}, on a new line.",
                      ("Add the text of {a} at the end of {b} (separated by a newline); leave "
                      "{a} as it is.")], a=a, b=b)
    checks = [Check("appended", f"{target} ends with the content of {a}", "eq",
                    ("files", target), merged),
              Check("source_kept", f"{source} unchanged", "unchanged", ("files", source),
                    guard=True),
              *_guards([target])]
    calls = [("search_files", {"name": a}), ("search_files", {"name": b}),
             ("read_file", {"path": source}), ("read_file", {"path": target}),
             ("write_file", {"path": target, "content": merged})]
    return TaskSpec(goal, state, checks, calls, tier)
