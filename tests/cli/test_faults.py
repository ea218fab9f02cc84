"""Issue 30 item 4: ordinary faults of the machine (a full disk at the warehouse's COMMIT or under the marts, a
read-only or refused folder, the lake removed during a run) give one line naming the path, the cause and what to
do, exit 1, and change nothing a reader sees; a failure replayed from the catalogue says it is an earlier one.

Faults are injected at the write points (``TAXBREAK_FAULT_POINT=POINT=KIND``, ``taxbreak.store.faults``) or by
patching the one write a command makes: these tests run as root, which no chmod stops, and make no small disk."""

from __future__ import annotations

import errno
import hashlib
import re
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from cli_support import MIXED_ID
from test_cli_writer import table_state

from taxbreak.cli.main import main
from taxbreak.engine import analysis
from taxbreak.engine.plan import plan_tables
from taxbreak.ingest import Lake
from taxbreak.ingest.oserrors import classify
from taxbreak.store.faults import FAULT_ENV, ordinary_fault, shown_path

# the texts DuckDB 2.0 gave on a full 2 MiB tmpfs (measured while writing this test)
COMMIT_FULL = ('TransactionContext Error: Failed to commit: Could not write file "/w/taxbreak.duckdb": No space '
               'left on device')
COPY_FULL = ('IO Error: Async write failed for range [offset=8136, size=4051]: {"exception_type":"IO",'
             '"exception_message":"Could not write file \\"/w/marts/.staging-4ddf/kernel_taxbreak/trace_id=a/'
             'data_0.parquet\\": No space left on device","errno":"28"}')


def _paths(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "taxbreak.duckdb")]


def _files(home: Path) -> dict[str, str]:
    """What a reader can see: every file of the lake, marts and exports by content (the writers' lock files and
    pending markers, the readers' pins left out), and every warehouse table's rows."""
    out = {}
    for p in sorted(home.rglob("*")):
        rel = str(p.relative_to(home))
        if p.is_file() and not rel.startswith(("taxbreak.duckdb", "in/")) and ".pending-" not in p.name \
                and p.parent.name != ".readers":
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    if (home / "taxbreak.duckdb").exists():
        out["tables"] = repr(table_state(home / "taxbreak.duckdb"))
    return out


@pytest.fixture
def analyzed(home: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["analyze", "-q", *_paths(home)]) == 0
    capsys.readouterr()
    return home


# -- the mapping ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("exc", "kind", "path"), [
    (OSError(errno.ENOSPC, "No space left on device", "/w/lake/catalogue/x"), "no_space", "/w/lake/catalogue/x"),
    (OSError(errno.EROFS, "Read-only file system", "/w/lake"), "read_only", "/w/lake"),
    (PermissionError(errno.EACCES, "Permission denied", "/w/exports"), "permission", "/w/exports"),
    (OSError(errno.EPERM, "Operation not permitted", "/w/x"), "permission", "/w/x"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/w/lake"), "vanished", "/w/lake"),
    (duckdb.TransactionException(COMMIT_FULL), "no_space", "/w/taxbreak.duckdb"),
    (duckdb.IOException(COPY_FULL), "no_space", "/w/marts/.staging-4ddf/kernel_taxbreak/trace_id=a/data_0.parquet"),
    (duckdb.IOException('Cannot open file "/w/taxbreak.duckdb.wal": Read-only file system'), "read_only",
     "/w/taxbreak.duckdb.wal"),
    (OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"), "no_space", None),
])
def test_classify_reads_errno_and_the_systems_words(exc: BaseException, kind: str, path: str | None) -> None:
    fault = classify(exc)
    assert fault is not None and (fault.kind, fault.path) == (kind, path)


def test_no_other_error_is_an_ordinary_fault() -> None:
    for exc in (ValueError("no space left"), duckdb.BinderException("column x not found"),
                OSError(errno.EISDIR, "Is a directory", "/w"), KeyError("x")):
        assert classify(exc) is None
    # a cause along the chain counts (an error raised while handling a full disk)
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/w/x")
        except OSError as inner:
            raise RuntimeError("publish failed") from inner
    except RuntimeError as outer:
        found = classify(outer)
    assert found is not None and found.kind == "no_space"


