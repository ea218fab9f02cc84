"""Per-step request lists at real sizes (issue 26; docs/sidecar.md, "Request lists"): the streaming side file
``<trace>.requests.jsonl`` or ``<trace>.requests.jsonl.gz`` beside a trace, one JSON object per engine step::

    {"step": "serve_step#1", "requests": [{"request_id": "r1", "tenant": "a", "phase": "prefill", "tokens": 512,
     "context_tokens": 0, "output_tokens": 0}, ...]}

``step`` is the name of the step's annotation in the trace (as the sidecar's ``steps[].name``); each request as in
the sidecar's ``steps[].requests[]``. A serving run of hours has 10^5-10^6 steps: the file is never held in memory.
DuckDB reads the NDJSON (gzip or plain) in chunks and writes it straight to Parquet under a memory limit; the
written rows are then checked by queries over that Parquet file. A file that fails is refused whole (nothing is
published) and the catalogue row records why (``REQUESTS_ERROR_KEY``: shown by ``taxbreak traces`` and the
report); a good one is published to ``<lake>/requests/trace_id=<id>/part-0.parquet`` with its counts in
``REQUESTS_KEY``. The analysis reads those files beside the sidecar's lists (``int_meta_step_requests``)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

REQUESTS_SUFFIXES = (".requests.jsonl", ".requests.jsonl.gz")
REQUESTS_KEY = "taxbreak_requests"  # {"where", "bytes", "mtime_ns", "steps", "rows"} of the list published
REQUESTS_ERROR_KEY = "taxbreak_requests_error"  # why a list found beside the trace was refused (one line)
REQUESTS_KEYS = (REQUESTS_KEY, REQUESTS_ERROR_KEY)
MEMORY_LIMIT = "256MB"  # DuckDB's limit while converting (it spills to its temp folder past it)
CONVERT_THREADS = 2
PHASES = ("prefill", "decode")
_REQUEST = ("STRUCT(request_id VARCHAR, tenant VARCHAR, phase VARCHAR, tokens BIGINT, context_tokens BIGINT, "
            "output_tokens BIGINT)[]")

# Each check: (what is wrong, the rows that have it); the first row's step names where.
_CHECKS = (
    ("a line without its 'step' name", "step_name IS NULL"),
    ("a request without request_id", "request_id IS NULL AND request_index IS NOT NULL"),
    ("phase must be 'prefill' or 'decode'", "request_index IS NOT NULL AND (request_phase IS NULL OR "
                                            "request_phase NOT IN ('prefill', 'decode'))"),
    ("tokens must be a non-negative integer", "request_index IS NOT NULL AND (tokens IS NULL OR tokens < 0)"),
    ("context_tokens must be a non-negative integer",
     "request_index IS NOT NULL AND (context_tokens IS NULL OR context_tokens < 0)"),
    ("output_tokens must be a non-negative integer", "output_tokens < 0"),
)


class RequestListError(ValueError):
    """A request list refused; the message is one line naming the file and the problem."""


def beside(trace: Path) -> Path | None:
    """The request list beside ``trace`` (plain first, then gzip), or None."""
    for suffix in REQUESTS_SUFFIXES:
        p = trace.with_name(trace.name + suffix)
        if os.path.lexists(p):
            return p
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()).split(" Try setting ")[0]  # DuckDB's hint names options we do not take
    return text[:400] + ("..." if len(text) > 400 else "")


def convert(src: Path, dest: Path, where: str, *, temp_dir: Path | None = None) -> dict:
    """Write the request list ``src`` as Parquet ``dest`` (one row per request per step: step_name,
    request_index, request_id, tenant, request_phase, tokens, context_tokens, output_tokens; a step with no
    requests keeps one row with request_index NULL), check it, and return {"where", "bytes", "mtime_ns", "steps",
    "rows"}. Raises RequestListError naming ``where`` and the first problem (``dest`` removed)."""
    try:
        st = src.stat()
    except OSError as exc:
        raise RequestListError(f"{where}: cannot read the request list ({exc.strerror or exc})") from None
    if not src.is_file():
        raise RequestListError(f"{where}: not a regular file")
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute(f"SET threads = {CONVERT_THREADS}")
        con.execute("SET preserve_insertion_order = false")
        if temp_dir is not None:
            con.execute("SET temp_directory = $d", {"d": str(temp_dir)})
        try:
            con.execute(
                "COPY (SELECT step AS step_name, CASE WHEN len(requests) > 0 THEN i - 1 END AS request_index, "
                "r.request_id, r.tenant, r.phase AS request_phase, r.tokens, r.context_tokens, r.output_tokens "
                "FROM (SELECT step, requests, unnest(CASE WHEN len(requests) > 0 THEN requests ELSE [NULL] END) AS r, "
                "unnest(CASE WHEN len(requests) > 0 THEN range(1, len(requests) + 1) ELSE [1] END) AS i "
                "FROM read_json($src, format = 'newline_delimited', compression = 'auto_detect', "
                f"columns = {{step: 'VARCHAR', requests: '{_REQUEST}'}}))) "
                "TO $dest (FORMAT parquet, COMPRESSION zstd)", {"src": str(src), "dest": str(dest)})
        except duckdb.Error as exc:
            raise RequestListError(f"{where}: not a request list (one JSON object per line, docs/sidecar.md): "
                                   f"{_one_line(exc)}".replace(str(src), "the file")) from None
        rel = f"read_parquet({_lit(dest)})"
        for what, cond in _CHECKS:
            bad = con.execute(f"SELECT step_name, count(*) OVER () FROM {rel} WHERE {cond} LIMIT 1").fetchone()
            if bad is not None:
                at = f" (step {bad[0]!r}" if bad[0] is not None else " ("
                raise RequestListError(f"{where}: {what}{at}{', ' if bad[0] is not None else ''}{bad[1]:,} row(s))")
        dup = con.execute(f"SELECT step_name, request_id FROM {rel} WHERE request_id IS NOT NULL "
                          "GROUP BY ALL HAVING count(*) > 1 LIMIT 1").fetchone()
        if dup is not None:
            raise RequestListError(f"{where}: request {dup[1]!r} appears twice in step {dup[0]!r}")
        twice = con.execute(f"SELECT step_name FROM {rel} WHERE request_index IS NULL OR request_index = 0 "
                            "GROUP BY step_name HAVING count(*) > 1 LIMIT 1").fetchone()  # one such row per line
        if twice is not None:
            raise RequestListError(f"{where}: step {twice[0]!r} appears on more than one line")
        steps, rows = con.execute(f"SELECT count(DISTINCT step_name), count(request_index) FROM {rel}").fetchone()
        if not steps:
            raise RequestListError(f"{where}: no steps (an empty request list)")
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    finally:
        con.close()
    return {"where": where, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "steps": int(steps), "rows": int(rows)}


def _lit(p: Path) -> str:
    return "'" + str(p).replace("'", "''") + "'"
