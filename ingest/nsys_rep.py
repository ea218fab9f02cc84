""".nsys-rep reports: converted with the installed ``nsys export --type sqlite``, then read as SQLite exports.

``nsys`` comes from ``$TAXBREAK_NSYS``, PATH or ``<venv>/nsys`` (``find_nsys``). The version that wrote a report
comes from its header tag (``NVIDIA Tegra Profiler Report 2025@1@1@110-...``) or, when the header has none (as some
2023.1 reports), from the version text in the report (``2023.1.1.127-<build>v0``, kept in the session record near
the end of the file); a report newer than the installed nsys, or one nsys fails to read with a format/version error,
is refused with "needs nsys >= X" naming the report. Every path handed to nsys is absolute, so a file name starting
with ``-`` is never taken for an option. Errors name the user's ``.nsys-rep``, never the cached export.

The export goes into ``cache_dir`` under the report's content
hash: written to a temporary name in the same folder and renamed only when ``nsys`` succeeded, so an
interrupted or failed conversion leaves nothing behind, and a re-ingest reuses the finished export.  Without a
cache folder (``ingest_file(..., cache_dir=None)``, a library call) the export goes into the ingest's own work
folder and goes with it: never into a shared folder under the system's temporary directory, which outlived every
ingest (a leftover in the reliability suite) and which another user of the machine could have filled first.
Also here: ``nsys_check``, the cross-check of our kernel table against ``nsys stats``' kernel summary
(``cuda_gpu_kern_sum``; ``gpukernsum`` before nsys 2023).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from taxbreak.ingest import file_sha256
from taxbreak.ingest.base import AdapterOutput, IngestError, OpenContext
from taxbreak.ingest.lake import Lake
from taxbreak.ingest.nsys_sqlite import read_nsys_sqlite

if TYPE_CHECKING:
    from taxbreak.ingest.lake import Lake

NSYS_ENV = "TAXBREAK_NSYS"
EXPORT_TIMEOUT_S = 600
VERSION_TIMEOUT_S = 30
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
_VERSION_RE = re.compile(r"(\d{4})\.(\d+)\.(\d+)(?:\.(\d+))?")
# The version text inside a report: year.major.minor.patch-<build id>v<n> (e.g. 2023.4.4.54-234433681190v0).
_REPORT_TEXT_VERSION_RE = re.compile(rb"(?<![\d.])(20\d\d)\.(\d{1,2})\.(\d{1,2})\.(\d{1,6})-\d{4,}v\d")
REPORT_SCAN_BYTES = 1 << 20  # the version text is looked for in the first and the last MiB of a report
# nsys export messages that mean "this nsys cannot read that report's format" (seen: a 2023.1 report through 2022.4)
_FORMAT_ERROR_RE = re.compile(r"ProtobufParseException|Version number is invalid|unsupported.*version|"
                              r"newer version|version.*not supported", re.IGNORECASE)
INSTALL_HINT = (
    "install the Nsight Systems CLI (nsys) version {need} or newer and put it on PATH (or set TAXBREAK_NSYS to "
    "its path), or export the report yourself with `nsys export --type sqlite REPORT.nsys-rep` and drop the "
    ".sqlite file instead"
)


VENV_NSYS_DIR = "nsys"  # tests/ingest/setup_nsys.sh unpacks the Nsight Systems CLI into <venv>/nsys


def find_nsys() -> str | None:
    """``$TAXBREAK_NSYS``, else ``nsys`` on PATH, else the one ``tests/ingest/setup_nsys.sh`` unpacked into the
    running virtual environment (``<venv>/nsys/**/bin/nsys``, the first in sorted order, as that script picks)."""
    env = os.environ.get(NSYS_ENV)
    if env:
        return env if Path(env).exists() else None
    found = shutil.which("nsys")
    if found:
        return found
    unpacked = sorted(p for p in (Path(sys.prefix) / VENV_NSYS_DIR).glob("**/bin/nsys")
                      if p.is_file() and os.access(p, os.X_OK))
    return str(unpacked[0]) if unpacked else None


def parse_version(text: str) -> tuple[int, ...] | None:
    m = _VERSION_RE.search(text)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def _fmt(v: tuple[int, ...] | None) -> str:
    return ".".join(str(x) for x in v) if v else "unknown"


def report_version(path: Path) -> tuple[int, ...] | None:
    """Version of nsys that wrote the report: its header tag ('NVIDIA Tegra Profiler Report 2025@1@1@110-...'), else
    the version text in its first or last ``REPORT_SCAN_BYTES`` (the highest one found); None when neither."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(REPORT_SCAN_BYTES)
            size = fh.seek(0, os.SEEK_END)
            tail = b""
            if size > REPORT_SCAN_BYTES:
                fh.seek(max(REPORT_SCAN_BYTES, size - REPORT_SCAN_BYTES))
                tail = fh.read(REPORT_SCAN_BYTES)
    except OSError:
        return None
    if not head.startswith(REPORT_MAGIC):
        return None
    m = re.match(rb"NVIDIA Tegra Profiler Report\s*(\d{4})@(\d+)@(\d+)(?:@(\d+))?", head)
    if m:
        return tuple(int(g) for g in m.groups() if g is not None)
    found = [tuple(int(g) for g in t.groups()) for t in _REPORT_TEXT_VERSION_RE.finditer(head + b"\n" + tail)]
    return max(found) if found else None