def test_the_line_names_the_store_not_its_temporary_file(tmp_path: Path) -> None:
    marts, lake = tmp_path / "marts", tmp_path / "lake"
    marts.mkdir()
    lake.mkdir()
    staged = marts / ".staging-4ddf" / "kernel_taxbreak" / "data_0.parquet"
    assert shown_path(str(staged), [lake, marts]) == str(marts)
    assert shown_path(str(lake / "_staging" / "h-1-x" / "events.parquet"), [lake, marts]) == str(lake)
    assert shown_path(str(marts / "_manifest.json"), [lake, marts]) == str(marts / "_manifest.json")
    # a vanished path is named by the highest folder that is gone with it
    gone = tmp_path / "lake2" / "events" / "trace_id=a" / "part-0.parquet"
    assert shown_path(str(gone), [lake]) == str(tmp_path / "lake2")
    assert shown_path(str(gone), [lake], vanished=False) == str(gone)
    line = ordinary_fault(duckdb.TransactionException(COMMIT_FULL), roots=[], default=tmp_path, command="analyze")
    assert str(line) == ("/w/taxbreak.duckdb: no space left on the device — free space there, then run "
                         "`taxbreak analyze` again")
    # no path in the error: the command's store
    line = ordinary_fault(OSError("No space left on device"), roots=[], default=lake, command="ingest")
    assert str(line).startswith(f"{lake}: no space left on the device — ")


