"""``taxbreak nsys-check TRACE``: our kernel table against Nsight's own tools.

1. ``nsys stats`` kernel summary (``cuda_gpu_kern_sum``; ``gpukernsum`` before nsys 2023): instances and total ns
   per kernel name must equal the lake's (exit 1 on a mismatch).
2. ``nsys recipe`` (Nsight Systems 2023.3 and later; Analysis Guide, "Recipes"), a second cross-check where the
   installed nsys has recipes and TRACE is a ``.nsys-rep`` (recipes read reports, not SQLite exports):
   - ``cuda_gpu_kern_sum`` (CUDA GPU Kernel Summary, a "stats" recipe): its reducer writes ``all_stats.parquet``
     (per-kernel statistics indexed by ``Name``, times in ns unless ``--timeunit`` says otherwise), beside
     ``files.parquet``, ``rank_stats.parquet`` and, with ``--csv``, the same tables as CSV.  Per name we read the
     instance count (``Instances``, or ``Count``) and the total (``Total Time``, ``Total Time (ns)`` or ``Sum``) and
     compare them with the lake like the stats report (by demangled name, or by short name when the recipe's names
     are short names).  A layout without those columns is reported ``unparsed`` with the columns found, never
     guessed.
   - ``gpu_gaps`` (GPU Gaps): the regions where a GPU of a process is idle for at least ``--gap`` ms (default 500)
     between its first and last operation, profiling overheads excluded.  Stored and summarised (gaps, total ns),
     not compared: the recipe subtracts overheads the lake does not have, and the warehouse's own idle time
     (``device_idle_gaps``) is computed by ``taxbreak analyze``, not here.
   Where the installed nsys has no recipes (the Debian 2022.4 CLI that tests/ingest/setup_nsys.sh installs) the
   check says so and rests on ``nsys stats`` alone; a recipe that fails (e.g. its Python packages are missing)
   is reported with nsys's message and does not change the exit code.

Results are stored next to ours in the lake, ``checks/nsys/<trace_id>/`` (a sibling of ``events/`` and
``catalogue/``, read by nothing else): ``check.json`` (versions, statuses, totals, the differences),
``kernel_summary_{lake,stats,recipe}.parquet`` (``name``, ``instances``, ``total_ns``) and
``recipe_gpu_gaps.parquet`` (the recipe's gap rows with ``duration_ns``).  A new check replaces the old files.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from taxbreak.config import Paths, ingest_limits
from taxbreak.ingest import ingest_file
from taxbreak.ingest.base import IngestError
from taxbreak.ingest.lake import Lake
from taxbreak.ingest.nsys_rep import (
    EXPORT_TIMEOUT_S,
    _fmt,
    compare_summaries,
    find_nsys,
    lake_kernel_summary,
    nsys_kernel_summary,
    nsys_version,
)

RECIPE_MIN_VERSION = (2023, 3)  # `nsys recipe` ships with Nsight Systems 2023.3 and later
KERNEL_RECIPE = "cuda_gpu_kern_sum"
GAPS_RECIPE = "gpu_gaps"
GAP_THRESHOLD_MS = 500  # gpu_gaps' documented default for --gap
CHECKS_DIR = "checks/nsys"
# Column names read from the recipes' tables (first present wins).
_NAME_COLUMNS = ("Name", "name", "Kernel Name")
_COUNT_COLUMNS = ("Instances", "Count", "Num Calls")
_TOTAL_COLUMNS = ("Total Time", "Total Time (ns)", "Sum", "Total")
_DURATION_COLUMNS = ("Duration", "Duration (ns)", "duration", "Gap Duration")
_START_END_COLUMNS = (("Start", "End"), ("start", "end"), ("Start (ns)", "End (ns)"))
SUMMARY_SCHEMA = pa.schema([("name", pa.string()), ("instances", pa.int64()), ("total_ns", pa.int64())])


@dataclass
class RecipeResult:
    """One recipe run: ``status`` is ok, unavailable (no recipes in this nsys), not_run, failed or unparsed."""

    recipe: str
    status: str
    reason: str | None = None
    table: pa.Table | None = None  # normalised: SUMMARY_SCHEMA for the kernel summary, gap rows for gpu_gaps
    summary: dict[str, Any] = field(default_factory=dict)


def recipes_unavailable(nsys: str, version: tuple[int, ...] | None) -> str | None:
    """Why the installed nsys has no ``nsys recipe`` (None when it has): asked with ``nsys recipe --help`` (an nsys
    without recipes answers "Unknown command: recipe"), the version rule (2023.3+) when that cannot run."""
    since = f"recipes ship with Nsight Systems {RECIPE_MIN_VERSION[0]}.{RECIPE_MIN_VERSION[1]} and later"
    try:
        proc = subprocess.run([nsys, "recipe", "--help"], capture_output=True, text=True, timeout=60, check=False)
        text = (proc.stdout or "") + (proc.stderr or "")
    except (OSError, subprocess.SubprocessError):
        text = None
    if text is not None and "unknown command" in text.lower():
        return f"nsys {_fmt(version)} has no `nsys recipe` (it answers 'Unknown command: recipe'; {since})"
    if text is not None and proc.returncode == 0:
        return None
    if version is None:
        return "the installed nsys did not report its version and `nsys recipe --help` failed"
    if version[:2] < RECIPE_MIN_VERSION:
        return f"nsys {_fmt(version)} has no `nsys recipe` ({since})"
    return None


def run_recipe(nsys: str, recipe: str, report: Path, out_dir: Path, extra: list[str] | None = None,
               timeout_s: float = EXPORT_TIMEOUT_S) -> str | None:
    """Run ``nsys recipe RECIPE`` on ``report`` into ``out_dir``; None on success, else nsys's message."""
    cmd = [nsys, "recipe", recipe, "--input", str(Path(report).resolve()), "--output", str(Path(out_dir).resolve()),
           "--force-overwrite", *(extra or [])]  # absolute paths: a name starting with '-' is never an option
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return f"did not finish within {timeout_s:.0f} s"
    except OSError as exc:
        return f"cannot run {nsys}: {exc}"
    if proc.returncode != 0 or not Path(out_dir).is_dir():
        lines = [line.strip() for line in ((proc.stderr or "") + "\n" + (proc.stdout or "")).splitlines()]
        return f"exit {proc.returncode}: " + " | ".join([line for line in lines if line][-3:])
    return None


