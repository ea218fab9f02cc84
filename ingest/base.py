"""What every adapter returns, and the errors it raises."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa


class IngestError(Exception):
    """A source file cannot be ingested. The message names the file and the problem."""


@dataclass
class TraceInfo:
    """Trace-level facts an adapter learns; filled in while its batches are consumed."""

    source_format: str
    tool_versions: dict[str, Any] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)
    host_name: str | None = None
    start_epoch_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped_counts: dict[str, int] = field(default_factory=dict)
    source_event_count: int | None = None


@dataclass
class AdapterOutput:
    """``batches`` conform to EVENT_SCHEMA; ``info`` is complete once ``batches`` is exhausted."""

    info: TraceInfo
    batches: Iterator[pa.RecordBatch]


class NotATraceError(IngestError):
    """The file is not a trace at all (no traceEvents, not JSON, not a SQLite database): recorded with the status
    'not_a_trace', so it is neither analysed nor offered for retry as a failed trace."""


# -- files: regular files only, temporary folders owned by a process -------------------------------------------
def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; never blocks (a FIFO, a device, a socket is refused
    with an IngestError naming the file and what it is, before any byte is read)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise IngestError(f"{path}: not a regular file ({_file_kind(mode)}); only regular files are ingested")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _file_kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a plain file"


def file_identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What changes when a file's bytes change or it is replaced: inode, device, size, mtime, ctime."""
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_HOST = socket.gethostname().replace("-", "_")[:40] or "host"


def owned_name(prefix: str) -> str:
    """``<prefix><host>-<pid>-<random>``: a temporary name that says which live process owns it."""
    return f"{prefix}{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def make_owned_dir(prefix: str, parent: str | os.PathLike[str] | None = None) -> Path:
    """A new temporary folder named by ``owned_name`` (in ``parent``, default the system's temporary folder)."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    path = base / owned_name(prefix)
    path.mkdir(mode=0o700)
    return path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def owner_is_dead(name: str, prefix: str) -> bool:
    """True when ``name`` (made by ``owned_name(prefix)``) belongs to a process of this host that is gone."""
    if not name.startswith(prefix):
        return False
    parts = name[len(prefix):].split("-")
    if len(parts) < 3 or parts[0] != _HOST or not parts[1].isdigit():
        return False  # another host's (a shared folder), or not ours: never touched
    pid = int(parts[1])
    return pid != os.getpid() and not pid_alive(pid)


def clean_dead(parent: str | os.PathLike[str] | None, prefix: str, min_age_s: float = 0.0) -> int:
    """Remove the entries of ``parent`` named by ``owned_name(prefix)`` whose process (on this host) is gone and
    that have not changed for ``min_age_s``; returns how many were removed.  A pid reused since is alive, so its
    entries wait for that process to end: never removed while their name points at a live process."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        if not owner_is_dead(entry.name, prefix):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < min_age_s:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed
