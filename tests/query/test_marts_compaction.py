"""Issue 12: the per-trace marts are compacted into few segment files (taxbreak.store.marts): readers see exactly the
warehouse's rows before and after a compaction, a trace written again supersedes its rows in a segment, a writer
killed between staging and renaming leaves readers the previous snapshot and the next writer catches up, and a
forgotten trace leaves no file that holds it.

Every warehouse here is built by hand: two per-trace tables (``tiny_kernels``: trace t<k> has k kernels, kernel
s lasting 100*s ns, with a HUGEINT column Parquet stores as DOUBLE; ``tiny_meta``: one row per trace) and one
cross-trace table (``tiny_models``), compacted at 3 loose traces with a fan-out of 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from taxbreak.store import marts
from taxbreak.store.faults import FAULT_ENV
from taxbreak.store.warehouse import snapshot_path, writer

TABLES = ("tiny_kernels", "tiny_meta", "tiny_models")


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAXBREAK_MARTS_COMPACT_LOOSE", "3")
    monkeypatch.setenv("TAXBREAK_MARTS_COMPACT_FANOUT", "2")
    monkeypatch.delenv("TAXBREAK_MARTS_KEEP_REPLACED_S", raising=False)  # the default: 600 s
    monkeypatch.delenv(FAULT_ENV, raising=False)
    path = tmp_path / "wh" / "taxbreak.duckdb"
    path.parent.mkdir()
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE tiny_kernels (trace_id VARCHAR, kernel_seq BIGINT, dur_ns BIGINT, wall_ns HUGEINT)")
    con.execute("CREATE TABLE tiny_meta (trace_id VARCHAR, file_name VARCHAR)")
    con.execute("CREATE TABLE tiny_models (model VARCHAR, traces BIGINT)")
    con.close()
    return path


def _fill(con: duckdb.DuckDBPyConnection, k: int, kernels: int | None = None) -> None:
    """Trace t<k> (its rows replaced): ``kernels`` (default k) kernels and one meta row; the model table redone."""
    tid, n = f"t{k}", k if kernels is None else kernels
    for table in ("tiny_kernels", "tiny_meta"):
        con.execute(f"DELETE FROM {table} WHERE trace_id = $t", {"t": tid})
    con.execute("INSERT INTO tiny_kernels SELECT $t, s, 100 * s, 1000 * s FROM range(1, $n + 1) r(s)",
                {"t": tid, "n": n})
    con.execute("INSERT INTO tiny_meta VALUES ($t, $t || '.json')", {"t": tid})
    con.execute("DELETE FROM tiny_models")
    con.execute("INSERT INTO tiny_models SELECT 'tiny', count(*) FROM tiny_meta")


def add(db: Path, k: int, kernels: int | None = None) -> None:
    with writer(db, traces=[f"t{k}"]) as con:
        _fill(con, k, kernels)


def rows(path: Path, table: str) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def assert_snapshot_is_the_warehouse(db: Path) -> None:
    for table in TABLES:
        assert rows(snapshot_path(db), table) == rows(db, table), table
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        types = con.execute("SELECT data_type FROM duckdb_columns() WHERE table_name = 'tiny_kernels'").fetchall()
    assert [t for (t,) in types] == ["VARCHAR", "BIGINT", "BIGINT", "HUGEINT"]


def view_sql(db: Path, table: str) -> str:
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        return con.execute("SELECT sql FROM duckdb_views() WHERE view_name = $t", {"t": table}).fetchone()[0]


def layout(db: Path) -> tuple[list[tuple[int, list[str]]], list[str]]:
    """(segments as (tier, traces) in order of writing, loose traces)."""
    m = marts.load_manifest(marts.marts_dir(db))
    segs = [(s["tier"], s["traces"]) for s in sorted(m.segments.values(), key=lambda s: s["seq"])]
    return segs, m.loose()


def on_disk(db: Path, trace: str) -> int:
    """Rows of ``trace`` in any Parquet file under the marts folder (live, replaced or stray)."""
    files = [str(p) for p in marts.marts_dir(db).rglob("*.parquet") if "tiny_kernels" in p.parts]
    return duckdb.execute("SELECT count(*) FROM read_parquet($f) WHERE trace_id = $t",
                          {"f": files, "t": trace}).fetchone()[0]


def test_tiers_by_hand_and_rows_identical_at_every_step(db: Path) -> None:
    expected = {  # after trace k: compact at 3 loose traces, merge 2 segments of a tier
        1: ([], ["t1"]), 2: ([], ["t1", "t2"]),
        3: ([(0, ["t1", "t2", "t3"])], []),
        4: ([(0, ["t1", "t2", "t3"])], ["t4"]), 5: ([(0, ["t1", "t2", "t3"])], ["t4", "t5"]),
        6: ([(1, ["t1", "t2", "t3", "t4", "t5", "t6"])], []),  # a second tier-0 segment: both merged
        7: ([(1, ["t1", "t2", "t3", "t4", "t5", "t6"])], ["t7"]),
    }
    for k in range(1, 8):
        add(db, k)
        assert layout(db) == expected[k], k
        if k == 3:
            (first_segment,) = marts.load_manifest(marts.marts_dir(db)).segments
        if k in (2, 3, 5, 6):
            assert_snapshot_is_the_warehouse(db)  # rows identical before and after each compaction
    root = marts.marts_dir(db)
    (seg,) = marts.load_manifest(root).segments
    # segments are numbered by the manifest's sequence: t3's compaction wrote 1; t6's wrote 2 and merged it with 1
    # into 3 (the order the readers' views list them in)
    assert first_segment.startswith("000001-") and seg.startswith("000003-")
    assert marts.load_manifest(root).seq == 3
    # the view reads exactly two files: the segment and t7's partition, no glob, no hive partitioning
    sql = view_sql(db, "tiny_kernels")
    assert f"{root.resolve()}/tiny_kernels/seg-{seg}.parquet" in sql and "trace_id=t7/part-" in sql
    assert "*" not in sql and "hive_partitioning = false" in sql and "trace_id IN" not in sql
    # only the HUGEINT column is cast (Parquet holds it as DOUBLE): the others are read as stored
    assert "CAST(wall_ns AS HUGEINT)" in sql and "CAST(dur_ns" not in sql
    # the segment holds 1+2+...+6 = 21 kernels sorted by trace
    seg_file = root / "tiny_kernels" / f"seg-{seg}.parquet"
    got = duckdb.execute("SELECT trace_id FROM read_parquet($f)", {"f": str(seg_file)}).fetchall()
    assert [t for (t,) in got] == sorted(f"t{k}" for k in range(1, 7) for _ in range(k))
    assert marts.trace_counts(db) == {"tiny_kernels": 7, "tiny_meta": 7}
    assert marts.partitions(root / "tiny_meta")["t2"] == seg_file.parent.parent / "tiny_meta" / seg_file.name
    # the compacted partitions and merged segments stay for readers of older snapshots, then go
    replaced = {rel.rsplit("/part-", 1)[0] for rel, _ in marts.load_manifest(root).replaced}  # (versioned names)
    # (the partitions of t1, t2, t4, t5 and the first segment: t3 and t6, staged and compacted by the same write,
    # were never put in place)
    assert replaced == {f"{t}/{f}" for t in ("tiny_kernels", "tiny_meta") for f in (
        "trace_id=t1", "trace_id=t2", "trace_id=t4", "trace_id=t5", f"seg-{first_segment}.parquet")}
    assert list((root / "tiny_kernels" / "trace_id=t1").glob("part-*.parquet"))
    assert not (root / "tiny_kernels" / "trace_id=t3").exists() and not (root / "tiny_kernels" / "trace_id=t6").exists()
    assert len(marts.collect(db, keep_s=0)) == 10
    assert sorted(p.name for p in (root / "tiny_kernels").iterdir()) == ["_empty.parquet", seg_file.name,
                                                                           "trace_id=t7"]
    assert_snapshot_is_the_warehouse(db)


def test_a_trace_written_again_supersedes_its_rows_in_a_segment(db: Path) -> None:
    for k in range(1, 7):
        add(db, k)
    add(db, 2, kernels=5)  # t2 again, 5 kernels instead of 2: loose, its segment rows left out
    assert layout(db) == ([(1, [f"t{k}" for k in range(1, 7)])], ["t2"])
    assert "NOT (trace_id IN ('t2'))" in view_sql(db, "tiny_kernels")
    assert_snapshot_is_the_warehouse(db)
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tiny_kernels WHERE trace_id = 't2'").fetchone()[0] == 5
        assert con.execute("SELECT count(*) FROM tiny_kernels").fetchone()[0] == 21 - 2 + 5
    add(db, 7)
    add(db, 8)  # three loose traces (t2, t7, t8): a new tier-0 segment; the older one still leaves t2 out
    assert layout(db) == ([(1, [f"t{k}" for k in range(1, 7)]), (0, ["t2", "t7", "t8"])], [])
    assert "NOT (trace_id IN ('t2'))" in view_sql(db, "tiny_kernels")
    assert_snapshot_is_the_warehouse(db)
    # t1 and t3 too: half of the tier-1 segment superseded (t1, t2, t3), so it is rewritten alone without them
    # (t4, t5, t6: tier 0), which makes two tier-0 segments: merged
    add(db, 1, kernels=9)
    add(db, 3, kernels=9)
    assert layout(db) == ([(1, ["t2", "t4", "t5", "t6", "t7", "t8"])], ["t1", "t3"])
    assert "trace_id IN" not in view_sql(db, "tiny_kernels")
    assert_snapshot_is_the_warehouse(db)
    add(db, 4, kernels=9)  # t1, t3, t4 loose: compacted; t4 superseded in the tier-1 segment
    assert layout(db) == ([(1, ["t2", "t4", "t5", "t6", "t7", "t8"]), (0, ["t1", "t3", "t4"])], [])
    assert "NOT (trace_id IN ('t4'))" in view_sql(db, "tiny_kernels")
    assert_snapshot_is_the_warehouse(db)
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tiny_kernels").fetchone()[0] == 9 * 3 + 5 + 5 + 6 + 7 + 8


def _killed(db: Path, point: str, k: int) -> subprocess.CompletedProcess:
    """A writer of trace t<k> in another process, killed at ``point``."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_marts_compaction import _fill
        from taxbreak.store.warehouse import writer
        with writer({str(db)!r}, traces=["t{k}"]) as con:
            _fill(con, {k})
    """)
    env = {**os.environ, FAULT_ENV: point}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("point", ["marts_staged", "marts_renamed", "marts_committed"])
def test_a_writer_killed_while_compacting_loses_nothing(db: Path, point: str) -> None:
    add(db, 1)
    add(db, 2)
    root = marts.marts_dir(db)
    before = {t: rows(snapshot_path(db), t) for t in TABLES}
    manifest = (root / marts.MANIFEST).read_text()
    # t3 makes three loose traces: its writer compacts them into a segment, and is killed on the way
    assert _killed(db, point, 3).returncode == -9
    # readers still have the previous snapshot, and every file it names
    assert {t: rows(snapshot_path(db), t) for t in TABLES} == before
    assert len(before["tiny_meta"]) == 2
    segments = list((root / "tiny_kernels").glob("seg-*.parquet"))
    if point == "marts_staged":  # nothing renamed into place, the manifest as it was
        assert (root / marts.MANIFEST).read_text() == manifest and segments == []
    elif point == "marts_renamed":  # the segment in place but not recorded: the manifest as it was
        assert (root / marts.MANIFEST).read_text() == manifest and len(segments) == 1
    else:  # the manifest names the segment; the partitions it replaced are still there for the old snapshot
        assert layout(db) == ([(0, ["t1", "t2", "t3"])], [])
        assert list((root / "tiny_kernels" / "trace_id=t1").glob("part-*.parquet"))
    markers, todo = marts.pending(db)
    assert len(markers) == 1 and todo == ["t3"]
    # the next writer (no traces of its own) catches t3 up; a segment the dead writer never recorded is deleted
    with writer(db, traces=[]):
        pass
    assert marts.pending(db) == ([], [])
    # (t3 exported again: after a manifest that already held it, a loose partition superseding it)
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t3"] if point == "marts_committed" else [])
    assert len(list((root / "tiny_kernels").glob("seg-*.parquet"))) == 1
    assert_snapshot_is_the_warehouse(db)


def test_forget_after_compaction_leaves_no_copy(db: Path) -> None:
    for k in range(1, 8):
        add(db, k)
    add(db, 3, kernels=4)  # t3 loose too, and still in the segment (superseded), and in replaced partitions
    assert on_disk(db, "t3") > 4
    with writer(db, traces=["t3"]) as con:  # what `taxbreak forget` does: its rows deleted, its traces exported
        for table in ("tiny_kernels", "tiny_meta"):
            con.execute(f"DELETE FROM {table} WHERE trace_id = 't3'")
        con.execute("UPDATE tiny_models SET traces = 6")
    assert on_disk(db, "t3") == 0  # the segment rewritten without it, every replaced file deleted at once
    segs, loose = layout(db)
    assert segs == [(0, ["t1", "t2", "t4", "t5", "t6"])] and loose == ["t7"]
    assert marts.load_manifest(marts.marts_dir(db)).replaced == []
    assert_snapshot_is_the_warehouse(db)
    assert rows(snapshot_path(db), "tiny_models") == [("tiny", 6)]


def test_whole_rewrites(db: Path) -> None:
    for k in range(1, 6):
        add(db, k)
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t4", "t5"])
    seq = marts.load_manifest(marts.marts_dir(db)).seq
    with writer(db):  # every trace (taxbreak analyze over everything, a refresh): one segment
        pass
    assert layout(db) == ([(0, [f"t{k}" for k in range(1, 6)])], [])
    (sid,) = marts.load_manifest(marts.marts_dir(db)).segments  # numbered after the segments it replaced
    assert sid.startswith(f"{seq + 1:06d}-")
    assert_snapshot_is_the_warehouse(db)
    with writer(db) as con:  # two traces left: fewer than 3, loose partitions
        for table in ("tiny_kernels", "tiny_meta"):
            con.execute("DELETE FROM " + table + " WHERE trace_id NOT IN ('t1', 't5')")
        con.execute("UPDATE tiny_models SET traces = 2")
    assert layout(db) == ([], ["t1", "t5"])
    assert on_disk(db, "t2") == 0  # traces gone: every replaced file deleted at once
    assert_snapshot_is_the_warehouse(db)
    # the readers' fallback without a snapshot reads the same files the manifest names
    from taxbreak.store.query import open_readonly

    snapshot_path(db).unlink()
    db.rename(db.with_name("moved.duckdb"))
    opened = open_readonly(db)
    assert opened.source == "exports"
    assert opened.con.execute("SELECT count(*), sum(wall_ns) FROM tiny_kernels").fetchone() == (1 + 5, 1000 * 16)


def _fill_kernels(con: duckdb.DuckDBPyConnection, k: int, kernels: int) -> None:
    """Trace t<k>'s tiny_kernels rows only, replaced by ``kernels`` kernels."""
    con.execute("DELETE FROM tiny_kernels WHERE trace_id = $t", {"t": f"t{k}"})
    con.execute("INSERT INTO tiny_kernels SELECT $t, s, 100 * s, 1000 * s FROM range(1, $n + 1) r(s)",
                {"t": f"t{k}", "n": kernels})


def test_a_write_of_some_tables_rewrites_only_those(db: Path) -> None:
    for k in range(1, 4):
        add(db, k)
    root = marts.marts_dir(db)
    (seg,) = marts.load_manifest(root).segments
    seg_files = {t: (root / t / f"seg-{seg}.parquet").stat().st_mtime_ns for t in ("tiny_kernels", "tiny_meta")}
    with writer(db, traces=["t2"], tables=["tiny_kernels"]) as con:  # what the what-if step does for its tables
        _fill_kernels(con, 2, 5)
    # t2's kernels are a loose partition; its meta row is still read from the segment (no partition written)
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t2"])
    m = marts.load_manifest(root)
    live = {rel.rsplit("/part-", 1)[0] for rel in m.live_files()}  # (a loose partition's file: a versioned name)
    assert "tiny_kernels/trace_id=t2" in live and "tiny_meta/trace_id=t2" not in live
    assert (root / "tiny_kernels" / "trace_id=t2" / m.part("tiny_kernels", "t2")).exists()
    assert "NOT (trace_id IN ('t2'))" in view_sql(db, "tiny_kernels") and "trace_id IN" not in view_sql(db, "tiny_meta")
    assert marts.partitions(root / "tiny_kernels")["t2"] == root / "tiny_kernels" / "trace_id=t2"
    assert marts.partitions(root / "tiny_meta")["t2"] == root / "tiny_meta" / f"seg-{seg}.parquet"
    assert {t: (root / t / f"seg-{seg}.parquet").stat().st_mtime_ns for t in seg_files} == seg_files
    assert_snapshot_is_the_warehouse(db)
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tiny_kernels WHERE trace_id = 't2'").fetchone()[0] == 5
    # t4, t5: three traces with loose partitions, compacted (t2's meta row read from the first segment, its
    # kernels from its partition); two tier-0 segments, merged: t1..t5 in one, the 5 kernels of t2 among them
    add(db, 4)
    add(db, 5)
    assert layout(db) == ([(0, ["t1", "t2", "t3", "t4", "t5"])], [])
    assert "trace_id IN" not in view_sql(db, "tiny_kernels")
    assert_snapshot_is_the_warehouse(db)
    with duckdb.connect(str(snapshot_path(db)), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tiny_kernels").fetchone()[0] == 1 + 5 + 3 + 4 + 5
        assert con.execute("SELECT count(*) FROM tiny_meta").fetchone()[0] == 5


def test_a_new_table_is_published_without_a_whole_rewrite(db: Path) -> None:
    for k in range(1, 5):
        add(db, k)
    root = marts.marts_dir(db)
    before = marts.load_manifest(root)
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t4"])
    with writer(db, traces=["t1"], tables=["tiny_extra"]) as con:  # a table the layout has not seen (the what-if
        con.execute("CREATE TABLE tiny_extra (trace_id VARCHAR, scenario VARCHAR)")  # step's first run)
        con.execute("INSERT INTO tiny_extra VALUES ('t1', 'a'), ('t1', 'b'), ('t4', 'a')")
    after = marts.load_manifest(root)
    # the segment and t4's partitions as they were; the new table's rows of t1 and t4 as their partitions
    assert after.segments == before.segments and after.tables == ["tiny_extra", "tiny_kernels", "tiny_meta"]
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t1", "t4"])
    assert sorted(p.name for p in (root / "tiny_extra").iterdir()) == ["_empty.parquet", "trace_id=t1", "trace_id=t4"]
    assert_snapshot_is_the_warehouse(db)
    assert rows(snapshot_path(db), "tiny_extra") == [("t1", "a"), ("t1", "b"), ("t4", "a")]
    # t1, t4, t5: compacted (t1's kernels and meta row read from the first segment, its tiny_extra rows from its
    # partition); two tier-0 segments: merged into one, t1 once
    add(db, 5)
    assert layout(db) == ([(0, ["t1", "t2", "t3", "t4", "t5"])], [])
    assert "trace_id IN" not in view_sql(db, "tiny_meta")
    assert_snapshot_is_the_warehouse(db)
    assert rows(snapshot_path(db), "tiny_extra") == [("t1", "a"), ("t1", "b"), ("t4", "a")]


def test_a_killed_write_of_some_tables_is_caught_up(db: Path) -> None:
    for k in range(1, 4):
        add(db, k)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_marts_compaction import _fill_kernels
        from taxbreak.store.warehouse import writer
        with writer({str(db)!r}, traces=["t2"], tables=["tiny_kernels"]) as con:
            _fill_kernels(con, 2, 7)
    """)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, FAULT_ENV: "marts_staged"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9
    assert marts.pending_work(db)[1:] == (["t2"], ["tiny_kernels"])
    with writer(db, traces=[]):  # catches t2's kernels up, and only them
        pass
    assert marts.pending(db) == ([], [])
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t2"])
    assert "tiny_meta/trace_id=t2" not in marts.load_manifest(marts.marts_dir(db)).live_files()
    assert_snapshot_is_the_warehouse(db)


def test_deleting_replaced_files_is_bounded_per_write(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in range(1, 7):
        add(db, k)
    root = marts.marts_dir(db)
    replaced = [rel for rel, _ in marts.load_manifest(root).replaced]
    assert len(replaced) == 10  # (test_tiers_by_hand...: t1, t2, t4, t5's partitions and the first segment)
    monkeypatch.setenv("TAXBREAK_MARTS_KEEP_REPLACED_S", "0")
    monkeypatch.setattr(marts, "COLLECT_PER_WRITE", 4)
    add(db, 7)  # a write for one trace: the 4 oldest go
    assert [rel for rel, _ in marts.load_manifest(root).replaced] == replaced[4:]
    assert not (root / replaced[0]).exists() and (root / replaced[4]).exists()
    assert marts.collect(db, limit=3) == replaced[4:7]
    with writer(db):  # a whole rewrite: everything due
        pass
    assert marts.load_manifest(root).replaced == []
    assert not any((root / rel).exists() for rel in replaced)
    assert_snapshot_is_the_warehouse(db)


def test_a_version_1_manifest_is_read_and_kept(db: Path) -> None:
    import json

    for k in range(1, 5):
        add(db, k)
    root = marts.marts_dir(db)
    data = json.loads((root / marts.MANIFEST).read_text())
    (seg,) = data["segments"]
    data["version"] = 1  # as the layout before per-table places wrote it: [where, mask]
    data["traces"] = {t: e[:2] for t, e in data["traces"].items()}
    (root / marts.MANIFEST).write_text(json.dumps(data))
    assert marts.partitions(root / "tiny_meta")["t1"] == root / "tiny_meta" / f"seg-{seg}.parquet"
    add(db, 5)  # no whole rewrite: the same segment, t4 and t5 loose
    assert layout(db) == ([(0, ["t1", "t2", "t3"])], ["t4", "t5"])
    assert json.loads((root / marts.MANIFEST).read_text())["version"] == 2
    assert_snapshot_is_the_warehouse(db)