def _column(table: pa.Table, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in table.column_names), None)


def _read_table(out_dir: Path, stem: str) -> pa.Table | None:
    """``stem``.parquet of a recipe's output folder, else ``stem``.csv (``--csv``); None when neither exists."""
    if (out_dir / f"{stem}.parquet").is_file():
        return pq.read_table(out_dir / f"{stem}.parquet")
    if (out_dir / f"{stem}.csv").is_file():
        return pacsv.read_csv(out_dir / f"{stem}.csv")
    return None


def parse_kernel_recipe(out_dir: Path) -> RecipeResult:
    """The per-kernel instances and total ns of a ``cuda_gpu_kern_sum`` output folder (``all_stats``)."""
    table = _read_table(out_dir, "all_stats")
    if table is None:
        found = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
        return RecipeResult(KERNEL_RECIPE, "unparsed", f"no all_stats.parquet or all_stats.csv in the output "
                            f"(found: {', '.join(found) or 'nothing'})")
    name, count, total = (_column(table, c) for c in (_NAME_COLUMNS, _COUNT_COLUMNS, _TOTAL_COLUMNS))
    if name is None or count is None or total is None:
        return RecipeResult(KERNEL_RECIPE, "unparsed", "all_stats has no name/instances/total columns "
                            f"(columns: {', '.join(table.column_names)})")
    rows: dict[str, tuple[int, int]] = {}
    for n, c, t in zip(table.column(name).to_pylist(), table.column(count).to_pylist(),
                       table.column(total).to_pylist(), strict=True):
        if n is None:
            continue
        prev = rows.get(str(n), (0, 0))
        rows[str(n)] = (prev[0] + int(round(float(c or 0))), prev[1] + int(round(float(t or 0))))
    return RecipeResult(KERNEL_RECIPE, "ok", table=_summary_table(rows))


def parse_gaps_recipe(out_dir: Path) -> RecipeResult:
    """The gap rows of a ``gpu_gaps`` output folder: every table in it but ``files`` with a duration (or
    start/end) column, with ``duration_ns`` added."""
    tables = []
    for p in sorted(out_dir.glob("*.parquet")) if out_dir.is_dir() else []:
        if p.stem == "files":
            continue
        t = pq.read_table(p)
        dur = _column(t, _DURATION_COLUMNS)
        if dur is not None:
            ns = t.column(dur).cast(pa.int64())
        else:
            pair = next(((s, e) for s, e in _START_END_COLUMNS if s in t.column_names and e in t.column_names), None)
            if pair is None:
                continue
            ns = pc.subtract(t.column(pair[1]).cast(pa.int64()), t.column(pair[0]).cast(pa.int64()))
        tables.append(t.append_column("duration_ns", ns).append_column("source_file", pa.repeat(p.name, len(t))))
    if not tables:
        found = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
        return RecipeResult(GAPS_RECIPE, "unparsed", "no table with a gap duration or start/end in the output "
                            f"(found: {', '.join(found) or 'nothing'})")
    table = pa.concat_tables(tables, promote_options="permissive")
    durations = [d for d in table.column("duration_ns").to_pylist() if d is not None]
    return RecipeResult(GAPS_RECIPE, "ok", table=table,
                        summary={"gaps": len(durations), "total_ns": sum(durations),
                                 "max_ns": max(durations, default=None)})


