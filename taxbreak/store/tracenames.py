"""Trace names as users type them: the one resolver every command that takes ``TRACE`` uses (issue 24).

A name matches, in this order, the first rule that matches anything:

1. the trace id, or a prefix of it (``3f2a``; case-insensitive);
2. the file name (``eager_trace.json.gz``; a path is reduced to its file name);
3. the file name's stem without its trace suffixes (``eager_trace`` for ``eager_trace.json.gz``, ``step`` for
   ``step.pt.trace.json``, ``run1`` for ``run1.nsys-rep``), case-insensitive;
4. a substring of the file name, case-insensitive.

The first rule that matches decides: one trace is the answer, several are ambiguous (``TraceAmbiguous`` lists
them and the CLI exits 2), none falls through to the next rule.  Nothing matching is ``TraceNotFound``, worded
"no trace matches X"; a command that reads the warehouse then asks the catalogue whether the name is a known trace
that is not analysed (``explain_unanalysed``), and only then says "run `taxbreak analyze`".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from taxbreak.ingest import Lake
from taxbreak.store.query import has_relation, printable

# suffixes taken off a file name for its stem, repeatedly, longest first where they nest
TRACE_SUFFIXES = (".gz", ".zst", ".bz2", ".xz", ".json", ".trace", ".pt", ".sqlite", ".db", ".nsys-rep", ".qdrep",
                  ".pftrace", ".pb")
MAX_LISTED = 10  # candidates an ambiguity message lists


class TraceNotFound(LookupError):
    """No trace matches the name."""


class TraceAmbiguous(LookupError):
    """The name matches several traces (``candidates``: (trace_id, file_name) pairs)."""

    def __init__(self, message: str, candidates: list[tuple[str, str | None]]) -> None:
        super().__init__(message)
        self.candidates = candidates


def stem(file_name: str | None) -> str:
    """The file name without its directory and trace suffixes, lower-case (``eager_trace`` for
    ``runs/Eager_Trace.json.gz``)."""
    name = PurePosixPath(str(file_name or "").replace("\\", "/")).name.lower()
    changed = True
    while changed:
        changed = False
        for suf in TRACE_SUFFIXES:
            if name.endswith(suf) and len(name) > len(suf):
                name = name[: -len(suf)]
                changed = True
    return name


def match(candidates: Iterable[tuple[str, str | None]], name: str) -> list[tuple[str, str | None]]:
    """The (trace_id, file_name) pairs of ``candidates`` the first matching rule (module doc) selects, in trace id
    order; empty when none matches."""
    rows = sorted({(str(t), f) for t, f in candidates})
    typed = name.strip()
    if not typed:
        return []
    low = typed.lower()
    base = PurePosixPath(typed.replace("\\", "/")).name
    rules = (
        lambda t, f: t.lower().startswith(low),
        lambda t, f: f is not None and f == base,
        lambda t, f: f is not None and stem(f) == stem(base),
        lambda t, f: f is not None and low in f.lower(),
    )
    for rule in rules:
        hit = [(t, f) for t, f in rows if rule(t, f)]
        if hit:
            return hit
    return []


def ambiguity_text(name: str, hits: list[tuple[str, str | None]]) -> str:
    listed = "; ".join(f"{t[:16]} {f or ''}".rstrip() for t, f in hits[:MAX_LISTED])
    more = f"; and {len(hits) - MAX_LISTED} more" if len(hits) > MAX_LISTED else ""
    return (f"{name!r} matches {len(hits)} traces: {listed}{more}; give more of the trace id or the whole file "
            "name")


def resolve(candidates: Iterable[tuple[str, str | None]], name: str, what: str = "trace") -> str:
    """The one trace id ``name`` names among ``candidates``; TraceNotFound / TraceAmbiguous otherwise.
    ``what``: how the candidates are called in the not-found message ('trace', 'analysed trace')."""
    hits = match(candidates, name)
    if not hits:
        raise TraceNotFound(f"no {what} matches {name!r}")
    if len(hits) > 1:
        raise TraceAmbiguous(ambiguity_text(name, hits), hits)
    return hits[0][0]


def resolve_many(candidates: Iterable[tuple[str, str | None]], names: Iterable[str],
                 what: str = "trace") -> list[str]:
    """``resolve`` for each name (in order, without repeats)."""
    cands = list(candidates)
    out: list[str] = []
    for n in names:
        t = resolve(cands, n, what)
        if t not in out:
            out.append(t)
    return out


def catalogue_candidates(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(r["trace_id"], r.get("file_name")) for r in rows]


def explain_unanalysed(lake: str | os.PathLike[str] | None, name: str, warehouse: str | os.PathLike[str]) -> str:
    """Why a name found no analysed trace in ``warehouse``: it names no trace at all ("no trace matches X"), a
    trace that failed to ingest or is not a trace, or one ingested but not analysed (then: run `taxbreak analyze
    --trace`)."""
    rows: list[dict[str, Any]] = []
    if lake is not None:
        try:
            rows = Lake(lake).catalogue().to_pylist()
        except Exception:  # noqa: BLE001 - the lake may be elsewhere or gone; say what we know
            rows = []
    hits = match(catalogue_candidates(rows), name)
    if not hits:
        where = f"the warehouse {warehouse}" + (f" nor the catalogue at {lake}" if lake is not None else "")
        return (f"no trace matches {name!r}: it is in neither {where} (`taxbreak traces` lists the catalogue; "
                "`taxbreak ingest PATH` adds a trace)")
    if len(hits) > 1:
        return ambiguity_text(name, hits) + " (in the catalogue)"
    row = next(r for r in rows if r["trace_id"] == hits[0][0])
    label = f"trace {row['trace_id'][:16]} ({row.get('file_name')})"
    if row.get("status") == "not_a_trace":
        return f"{label} is not a trace: {row.get('error')}"
    if row.get("status") != "ingested":
        return f"{label} failed to ingest: {row.get('error')}"
    return (f"{label} is ingested but not analysed in {warehouse}: run `taxbreak analyze --trace "
            f"{row['trace_id'][:16]}`")


def resolve_in_warehouse(con: Any, name: str, *, lake: str | os.PathLike[str] | None,
                         warehouse: str | os.PathLike[str] | Path) -> str:
    """The analysed trace ``name`` names on a warehouse connection (its trace_meta); LookupError with the reader's
    message otherwise (ambiguous: the candidates; unknown: ``explain_unanalysed``)."""

    cands = con.execute("SELECT trace_id, file_name FROM trace_meta").fetchall() if has_relation(
        con, "trace_meta") else []
    try:
        return resolve(cands, name, "analysed trace")
    except TraceNotFound:
        raise TraceNotFound(explain_unanalysed(lake, name, warehouse)) from None


def resolve_for_cli(con: Any, name: str, command: str, paths: Any) -> str | None:
    """``resolve_in_warehouse`` for a subcommand: the trace id, or None after printing why not on stderr (the
    command then exits 2).  ``paths``: its taxbreak.config.Paths (the lake is asked about unanalysed names)."""
    import sys

    try:
        return resolve_in_warehouse(con, name, lake=paths.lake, warehouse=paths.warehouse)
    except LookupError as exc:
        print(printable(f"taxbreak {command}: {exc}"), file=sys.stderr)
        return None