# -- the commands -----------------------------------------------------------------------------------------------
def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("point", "named"), [
    ("before_commit=no_space", "taxbreak.duckdb: no space left on the device"),  # the warehouse's COMMIT
    ("marts_staged=no_space", "marts: no space left on the device"),  # the marts' disk, after the commit
    ("before_commit=read_only", "taxbreak.duckdb: the file system is read-only"),
    ("marts_staged=permission", "marts: permission denied"),
])
def test_analyze_on_a_full_or_refused_disk(analyzed: Path, point: str, named: str, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    home = analyzed
    before = _files(home)
    monkeypatch.setenv(FAULT_ENV, point)
    assert main(["analyze", "-q", *_paths(home)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"taxbreak: {home}/{named} — ") and line.endswith("then run `taxbreak analyze` again")
    assert _files(home) == before  # tables, lake, marts and snapshot as they were
    monkeypatch.delenv(FAULT_ENV)
    assert main(["analyze", "-q", *_paths(home)]) == 0  # the space freed: the run goes through
    assert _files(home)["tables"] == before["tables"]


@pytest.mark.parametrize("argv", [["forget", MIXED_ID[:12]], ["whatif", MIXED_ID[:12], "--host-speedup", "2",
                                                                 "--save"]])
def test_other_writers_on_a_full_warehouse_disk(analyzed: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    home = analyzed
    before = _files(home)
    monkeypatch.setenv(FAULT_ENV, "before_commit=no_space")
    assert main([*argv, "-q", *_paths(home)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line == (f"taxbreak: {home}/taxbreak.duckdb: no space left on the device — free space there, then run "
                    f"`taxbreak {argv[0]}` again")
    assert _files(home) == before  # forget: the trace still in the tables, marts and lake


def test_report_and_export_into_a_read_only_folder(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import taxbreak.read.export as export
    import taxbreak.read.report as report

    home = analyzed

    def refused(path: Path, *_a: object, **_k: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path) + ".tmp")

    monkeypatch.setattr(report.Path, "write_text", refused)
    assert main(["report", "-o", str(home / "out"), "--warehouse", str(home / "taxbreak.duckdb")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"taxbreak: {home}/out/") and ": the file system is read-only — make it writable" in line
    monkeypatch.undo()

    real_open = open

    def full(path: object, mode: str = "r", *a: object, **k: object):  # noqa: ANN202 - open's result
        if "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(export, "open", full, raising=False)
    target = home / "x.chrome.json"
    assert main(["export", MIXED_ID[:12], "-o", str(target), "--warehouse", str(home / "taxbreak.duckdb")]) == 1
    assert _one_line(capsys.readouterr().err) == (
        f"taxbreak: {target}: no space left on the device — free space there, then run `taxbreak export` again")
    assert not target.exists() and not target.with_name(target.name + ".tmp").exists()


def test_the_lake_removed_during_analyze(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import taxbreak.engine.analysis as analysis

    home = analyzed
    tables = table_state(home / "taxbreak.duckdb")
    real = analysis.prepare

    def vanish(*a: object, **k: object) -> object:  # the lake listed by the command, then removed
        shutil.rmtree(home / "lake")
        return real(*a, **k)

    monkeypatch.setattr(analysis, "prepare", vanish)
    assert main(["analyze", "-q", *_paths(home)]) == 1
    assert _one_line(capsys.readouterr().err) == (
        f"taxbreak: {home}/lake: it was removed or moved while the command ran — restore it, or point taxbreak at "
        "where it is now, then run `taxbreak analyze` again")
    assert table_state(home / "taxbreak.duckdb") == tables


def test_ingest_on_a_full_lake_records_nothing_and_replays_say_earlier(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reliability.corpus import GOOD

    (tmp_path / "in").mkdir()
    trace = tmp_path / "in" / "t.json"
    trace.write_bytes(GOOD)
    lake = tmp_path / "lake"

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", full)
    assert main(["ingest", str(trace), "-q", "--lake", str(lake)]) == 1
    assert _one_line(capsys.readouterr().err) == (
        f"taxbreak: {lake}: no space left on the device — free space there, then run `taxbreak ingest` again")
    assert Lake(lake).catalogue().num_rows == 0  # nothing recorded against the file's bytes
    assert not list((lake / "_staging").glob("*")) if (lake / "_staging").exists() else True
    monkeypatch.undo()
    assert main(["ingest", str(trace), "-q", "--lake", str(lake)]) == 0  # space freed: stored at once

    # a failure recorded before this rule (an old "No space left" row): said to be earlier, with how to retry
    bad = tmp_path / "in" / "bad.json"
    bad.write_bytes(GOOD[:-20])
    assert main(["ingest", str(bad), "-q", "--lake", str(lake)]) == 1
    first = capsys.readouterr().err
    assert first.startswith(f"FAILED {bad}: ") and "earlier" not in first
    assert main(["ingest", str(bad), "-q", "--lake", str(lake)]) == 1
    again = capsys.readouterr().err.splitlines()[0]
    assert again.startswith("FAILED earlier (20") and " UTC; the content is unchanged, so it was not read again): " \
        f"{bad}: " in again
    assert again.endswith(f"— `taxbreak retry bad.json` tries it again (or `taxbreak ingest --force {bad}`)")


def _failed_good_trace(home: Path, error: str) -> tuple[Lake, str]:
    """A good Kineto trace at home/in/t.json whose ingest is recorded as failed with ``error``; (lake, trace id)."""
    from reliability.corpus import GOOD

    lake = Lake(home / "lake")
    (home / "in").mkdir()
    trace = home / "in" / "t.json"
    trace.write_bytes(GOOD)
    tid = hashlib.sha256(GOOD).hexdigest()
    lake.record_failure(tid, file_name="t.json", source_path=str(trace), file_bytes=len(GOOD), source_format="kineto",
                        error=error.format(trace=trace), status="failed")
    return lake, tid


def test_retry_whose_tables_find_the_warehouse_busy_says_to_run_analyze(
        analyzed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The same advice when another writer holds the warehouse past the wait: the trace is ingested, so the line
    says to run `taxbreak analyze --trace ID` once the warehouse is free (exit 3), and it goes with that failure only:
    the next retry's line carries none."""
    from taxbreak.store.warehouse import warehouse_lock

    home = analyzed
    lake, tid = _failed_good_trace(home, "{trace}: unexpected OSError while ingesting")
    monkeypatch.setenv("TAXBREAK_WRITER_WAIT_S", "0.2")
    with warehouse_lock(home / "taxbreak.duckdb"):
        assert main(["retry", "t.json", "-q", *_paths(home)]) == 3
    err = _one_line(capsys.readouterr().err)
    assert err.startswith("taxbreak retry: ") and err.endswith(
        f"; when it is free, run `taxbreak analyze --trace {tid[:16]}`: the trace is ingested, the tables were not "
        "built")
    assert lake.catalogue_row(tid)["status"] == "ingested"
    with warehouse_lock(home / "taxbreak.duckdb"):  # nothing failed to retry now: exit 2, no advice left over
        assert main(["retry", "t.json", *_paths(home)]) == 2
    assert "when it is free" not in capsys.readouterr().err


def test_retry_whose_tables_fail_says_to_run_analyze(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: `taxbreak retry` re-ingests a failed trace, then its tables fail at the warehouse's COMMIT (a full
    disk).  The trace is ingested, so the line says to run `taxbreak analyze --trace ID` (it said to run retry
    again, which finds no failed trace); that analyze builds the tables without ingesting the trace again, and a
    second retry ingests nothing and names the same analyze."""
    home = analyzed
    lake, tid = _failed_good_trace(home, "{trace}: unexpected OSError while ingesting: [Errno 28] No space left on "
                                         "device")
    tables = _files(home)["tables"]
    monkeypatch.setenv(FAULT_ENV, "before_commit=no_space")
    assert main(["retry", "t.json", "-q", *_paths(home)]) == 1
    assert _one_line(capsys.readouterr().err) == (
        f"taxbreak: {home}/taxbreak.duckdb: no space left on the device — free space there, then run "
        f"`taxbreak analyze --trace {tid[:16]}`: the trace is ingested, the tables were not built")
    assert _files(home)["tables"] == tables  # the tables as they were
    row = lake.catalogue_row(tid)
    assert row["status"] == "ingested"
    monkeypatch.delenv(FAULT_ENV)
    assert main(["retry", "t.json", *_paths(home)]) == 2  # nothing failed to retry: not ingested again
    assert capsys.readouterr().err.strip() == (
        f"no failed trace matches 't.json': t.json is ingested; `taxbreak analyze --trace {tid[:16]}` builds its "
        "tables")
    assert main(["analyze", "-q", "--trace", tid[:16], *_paths(home)]) == 0
    assert lake.catalogue_row(tid) == row  # the analyze read the lake; the row is the retry's
    con = duckdb.connect(str(home / "taxbreak.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM trace_meta WHERE trace_id = $t", {"t": tid}).fetchone()[0] == 1
    finally:
        con.close()


def test_analyze_out_of_memory_names_the_table_and_the_setting(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """DuckDB's out-of-memory error (int_kernel_links at 10 M kernels under a 6GB memory_limit, until its steps
    became run-local tables, for one) is
    one line naming the table, the limit and the setting to change, exit 1, and nothing published: no traceback.
    A real one: a memory_limit too small for any statement."""
    home = analyzed
    before = _files(home)
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "1MB")
    assert main(["analyze", "-q", *_paths(home)]) == 1
    line = _one_line(capsys.readouterr().err)
    m = re.fullmatch(r"taxbreak analyze: (\w+): DuckDB ran out of memory at memory_limit (.+?) \(Out of Memory "
                     r"Error: .+\); nothing of this run was published\. Set analysis\.duckdb_memory "
                     r"\(\$TAXBREAK_DUCKDB_MEMORY\) to another size and run it again: .+", line)
    assert m is not None, line
    assert m.group(1) == "prepare" or m.group(1) in plan_tables(None)
    assert m.group(2) == "976.5 KiB"  # DuckDB's own spelling of 1MB
    assert _files(home) == before
    monkeypatch.delenv("TAXBREAK_DUCKDB_MEMORY")
    assert main(["analyze", "-q", *_paths(home)]) == 0
    assert _files(home)["tables"] == before["tables"]


def test_out_of_memory_in_a_table_names_that_table(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The table named is the one DuckDB was computing: here int_kernel_links, with the text DuckDB 2.0.1 gave."""
    home = analyzed
    before = _files(home)
    build = analysis._build_table

    def failing(con: duckdb.DuckDBPyConnection, name: str, *args: object) -> int:
        if name == "int_kernel_links":
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 64.0 MiB (5.5 "
                                              "GiB/5.5 GiB used)\n\nPossible solutions:\n* Reducing the number of "
                                              "threads (SET threads=X)")
        return build(con, name, *args)

    monkeypatch.setattr(analysis, "_build_table", failing)
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "512MB")
    assert main(["analyze", "-q", *_paths(home)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("taxbreak analyze: int_kernel_links: DuckDB ran out of memory at memory_limit 488.2 MiB "
                           "(Out of Memory Error: failed to allocate data of size 64.0 MiB (5.5 GiB/5.5 GiB used)); "
                           "nothing of this run was published."), line
    assert _files(home) == before


def test_out_of_memory_in_a_cross_trace_table_names_it(analyzed: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`analyze --trace` computes the trace's tables in its own file and recomputes the cross-trace tables while it
    publishes (publish_run): an out-of-memory error there is the same one line, naming that table, and the
    publication is rolled back whole (the trace's own rows included)."""
    home = analyzed
    before = _files(home)
    cross = {f.name for f in analysis.sql_files() if f.scope == "cross_trace"}

    def failing(*_args: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB "
                                          "(488.2 MiB/488.2 MiB used)")

    monkeypatch.setattr(analysis, "_touched_groups", failing)  # inside the cross-trace build, before its statement
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "512MB")
    assert main(["analyze", "-q", "--trace", MIXED_ID[:16], *_paths(home)]) == 1
    line = _one_line(capsys.readouterr().err)
    m = re.fullmatch(r"taxbreak analyze: (\w+): DuckDB ran out of memory at memory_limit 488\.2 MiB \(Out of Memory "
                     r"Error: could not allocate block of size 256\.0 KiB \(488\.2 MiB/488\.2 MiB used\)\); nothing "
                     r"of this run was published\. .+", line)
    assert m is not None, line
    assert m.group(1) in cross
    assert _files(home) == before