def _summary_table(rows: dict[str, tuple[int, int]]) -> pa.Table:
    names = sorted(rows)
    return pa.table([names, [rows[n][0] for n in names], [rows[n][1] for n in names]], schema=SUMMARY_SCHEMA)


def _as_dict(table: pa.Table) -> dict[str, tuple[int, int]]:
    return {r["name"]: (r["instances"], r["total_ns"]) for r in table.to_pylist()}


def lake_short_name_summary(lake_root: Any, trace_id: str) -> dict[str, tuple[int, int]]:  # noqa: ANN401
    """{kernel short name: (instances, total ns)} of one trace in the lake."""
    import duckdb

    lake = Lake(lake_root)
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET enable_progress_bar = false")  # never on stdout (taxbreak.store.query._ro)
        lake.register_filesystem(con)
        rows = con.execute("SELECT short_name, count(*), sum(dur_ns) FROM read_parquet(?) "
                           "WHERE kind = 'kernel' AND short_name IS NOT NULL GROUP BY short_name",
                           [str(lake.events_path(trace_id))]).fetchall()
    finally:
        con.close()
    return {r[0]: (int(r[1]), int(r[2] or 0)) for r in rows}


def run_recipes(nsys: str, version: tuple[int, ...] | None, trace: Path, workdir: Path,
                gap_ms: int = GAP_THRESHOLD_MS) -> dict[str, RecipeResult]:
    """The kernel-summary and GPU-gap recipes on ``trace`` (parsed), or why they were not run."""
    unavailable = recipes_unavailable(nsys, version)
    if unavailable is not None:
        return {r: RecipeResult(r, "unavailable", unavailable) for r in (KERNEL_RECIPE, GAPS_RECIPE)}
    if Path(trace).suffix.lower() not in (".nsys-rep", ".qdrep"):
        why = "recipes read .nsys-rep reports; TRACE is a SQLite export (give the report to run them)"
        return {r: RecipeResult(r, "not_run", why) for r in (KERNEL_RECIPE, GAPS_RECIPE)}
    out: dict[str, RecipeResult] = {}
    for recipe, extra, parse in ((KERNEL_RECIPE, [], parse_kernel_recipe),
                                 (GAPS_RECIPE, ["--gap", str(gap_ms)], parse_gaps_recipe)):
        folder = workdir / recipe
        error = run_recipe(nsys, recipe, trace, folder, extra)
        if error is not None:
            out[recipe] = RecipeResult(recipe, "failed", f"nsys recipe {recipe} failed ({error})")
            continue
        try:
            out[recipe] = parse(folder)
        except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
            out[recipe] = RecipeResult(recipe, "unparsed", f"cannot read the {recipe} output: {exc}")
    return out


def compare_kernel_recipe(result: RecipeResult, ours: dict[str, tuple[int, int]],
                          ours_short: dict[str, tuple[int, int]]) -> tuple[str, list[str]]:
    """(key used, differences) of the recipe's kernel summary against the lake: by demangled name, or by short
    name when more of the recipe's names are short names."""
    theirs = _as_dict(result.table)
    by_short = len(set(theirs) & set(ours_short)) > len(set(theirs) & set(ours))
    return ("short_name" if by_short else "name"), compare_summaries(ours_short if by_short else ours, theirs)


def store_check(lake: Any, trace_id: str, record: dict[str, Any], tables: dict[str, pa.Table]) -> str:  # noqa: ANN401
    """Write ``check.json`` and ``tables`` (``<name>.parquet``) under ``checks/nsys/<trace_id>/`` in the lake
    (a local folder or ``s3://``), replacing an earlier check's files; returns where."""

    rel = f"{CHECKS_DIR}/{trace_id}"
    lake.store.delete([rel])  # the lake's object store (taxbreak.ingest.objects): a local folder or s3://
    for name, table in tables.items():
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        lake.store.put_bytes(f"{rel}/{name}.parquet", sink.getvalue().to_pybytes())
    lake.store.put_text(f"{rel}/check.json", json.dumps(record, indent=2, sort_keys=True, default=str))
    return lake.store.path(rel)


