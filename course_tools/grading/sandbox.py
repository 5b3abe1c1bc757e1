"""Graders (inside the runner): a read-only view of the machine for one grading run (Linux, unprivileged).

``python -m course_tools.grading.sandbox WORKDIR -- COMMAND...`` is started through
``unshare --user --map-root-user --mount --pid --fork --kill-child --mount-proc`` (util-linux).
Inside those new namespaces it:

1. makes every mount private to the namespace and bind-mounts WORKDIR onto itself;
2. remounts every other file system read-only (``/proc`` of the new PID namespace excepted) and
   puts an empty ``tmpfs`` on ``/dev/shm``;
3. enters a second user namespace, which *locks* those read-only flags (code inside cannot
   remount them writable), mapped back to the caller's own user id;
4. runs COMMAND in WORKDIR.

So the student's code can write only in its own run folder; the submissions, the course, the
other runs and the report are out of its reach, and every process it starts dies with the run
(the PID namespace ends with its first process). Nothing here needs root or a setuid helper;
where unprivileged user namespaces are disabled, :func:`available` says why and the grader runs
without this layer (see the grader's guide).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
#: statvfs flags -> mount flags that a remount must keep (the kernel refuses to drop locked ones).
_KEEP = {
    1: MS_RDONLY,
    2: MS_NOSUID,
    4: MS_NODEV,
    8: MS_NOEXEC,
    1024: MS_NOATIME,
    2048: MS_NODIRATIME,
    4096: MS_RELATIME,
}

UNSHARE = ["--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]

_cached: Optional[tuple[bool, str]] = None


def command(workdir: Path, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` sandboxed in ``workdir``."""
    unshare = shutil.which("unshare") or "unshare"
    return [
        unshare,
        *UNSHARE,
        sys.executable,
        "-m",
        "course_tools.grading.sandbox",
        str(workdir),
        str(os.getuid()),
        str(os.getgid()),
        "--",
        *argv,
    ]


def available() -> tuple[bool, str]:
    """Whether runs can be sandboxed here, and if not, why (the answer is cached)."""
    global _cached
    if _cached is None:
        _cached = _probe()
    return _cached


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"the read-only sandbox needs Linux (this is {sys.platform})"
    if shutil.which("unshare") is None:
        return False, "the `unshare` command (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="course-grade-probe-") as tmp:
        inside = Path(tmp) / "inside"
        inside.mkdir()
        outside = Path(tmp) / "outside.txt"
        script = (
            "import os\n"
            "open('inside.txt', 'w').write('ok')\n"
            f"try:\n    open({str(outside)!r}, 'w').write('escaped')\n"
            "except OSError:\n    print('read-only')\n"
        )
        try:
            done = subprocess.run(
                command(inside, [sys.executable, "-c", script]), capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return False, f"`unshare` could not start ({error})"
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            return False, f"unprivileged user namespaces are not allowed here ({last})"
        if outside.exists() or "read-only" not in done.stdout or not (inside / "inside.txt").exists():
            return False, "the probe could write outside its folder"
    return True, "read-only file system outside each run's folder"


# --------------------------------------------------------------------------- inside the namespaces


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(libc: ctypes.CDLL, source: Optional[str], target: str, fstype: Optional[str], flags: int) -> None:
    result = libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        None,
    )
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            field = line.split()[4]
            points.append(field.encode().decode("unicode_escape"))
    return points


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def enter(workdir: str, uid: int, gid: int) -> None:
    """Set up the read-only view (run as root of a fresh user + mount namespace)."""
    libc = _libc()
    work = os.path.realpath(workdir)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, work, work, None, MS_BIND | MS_REC)
    try:
        _mount(libc, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV)
    except OSError:
        pass  # no /dev/shm: nothing to protect there
    for point in _mount_points():
        if point == work or point.startswith(work + "/") or point == "/proc" or point.startswith("/proc/"):
            continue
        if point == "/dev/shm":
            continue
        try:
            flags = os.statvfs(point).f_flag
        except OSError:
            continue  # hidden under another mount: not reachable either
        remount = MS_REMOUNT | MS_BIND | MS_RDONLY
        for bit, keep in _KEEP.items():
            if flags & bit:
                remount |= keep
        _mount(libc, None, point, None, remount)
    os.chdir(work)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} 0 1")
    _write("/proc/self/gid_map", f"{gid} 0 1")


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 3:
        print("usage: python -m course_tools.grading.sandbox WORKDIR UID GID -- COMMAND...", file=sys.stderr)
        return 2
    workdir, uid, gid = argv[0], int(argv[1]), int(argv[2])
    command_line = argv[4:]
    try:
        enter(workdir, uid, gid)
    except OSError as error:
        print(f"course_utils sandbox: {error}", file=sys.stderr)
        return 125
    os.execvp(command_line[0], command_line)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
