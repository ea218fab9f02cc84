"""What kind of ordinary fault of the machine an exception is (issue 30 item 4): no space, a read-only file system,
permission denied, a path that vanished.  The one predicate: the ingest asks it which failures are the lake's
rather than the file's (``ingest_file`` re-raises those instead of recording them against the content), and
``taxbreak.store.faults`` turns its answer into the one line a command prints (the path, the cause, what to do).

An exception is read as the operating system says it (``OSError.errno``) or, for DuckDB and Arrow errors that
wrap one (``TransactionException: Failed to commit: Could not write file "/w/taxbreak.duckdb": No space left on
device``, ``IOException ... "errno":"28"``), by the system's own message in their text; the path is the
``OSError``'s file name or the first quoted path in the text.  Causes are looked for along the exception's chain
(``__cause__``, ``__context__``).
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass

# kind -> (errnos, the C library's messages for them as DuckDB and Arrow quote them)
KINDS: dict[str, tuple[frozenset[int], tuple[str, ...]]] = {
    "no_space": (frozenset({errno.ENOSPC, errno.EDQUOT}), ("No space left on device", "Disk quota exceeded")),
    "read_only": (frozenset({errno.EROFS}), ("Read-only file system",)),
    "permission": (frozenset({errno.EACCES, errno.EPERM}), ("Permission denied", "Operation not permitted")),
    "vanished": (frozenset({errno.ENOENT}), ("No such file or directory", "No files found that match the pattern")),
}
# kinds that are never the fault of a file being read (its bytes, its name): only of where things are written
WRITE_SIDE = frozenset({"no_space", "read_only"})

_QUOTED = re.compile(r"""(?:file|directory|pattern|path)\s*\\*["'](/[^"'\\]+)\\*["']""", re.IGNORECASE)
_ANY_PATH = re.compile(r"""\\*["'](/[^"'\\]+)\\*["']""")


@dataclass(frozen=True)
class OSFault:
    kind: str  # a key of KINDS
    path: str | None  # the file or folder the system named, when it named one
    detail: str  # the exception's own text, one line


def _one(exc: BaseException) -> OSFault | None:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.errno is not None:
        for kind, (codes, _) in KINDS.items():
            if exc.errno in codes:
                path = exc.filename if isinstance(exc.filename, str) else None
                return OSFault(kind, path, text)
    for kind, (_, phrases) in KINDS.items():
        if any(p in text for p in phrases):
            if isinstance(exc, OSError) and isinstance(exc.filename, str):
                return OSFault(kind, exc.filename, text)
            m = _QUOTED.search(text) or _ANY_PATH.search(text)
            return OSFault(kind, m.group(1) if m else None, text)
    return None


def classify(exc: BaseException) -> OSFault | None:
    """The ordinary fault ``exc`` is, or is caused by (its chain, nearest first); None for any other error."""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        found = _one(node)
        if found is not None:
            return found
        node = node.__cause__ or node.__context__
    return None