def cmd_nsys_check(args: argparse.Namespace) -> int:
    trace = Path(args.trace)
    nsys = find_nsys()
    if nsys is None:
        print("nsys-check needs the Nsight Systems CLI: no `nsys` on PATH, none under <venv>/nsys "
              "(tests/ingest/setup_nsys.sh unpacks one there) and TAXBREAK_NSYS is not set; install Nsight Systems "
              "(nsys) or set TAXBREAK_NSYS to its path", file=sys.stderr)
        return 2
    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    res = ingest_file(trace, lake, cache_dir=paths.cache, limits=ingest_limits())
    if res.status not in ("ingested", "unchanged"):
        print(f"nsys-check: cannot ingest: {res.error}", file=sys.stderr)
        return 2
    try:
        theirs = nsys_kernel_summary(nsys, trace)
    except (IngestError, OSError, subprocess.SubprocessError) as exc:
        print(f"nsys-check: {exc}", file=sys.stderr)
        return 2
    version = nsys_version(nsys)
    ours = lake_kernel_summary(lake, res.trace_id)
    diffs = compare_summaries(ours, theirs)
    n_ours = sum(c for c, _ in ours.values())
    total_ours = sum(t for _, t in ours.values())
    record: dict[str, Any] = {
        "trace_id": res.trace_id, "file": str(trace), "nsys": nsys, "nsys_version": _fmt(version),
        "checked_at_ns": time.time_ns(),
        "lake": {"kernel_names": len(ours), "kernels": n_ours, "total_ns": total_ours},
        "stats": {"status": "mismatch" if diffs else "agree", "differences": diffs[:200]},
        "recipes": {},
    }
    tables = {"kernel_summary_lake": _summary_table(ours), "kernel_summary_stats": _summary_table(theirs)}
    if getattr(args, "no_recipes", False):
        recipes = {r: RecipeResult(r, "not_run", "--no-recipes") for r in (KERNEL_RECIPE, GAPS_RECIPE)}
    else:
        with tempfile.TemporaryDirectory(prefix="taxbreak-recipe-") as wd:
            recipes = run_recipes(nsys, version, trace, Path(wd), getattr(args, "gap_ms", GAP_THRESHOLD_MS))
    recipe_diffs: list[str] = []
    for name, r in recipes.items():
        entry: dict[str, Any] = {"status": r.status, "reason": r.reason, **r.summary}
        if name == KERNEL_RECIPE and r.status == "ok":
            key, recipe_diffs = compare_kernel_recipe(r, ours, lake_short_name_summary(lake, res.trace_id))
            entry.update(compared_by=key, agreement="mismatch" if recipe_diffs else "agree",
                         differences=recipe_diffs[:200])
            tables["kernel_summary_recipe"] = r.table
        elif name == GAPS_RECIPE and r.status == "ok":
            entry["gap_threshold_ms"] = getattr(args, "gap_ms", GAP_THRESHOLD_MS)
            tables["recipe_gpu_gaps"] = r.table
        record["recipes"][name] = entry
    try:
        where = store_check(lake, res.trace_id, record, tables)
    except (OSError, pa.ArrowException) as exc:
        where = None
        print(f"nsys-check: could not store the results in the lake ({exc})", file=sys.stderr)

    if diffs:
        print(f"MISMATCH: {len(diffs)} of {len(set(ours) | set(theirs))} kernel names differ", file=sys.stderr)
        for line in diffs[:50]:
            print("  " + line, file=sys.stderr)
    else:
        print(f"OK: {len(ours)} kernel names, {n_ours:,} kernels, {total_ours:,} ns agree with the kernel summary "
              "of nsys stats")
    _print_recipes(recipes, record["recipes"], recipe_diffs)
    if where is not None:
        print(f"results stored in {where}")
    return 1 if diffs or recipe_diffs else 0


def _print_recipes(recipes: dict[str, RecipeResult], entries: dict[str, dict], recipe_diffs: list[str]) -> None:
    statuses = {r.status for r in recipes.values()}
    if statuses == {"unavailable"}:
        print(f"nsys recipe: not available: {next(iter(recipes.values())).reason}; the cross-check rests on "
              "nsys stats alone")
        return
    for name, r in recipes.items():
        e = entries[name]
        if r.status != "ok":
            out = sys.stderr if r.status in ("failed", "unparsed") else sys.stdout
            print(f"nsys recipe {name}: {r.status}: {r.reason}", file=out)
        elif name == KERNEL_RECIPE and recipe_diffs:
            print(f"nsys recipe {name}: MISMATCH: {len(recipe_diffs)} kernel names differ (by {e['compared_by']})",
                  file=sys.stderr)
            for line in recipe_diffs[:50]:
                print("  " + line.replace(" vs nsys ", " vs recipe "), file=sys.stderr)
        elif name == KERNEL_RECIPE:
            print(f"nsys recipe {name}: agrees per kernel {e['compared_by']}")
        else:
            print(f"nsys recipe {name}: {e['gaps']:,} gaps of >= {e['gap_threshold_ms']} ms, "
                  f"{e['total_ns']:,} ns in all (stored, not compared)")
