"""Issue 12: a run for some traces computes its tables without the warehouse's writer lock (in its own file), so
runs of different traces compute at the same time and only their publication waits for the one writer.  What it
publishes is what a serial run gives, including the launch floor another trace measured (an ``all_traces`` table,
read from the readers' snapshot)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from cli_support import MIXED_ID
from sql.scenarios import NULL_ID, build_mixed, mixed_rows, null_kernel_rows, write_trace

from taxbreak.engine import analysis
from taxbreak.engine.plan import sql_files
from taxbreak.ingest import Lake
from taxbreak.store.warehouse import WarehouseBusy, warehouse_lock, writer

KEPT = [f.name for f in sql_files() if f.materialize != "temp"]
OTHER = "e" * 64  # a trace on another host: the documented default floor


def _rows(db: Path, table: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)


def _lake(root: Path, *, mixed: bool) -> Path:
    lake = build_mixed(root) if mixed else Lake(root)
    write_trace(lake, NULL_ID, null_kernel_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="null_kernel_h100.json")
    write_trace(lake, OTHER, mixed_rows(OTHER), gpu="NVIDIA H100 80GB HBM3", file_name="other_host.json",
                host="hostB")
    return root


def test_a_run_computes_while_another_writer_holds_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAXBREAK_WRITER_WAIT_S", "0.5")
    db = tmp_path / "wh" / "taxbreak.duckdb"
    lake = _lake(tmp_path / "lake", mixed=False)
    with writer(db, traces=None) as con:  # the null-kernel trace and the other host's, published (snapshot too)
        analysis.materialize(db, lake, con=con)
    build_mixed(lake)  # the new trace: same GPU model and host as the null-kernel trace
    with warehouse_lock(db):  # another writer holds the warehouse the whole time the run computes
        with analysis.compute_run(db, lake, [MIXED_ID]) as run:
            assert run.trace_ids == [MIXED_ID]
            assert run.counts["kernel_taxbreak"] == 9 and "sweep_points" not in run.counts
            # its floor is the null-kernel trace's, published before it started (read from the snapshot)
            floor = run.con.execute("SELECT t_sys_ns, t_sys_source, t_sys_measured_trace_id FROM trace_launch_floor "
                                    "WHERE trace_id = $t", {"t": MIXED_ID}).fetchall()
            assert floor == [(4200, "measured", NULL_ID)]
            assert run.path.exists() and run.path.parent.parent == Path(str(db) + ".runs")
            with pytest.raises(WarehouseBusy):  # publishing waits for the writer
                with writer(db, traces=run.trace_ids) as con:
                    analysis.publish_run(con, run)
            assert _rows(db, "trace_meta") and MIXED_ID not in {r[0] for r in _rows(db, "trace_meta")}
        assert not run.path.exists()  # the block removed the run's file; nothing was published
    with analysis.compute_run(db, lake, [MIXED_ID]) as run, writer(db, traces=run.trace_ids) as con:
        counts = analysis.publish_run(con, run)
    assert counts["kernel_taxbreak"] == 9 and counts["sweep_points"] == 0  # cross-trace tables: every trace's rows
    assert not list(Path(str(db) + ".runs").rglob("run_*"))
    # every table is what one serial run over the three traces gives, row for row
    full = tmp_path / "full" / "taxbreak.duckdb"
    analysis.materialize(full, lake)
    for name in KEPT:
        assert _rows(db, name) == _rows(full, name), name
    with duckdb.connect(str(db), read_only=True) as con:
        kt = con.execute("SELECT delta_kt_ns FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'",
                         {"t": MIXED_ID}).fetchall()
    assert kt == [(6 * 4200,)]  # six charged launches at the measured floor


def test_a_trace_analysed_before_the_floor_was_measured_keeps_the_default(tmp_path: Path) -> None:
    """Two runs computing at once give one serial order: the trace whose run started before the null-kernel
    trace was published keeps the documented default, as if it had run first (docs/method.md, incremental runs)."""
    db = tmp_path / "wh" / "taxbreak.duckdb"
    lake = tmp_path / "lake"
    build_mixed(lake)
    write_trace(Lake(lake), NULL_ID, null_kernel_rows(), gpu="NVIDIA H100 80GB HBM3",
                file_name="null_kernel_h100.json")
    with analysis.compute_run(db, lake, [MIXED_ID]) as mixed, analysis.compute_run(db, lake, [NULL_ID]) as null:
        with writer(db, traces=null.trace_ids) as con:
            analysis.publish_run(con, null)
        with writer(db, traces=mixed.trace_ids) as con:
            analysis.publish_run(con, mixed)
    floors = {r[0]: (r[3], r[4]) for r in _rows(db, "trace_launch_floor")}
    assert floors == {MIXED_ID: (4510, "default"), NULL_ID: (4200, "measured")}
    # the same as the serial order mixed-then-null
    serial = tmp_path / "serial" / "taxbreak.duckdb"
    for t in (MIXED_ID, NULL_ID):
        with analysis.compute_run(serial, lake, [t]) as run, writer(serial, traces=run.trace_ids) as con:
            analysis.publish_run(con, run)
    for name in KEPT:
        assert _rows(db, name) == _rows(serial, name), name


def test_the_files_of_dead_runs_are_cleared(tmp_path: Path) -> None:
    """A killed run leaves its file; the next run deletes it when its pid is gone (this host) or when it is a day
    old (another host, whose pids mean nothing here); a live run's files stay."""
    import os
    import time

    db = tmp_path / "wh" / "taxbreak.duckdb"
    lake = build_mixed(tmp_path / "lake")
    runs = Path(str(db) + ".runs")
    here = analysis._host_runs(db)  # noqa: SLF001 - this host's folder
    dead = next(p for p in range(4_000_000, 4_100_000) if not Path(f"/proc/{p}").exists())
    files = {
        "dead": here / f"run_{dead}_{'a' * 12}.duckdb",
        "dead_spill": here / f"run_{dead}_{'a' * 12}.duckdb.tmp",
        "alive": here / f"run_{os.getpid()}_{'b' * 12}.duckdb",
        "old_elsewhere": runs / "gone-pod" / f"run_7_{'c' * 12}.duckdb",
        "new_elsewhere": runs / "other-pod" / f"run_7_{'d' * 12}.duckdb",
    }
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "dead_spill":
            path.mkdir()
            (path / "spill.block").write_bytes(b"x")
        else:
            path.write_bytes(b"x")
    two_days_ago = time.time() - 2 * analysis.STALE_RUN_S
    os.utime(files["old_elsewhere"], (two_days_ago, two_days_ago))
    with analysis.compute_run(db, lake.root, [MIXED_ID]) as run:
        assert run.trace_ids == [MIXED_ID]
    left = {name for name, path in files.items() if path.exists()}
    assert left == {"alive", "new_elsewhere"}