def nsys_version(nsys: str) -> tuple[int, ...] | None:
    try:
        proc = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(proc.stdout + proc.stderr)


def _hash(path: Path) -> str:
    return file_sha256(path)


def convert_report(path: Path, cache_dir: Path, *, content_hash: str | None = None,
                   timeout_s: float = EXPORT_TIMEOUT_S) -> Path:
    """The SQLite export of ``path`` in ``cache_dir`` (made with nsys now, or reused from an earlier run)."""
    path = Path(path)
    rep_v = report_version(path)
    cache_root = Path(cache_dir)
    key = content_hash or _hash(path)
    target = cache_root / "nsys-export" / f"{key}.sqlite"
    if target.exists():
        return target
    nsys = find_nsys()
    if nsys is None:
        raise IngestError(
            f"{path}: cannot convert the .nsys-rep report (written by nsys {_fmt(rep_v)}): no nsys found; "
            + INSTALL_HINT.format(need=_fmt(rep_v))
        )
    have_v = nsys_version(nsys)
    if rep_v is not None and have_v is not None and have_v[:3] < rep_v[:3]:
        raise IngestError(
            f"{path}: needs nsys >= {_fmt(rep_v)}: the report was written by nsys {_fmt(rep_v)}, newer than the "
            f"installed nsys {_fmt(have_v)} "
            f"({nsys}) can read; " + INSTALL_HINT.format(need=_fmt(rep_v))
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-{uuid.uuid4().hex[:8]}-", dir=target.parent))
    tmp_out = tmp_dir / "export.sqlite"
    try:
        try:
            proc = subprocess.run(  # absolute paths: a name starting with '-' is never an option
                [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
                 str(tmp_out.resolve()), str(path.resolve())],
                capture_output=True, text=True, timeout=timeout_s, check=False,
            )
        except subprocess.TimeoutExpired:
            raise IngestError(f"{path}: nsys export did not finish within {timeout_s:.0f} s ({nsys})") from None
        except OSError as exc:
            raise IngestError(f"{path}: cannot run {nsys}: {exc}") from None
        if proc.returncode != 0 or not tmp_out.exists():
            lines = [line.strip() for line in ((proc.stderr or "") + "\n" + (proc.stdout or "")).splitlines()]
            lines = [line for line in lines if line]
            tail = " | ".join(lines[-3:])
            format_lines = [line for line in lines if _FORMAT_ERROR_RE.search(line)]
            if format_lines:
                newer = rep_v is not None and (have_v is None or have_v[:3] < rep_v[:3])
                need = f">= {_fmt(rep_v)}" if newer else f"newer than {_fmt(have_v)}"
                raise IngestError(
                    f"{path}: needs nsys {need}: the installed nsys {_fmt(have_v)} ({nsys}) cannot read this "
                    f"report (nsys export: {' | '.join(format_lines[-3:])}); "
                    + INSTALL_HINT.replace("version {need} or newer", f"version {need.removeprefix('>= ')}")
                )
            raise IngestError(
                f"{path}: nsys export failed (exit {proc.returncode}, nsys {_fmt(have_v)}, report {_fmt(rep_v)}): "
                + tail
            )
        os.replace(tmp_out, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def read_nsys_rep(path: Path, trace_id: str, *, cache_dir: Path | None, workdir: Path) -> AdapterOutput:
    """``cache_dir`` None: the export is made in ``workdir``, this ingest's temporary folder, and removed with it."""
    path = Path(path)
    export = convert_report(path, cache_dir if cache_dir is not None else workdir, content_hash=trace_id)
    out = read_nsys_sqlite(export, trace_id, source_name=str(path))  # errors name the report, not the cache
    out.info.metadata["converted_export"] = str(export)
    rep_v = report_version(path)
    if rep_v is not None:
        out.info.tool_versions["nsys_report"] = _fmt(rep_v)
    return out


def open_trace(path: Path, trace_id: str, ctx: OpenContext) -> AdapterOutput:
    """The registry's opener (``taxbreak.ingest.ADAPTERS``)."""
    return read_nsys_rep(path, trace_id, cache_dir=ctx.cache_dir, workdir=ctx.workdir)


# -- nsys-check --------------------------------------------------------------------------------------------------
KERNEL_SUMMARY_REPORTS = ("cuda_gpu_kern_sum", "gpukernsum")  # the name since nsys 2023.x, and before


def nsys_kernel_summary(nsys: str, trace: Path, timeout_s: float = EXPORT_TIMEOUT_S) -> dict[str, tuple[int, int]]:
    """{kernel name: (instances, total ns)} from ``nsys stats``' kernel summary as CSV (``cuda_gpu_kern_sum``, or
    ``gpukernsum`` on an nsys older than that name)."""
    for report in KERNEL_SUMMARY_REPORTS:
        proc = subprocess.run(
            [nsys, "stats", "--report", report, "--format", "csv", "--output", "-", str(Path(trace).resolve())],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
        if f"Report '{report}' could not be found" not in proc.stdout + proc.stderr:
            break
    if proc.returncode != 0:
        raise IngestError(f"{trace}: nsys stats failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    lines = proc.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "Instances" in line and "Name" in line), None)
    if start is None:
        raise IngestError(f"{trace}: no kernel summary table in the nsys stats output ({report})")
    out: dict[str, tuple[int, int]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = row.get("Name")
        if not name:
            continue
        total = row.get("Total Time (ns)") or row.get("Total Time") or "0"
        count, ns = int(float(row.get("Instances") or 0)), int(float(total))
        prev = out.get(name, (0, 0))
        out[name] = (prev[0] + count, prev[1] + ns)
    return out


def lake_kernel_summary(lake_root: str | os.PathLike[str] | Lake, trace_id: str) -> dict[str, tuple[int, int]]:
    """{kernel name: (instances, total ns)} of one trace in the lake (a local folder or ``s3://``)."""
    import duckdb

    lake = Lake(lake_root)
    part = lake.events_path(trace_id)
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions = false")
        lake.register_filesystem(con)
        rows = con.execute(
            "SELECT name, count(*), sum(dur_ns) FROM read_parquet(?) WHERE kind = 'kernel' GROUP BY name",
            [str(part)],
        ).fetchall()
    finally:
        con.close()
    return {r[0]: (int(r[1]), int(r[2] or 0)) for r in rows}


def compare_summaries(ours: dict[str, tuple[int, int]], theirs: dict[str, tuple[int, int]]) -> list[str]:
    """Differences as readable lines (empty when both agree exactly)."""
    diffs = []
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        if a != b:
            diffs.append(f"{name[:80]}: taxbreak {a or (0, 0)} vs nsys {b or (0, 0)} (instances, total ns)")
    return diffs
