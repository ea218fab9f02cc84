"""Faults: the crash tests' kill points (``fault_point``) and the one line an ordinary fault of the machine prints
(``OrdinaryFault``, ``ordinary_fault``; issue 30 item 4).  A leaf: the writer, the marts and the CLI use it.

Every writer step that must leave the warehouse in its before or after state calls ``fault_point``
(docs/architecture.md "Writing the warehouse").  A full disk, a read-only file system, a permission refused or a
store folder removed while a command runs (``taxbreak.ingest.oserrors.classify`` says which, from the errno or from
the system's message inside a DuckDB or Arrow error) is no bug: every command prints
``taxbreak: <path>: <cause> — <what to do>`` and exits 1 (``taxbreak.cli.main``); the writers' transactions, staged
files and renames leave what readers see as it was (docs/architecture.md "Ordinary faults")."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from taxbreak.ingest.oserrors import OSFault, classify

FAULT_ENV = "TAXBREAK_FAULT_POINT"


# an injected ordinary fault (``POINT=KIND``): the errno the system would give
_ERRNO = {"no_space": errno.ENOSPC, "read_only": errno.EROFS, "permission": errno.EACCES, "vanished": errno.ENOENT}


def fault_point(name: str, path: str | os.PathLike[str] | Callable[[], str] | None = None) -> None:
    """Crash-test hook: SIGKILL this process at the named point when ``$TAXBREAK_FAULT_POINT`` lists it
    (comma-separated), or, listed as ``POINT=KIND`` (a key of ``CAUSES``: ``before_commit=no_space``), raise there
    the error the system gives for that fault on ``path`` (a callable: asked then), which a test without root
    cannot make a disk do: at ``before_commit`` DuckDB's ``TransactionException`` for a COMMIT that could not
    write, elsewhere an ``OSError``.  Points: ``publish:<table>`` (a table written, its transaction open),
    ``before_commit``, ``after_commit`` (before the marts), ``marts_staged`` (every marts file of the write
    staged, none renamed into place), ``marts_renamed`` (renamed, the marts manifest not yet replaced),
    ``marts_committed`` (the manifest replaced, the snapshot not yet built), ``snapshot_copied`` (the snapshot
    written, not yet renamed into place), ``snapshot_published`` (renamed, replaced marts files not yet deleted)."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    for item in wanted.split(","):
        point, _, kind = item.strip().partition("=")
        if point != name:
            continue
        if not kind:
            os.kill(os.getpid(), signal.SIGKILL)
        code = _ERRNO[kind]
        where = path() if callable(path) else str(path) if path is not None else None
        if name == "before_commit":
            raise duckdb.TransactionException(
                f'TransactionContext Error: Failed to commit: Could not write file "{where}": {os.strerror(code)}')
        raise OSError(code, os.strerror(code), where)


# kind -> (the cause as a message says it, what to do before running the command again)
CAUSES = {
    "no_space": ("no space left on the device", "free space there"),
    "read_only": ("the file system is read-only",
                  "make it writable, or point taxbreak at a writable folder (--lake / --warehouse, TAXBREAK_HOME)"),
    "permission": ("permission denied",
                   "give this user write access to it, or point taxbreak at a folder it may write (--lake / "
                   "--warehouse, TAXBREAK_HOME)"),
    "vanished": ("it was removed or moved while the command ran", "restore it, or point taxbreak at where it is now"),
}


@dataclass(frozen=True)
class OrdinaryFault:
    path: str
    cause: str
    advice: str

    def __str__(self) -> str:
        return f"{self.path}: {self.cause} — {self.advice}"


def _temporary(part: str) -> bool:
    """A name only a writer's temporary files have (staging folders, ``.x.tmp`` files, spill folders)."""
    return part.startswith((".", "_staging", "taxbreak-")) or part.endswith((".tmp", ".tmp-"))


def shown_path(path: str, roots: list[Path], vanished: bool = True) -> str:
    """``path`` as a message names it: a writer's temporary file under one of ``roots`` (the lake, the marts, the
    exports) is named by that root (messages never name a temporary file); with ``vanished``, a path that is gone
    by the highest of its folders that is gone too (the lake folder removed, not one file in it)."""
    p = Path(path)
    for root in sorted(roots, key=lambda r: -len(r.parts)):
        try:
            rel = p.relative_to(root)
        except ValueError:
            continue
        if any(_temporary(part) for part in rel.parts):
            p = root
        break
    if vanished and not p.exists():
        while p.parent != p and not p.parent.exists():
            p = p.parent
    return str(p)


_THEN = "taxbreak_then"


def with_then(exc: BaseException, then: str) -> BaseException:
    """Mark ``exc`` with what to do instead of running the same command again (``taxbreak retry`` whose traces
    ingested and whose tables then failed: ``analyze`` builds them); the CLI's fault line reads it (``then_of``).
    The advice travels with the failure it belongs to, not in state the command leaves behind."""
    setattr(exc, _THEN, then)
    return exc


def then_of(exc: BaseException) -> str | None:
    """What ``with_then`` marked ``exc`` with; None when nothing was."""
    return getattr(exc, _THEN, None)


def ordinary_fault(exc: BaseException, *, roots: list[Path], default: Path, command: str,
                   then: str | None = None) -> OrdinaryFault | None:
    """The line for ``exc`` when it is an ordinary fault of the machine (``classify``), else None.  ``roots``: the
    stores' folders (for ``shown_path``); ``default``: the path named when the error names none; ``command``: what
    to run again; ``then``: what to do instead, when running the same command again would not finish the work
    (``taxbreak retry`` whose traces ingested and whose tables failed: ``analyze`` builds them)."""
    found: OSFault | None = classify(exc)
    if found is None:
        return None
    cause, advice = CAUSES[found.kind]
    where = shown_path(found.path, roots, found.kind == "vanished") if found.path else str(default)
    return OrdinaryFault(where, cause, f"{advice}, then {then}" if then else
                         f"{advice}, then run `taxbreak {command}` again")
