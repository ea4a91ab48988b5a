"""Containment the sandboxed process applies to itself before any candidate code is read.

Never imported by the parent: ``lopd.envs.sandbox`` sends this file's source, with
``plaindata.py`` and ``_harness.py``, to a fresh ``python -I`` (standard library only,
Python 3.9 syntax). ``confine(cfg)`` returns the names of the layers that took effect:

- ``cgroup``: joins the memory+pids cgroup the parent made (cgroup v2, when writable); it caps
  the memory of the whole process tree.
- ``netns``: a new, empty network namespace (as root; otherwise inside a new user namespace).
- ``pidns``: a new pid namespace with the candidate as pid 1: no process outside it can be
  seen or signalled (without a private uid, this is what protects the parent), and when it
  ends every process it started dies with it.
- ``private-root`` (root only): a new mount namespace whose root is a fresh tmpfs holding
  read-only binds of the system directories (``/usr``, ``/etc``, the interpreter's base prefix;
  never a virtual environment's packages),
  four devices and the writable working directory ``/sandbox``. ``/tmp``, ``/run``, ``/proc``,
  ``/root``, ``/work``, ... and their Unix sockets are simply absent. ``disk-cap``: that tmpfs
  has a byte size and an inode count, so the total written and the number of files are capped.
  Where the new root cannot be built, ``readonly-fs`` re-mounts every mount read-only instead.
- ``rlimits``: CPU, address space, file size, process count, no core files, 256 descriptors.
  Without the cgroup, ``proc-x-mem``: the process count is lowered so that count x per-process
  address space stays within the memory budget.
- ``uid`` (root only): a private uid/gid, so RLIMIT_NPROC bites and nothing else is signalled.
- ``seccomp-socket``: a seccomp filter (x86-64, aarch64) makes ``socket()`` fail with EPERM
  for this process and every child, ctypes included; foreign-ABI syscalls are refused.
- ``audit-hook``: refuses sockets, ctypes, signals to other processes, writes outside the
  working directory, and counts created files (the only layer without namespaces or seccomp).
  ``files-x-size``: without the tmpfs, the file count is lowered so that count x
  RLIMIT_FSIZE fits the disk budget (per process). ``read-guard``: without a private root, the hook also refuses reads outside the working
  directory, the standard library and ``/dev``, and starting other programs. Audit hooks are
  a speed bump, not a wall (``_posixsubprocess`` is not audited): the namespaces, the private
  uid and seccomp are the walls.
"""

import ctypes
import os
import resource
import struct
import sys

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER, CLONE_NEWPID = (
    0x00020000, 0x40000000, 0x10000000, 0x20000000)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 32, 4096, 16384, 1 << 18)
SANDBOX_DIR = "/sandbox"
_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
_DEVICES = ("null", "zero", "urandom", "random")
_MIN_PROCESS_MB = 128
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1,
    "os.truncate": 1, "shutil.rmtree": 1, "os.rename": 2, "os.symlink": 2, "os.link": 2,
}
_SPAWN_EVENTS = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen"}
# (audit arch, socket syscall number, first number of a foreign ABI to refuse)
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 0x40000000), "aarch64": (0xC00000B7, 198, None)}


def _bind_readonly(libc, source, target):
    if libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None) != 0:
        return False
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID
    return libc.mount(None, target.encode(), None, flags, None) == 0


def _private_root(libc, cfg):
    """Build and enter the new root (see the module docstring); True on success."""
    root = cfg["root_dir"]
    options = f"size={cfg['max_disk_mb']}m,nr_inodes={cfg['max_files'] + 64},mode=755"
    if libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                  options.encode()) != 0:
        return False
    bound = []
    for name in _SYSTEM_DIRS:
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), os.path.join(root, name))
        elif os.path.isdir(host):
            os.mkdir(os.path.join(root, name))
            if not _bind_readonly(libc, host, os.path.join(root, name)):
                return False
            bound.append(host)
    for prefix in {sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        if not any(prefix == b or prefix.startswith(b + "/") for b in bound):
            os.makedirs(root + prefix, exist_ok=True)
            if not _bind_readonly(libc, prefix, root + prefix):
                return False
            bound.append(prefix)
    os.mkdir(os.path.join(root, "dev"))
    for device in _DEVICES:
        target = os.path.join(root, "dev", device)
        open(target, "w").close()
        if libc.mount(("/dev/" + device).encode(), target.encode(), None, MS_BIND, None) != 0:
            return False
    work = os.path.join(root, SANDBOX_DIR.lstrip("/"))
    os.mkdir(work, 0o700)
    if cfg.get("uid") is not None:
        os.chown(work, cfg["uid"], cfg["uid"])
    os.chroot(root)
    os.chdir(SANDBOX_DIR)
    return True


def _readonly_mounts(libc, workdir):
    """Fallback: every mount read-only and nosuid except ``workdir``."""
    wd = workdir.encode()
    if libc.mount(wd, wd, None, MS_BIND, None) != 0:
        return False
    libc.mount(None, wd, None, MS_BIND | MS_REMOUNT | MS_NOSUID, None)
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    root_ok = False
    for point in points:
        if point != workdir:
            done = libc.mount(None, point.encode(), None,
                              MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, None) == 0
            root_ok = root_ok or (done and point == "/")
    os.chdir(workdir)  # re-enter through the writable bind mount
    return root_ok


def _become_pid_one():
    """Fork after ``unshare(CLONE_NEWPID)``: the child goes on as pid 1 of the new namespace;
    this process waits and exits with its status (killing pid 1 kills the whole namespace)."""
    child = os.fork()
    if child == 0:
        return
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _namespaces(libc, cfg, layers):
    if os.geteuid() != 0:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID) == 0:
            _become_pid_one()
            layers += ["netns", "pidns"]
        elif libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            layers.append("netns")
        return
    if libc.unshare(CLONE_NEWNET) == 0:
        layers.append("netns")
    if libc.unshare(CLONE_NEWPID) == 0:
        _become_pid_one()
        layers.append("pidns")
    if libc.unshare(CLONE_NEWNS) != 0:
        return
    libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None)
    try:
        entered = _private_root(libc, cfg)
    except OSError:
        entered = False
    if entered:
        layers += ["private-root", "disk-cap"]
    elif os.getcwd() == cfg["workdir"] and _readonly_mounts(libc, cfg["workdir"]):
        layers.append("readonly-fs")


def _join_cgroup(cfg, layers):
    path = cfg.get("cgroup")
    if not path:
        return
    try:
        with open(os.path.join(path, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
        layers.append("cgroup")
    except OSError:
        pass


def _rlimits(cfg, layers):
    mb = 1024 * 1024
    procs, process_mb = cfg["max_procs"], cfg["memory_mb"]
    if "cgroup" not in layers:
        procs = max(1, min(procs, cfg["memory_mb"] // _MIN_PROCESS_MB))
        process_mb = cfg["memory_mb"] // procs
        layers.append("proc-x-mem")
    limits = {
        resource.RLIMIT_CPU: cfg["cpu_s"], resource.RLIMIT_AS: process_mb * mb,
        resource.RLIMIT_FSIZE: cfg["max_file_mb"] * mb, resource.RLIMIT_NPROC: procs,
        resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: 256,
    }
    for kind, value in limits.items():
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    layers.append("rlimits")


def _seccomp_socket_filter(libc):
    """Install the socket filter; True if the kernel accepted it."""
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    if arch is None:
        return False
    audit_arch, socket_nr, foreign = arch
    deny, allow = 0x00050000 | 1, 0x7FFF0000  # SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    program = [
        (ld, 0, 0, 4), (jeq, 1, 0, audit_arch), (ret, 0, 0, deny),
        (ld, 0, 0, 0), (jeq, 0, 1, socket_nr), (ret, 0, 0, deny),
        (jge, 0, 1, foreign if foreign is not None else 0xFFFFFFFF), (ret, 0, 0, deny),
        (ret, 0, 0, allow),
    ]
    code = b"".join(struct.pack("HBBI", *op) for op in program)
    buffer = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(buffer))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER


def confine(cfg):
    """Apply every layer that this machine allows; returns their names."""
    layers = []
    libc = ctypes.CDLL(None, use_errno=True)
    _join_cgroup(cfg, layers)
    _namespaces(libc, cfg, layers)
    _rlimits(cfg, layers)
    uid = cfg.get("uid")
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        layers.append("uid")
    if _seccomp_socket_filter(libc):
        layers.append("seccomp-socket")
    guard_reads, max_files = "private-root" not in layers, cfg["max_files"]
    if "disk-cap" not in layers:  # files x file size must fit the disk budget
        max_files = min(max_files, max(8, cfg["max_disk_mb"] // max(1, cfg["max_file_mb"])))
        layers.append("files-x-size")
    install_audit_hook(os.getcwd(), max_files, guard_reads)
    layers += ["audit-hook", "read-guard"] if guard_reads else ["audit-hook"]
    return layers


def install_audit_hook(workdir, max_files, guard_reads):
    """Refuse sockets, ctypes, foreign signals and writes outside ``workdir``; cap new files.
    With ``guard_reads`` (no private root), also refuse reading anything but ``workdir``, the
    standard library and ``/dev``, and starting programs (which the hook would not follow)."""
    root = os.path.realpath(workdir)
    realpath, fspath, sep, getppid = os.path.realpath, os.fspath, os.sep, os.getppid
    readable = (root + sep, os.path.dirname(os.path.realpath(os.__file__)) + sep, "/dev/")
    written = set()

    def inside(path):
        try:
            full = realpath(fspath(path))
        except (TypeError, ValueError):
            return isinstance(path, int)  # an fd: already opened
        return full == root or full.startswith(root + sep)

    def may_read(path):
        try:
            full = realpath(fspath(path))
        except (TypeError, ValueError):
            return isinstance(path, int)
        return full == root or full.startswith(readable)

    def count(path):
        written.add(repr(path))
        if len(written) > max_files:
            raise PermissionError("too many files in the sandbox")

    def hook(event, args):
        if event.startswith(("socket.", "ctypes.")):
            raise PermissionError(f"{event} is disabled in the sandbox")
        if event in ("os.kill", "os.killpg") and (args[0] in (-1, 1) or args[0] == getppid()):
            raise PermissionError("signalling processes outside the sandbox")
        if guard_reads and event in _SPAWN_EVENTS:
            raise PermissionError("starting programs is disabled in the sandbox")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writing = bool(flags & _WRITE_FLAGS) if isinstance(flags, int) else False
            writing = writing or (isinstance(mode, str) and any(c in mode for c in "wax+"))
            if guard_reads and not writing and not may_read(path):
                raise PermissionError(f"reading outside the sandbox directory: {path!r}")
            if writing and not isinstance(path, int):
                if not inside(path):
                    raise PermissionError(f"writing outside the sandbox directory: {path!r}")
                count(path)
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                if not inside(path):
                    raise PermissionError(f"{event} outside the sandbox directory: {path!r}")
            if event == "os.mkdir":
                count(args[0])

    sys.addaudithook(hook)
