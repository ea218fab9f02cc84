"""Issue 12: each write exports only the traces it touched as per-trace Parquet marts, and the readers' snapshot
(views over them) holds exactly the warehouse's tables: same columns, same types, same rows."""

from __future__ import annotations

from pathlib import Path

import duckdb
from cli_support import FUSION_ID, MIXED_ID, Run, add_fusion

from taxbreak.store.faults import FAULT_ENV
from taxbreak.store.marts import marts_dir, pending
from taxbreak.store.warehouse import snapshot_path


def assert_snapshot_is_the_warehouse(db: Path) -> set[str]:
    """Every table of the warehouse file: the snapshot has it with the same columns and types and the same rows
    (both EXCEPT ALL directions empty); returns the tables read through a view over the marts."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{snapshot_path(db)}' AS s (READ_ONLY)")
    con.execute(f"ATTACH '{db}' AS w (READ_ONLY)")
    cols = ("SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = $d "
            "ORDER BY table_name, column_index")
    assert con.execute(cols, {"d": "s"}).fetchall() == con.execute(cols, {"d": "w"}).fetchall()
    for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'w'").fetchall():
        diff = con.execute(f'SELECT (SELECT count(*) FROM (FROM s."{t}" EXCEPT ALL FROM w."{t}")) + '
                           f'(SELECT count(*) FROM (FROM w."{t}" EXCEPT ALL FROM s."{t}"))').fetchone()[0]
        assert diff == 0, t
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE database_name = 's'").fetchall()}
    con.close()
    return views


def _partitions(db: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in marts_dir(db).glob("*/trace_id=*/part-*.parquet")}


def test_a_write_exports_only_its_traces(home: Path, run: Run) -> None:
    db = home / "taxbreak.duckdb"
    assert run("analyze", "-q").returncode == 0
    views = assert_snapshot_is_the_warehouse(db)
    assert {"kernel_taxbreak", "taxbreak_by_scope", "trace_meta"} <= views  # per-trace tables: views over the marts
    first = _partitions(db)
    assert first and {p.parent.name for p in first} == {f"trace_id={MIXED_ID}"}
    # the fusion trace added and analysed alone: its partitions are new, the mixed trace's are not rewritten
    add_fusion(home / "lake")
    assert run("analyze", "-q", "--trace", FUSION_ID[:12]).returncode == 0
    second = _partitions(db)
    assert {p for p in second if p not in first} == {p for p in second if p.parent.name == f"trace_id={FUSION_ID}"}
    assert all(second[p] == t for p, t in first.items())
    assert_snapshot_is_the_warehouse(db)
    # readers see both traces through the snapshot
    sql = run("sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta")
    assert sql.returncode == 0 and sql.stdout.split() == ["n", "2"], sql.stderr
    # forgetting a trace removes its partitions
    assert run("forget", FUSION_ID[:12]).returncode == 0
    assert {p.parent.name for p in _partitions(db)} == {f"trace_id={MIXED_ID}"}
    assert_snapshot_is_the_warehouse(db)


def test_a_writer_killed_after_its_commit_is_caught_up_by_the_next(home: Path, run: Run) -> None:
    db = home / "taxbreak.duckdb"
    assert run("analyze", "-q").returncode == 0
    add_fusion(home / "lake")
    assert run("analyze", "-q", "--trace", FUSION_ID[:12], env={FAULT_ENV: "after_commit"}).returncode == -9
    markers, traces = pending(db)
    assert len(markers) == 1 and traces == [FUSION_ID]  # committed, not exported
    assert not any(p.parent.name == f"trace_id={FUSION_ID}" for p in _partitions(db))
    # the next writer (another trace, one table) exports the dead writer's trace as well
    assert run("analyze", "-q", "--trace", MIXED_ID[:12], "--table", "trace_meta").returncode == 0
    assert pending(db) == ([], [])
    assert any(p.parent.name == f"trace_id={FUSION_ID}" for p in _partitions(db))
    assert_snapshot_is_the_warehouse(db)


def test_an_open_reader_keeps_its_snapshot_while_a_writer_republishes(home: Path, run: Run) -> None:
    """Issue 30 item 6: a trace's loose partition gets a new file name at each write, so a reader's session (the
    snapshot it opened, whose views name the files) returns the same value for its whole life; a new reader gets
    the new value; the old file goes once no reader holds it (its pin: marts.pin_reader)."""
    from taxbreak.engine.runner import publish
    from taxbreak.store.marts import collect, load_manifest
    from taxbreak.store.query import open_readonly

    db = home / "taxbreak.duckdb"
    assert run("analyze", "-q").returncode == 0
    query = "SELECT model FROM trace_meta"
    old = open_readonly(db, home / "lake")
    assert old.source == "snapshot"
    assert old.con.execute(query).fetchall() == [("toy",)]
    first = load_manifest(marts_dir(db)).part("trace_meta", MIXED_ID)

    def rename(model: str) -> None:
        publish(db, lambda con: con.execute("UPDATE trace_meta SET model = ?", [model]), traces=[MIXED_ID],
                tables=["trace_meta"])

    rename("m1")
    second = load_manifest(marts_dir(db)).part("trace_meta", MIXED_ID)
    assert second != first and (marts_dir(db) / "trace_meta" / f"trace_id={MIXED_ID}" / first).exists()
    assert old.con.execute(query).fetchall() == [("toy",)]  # the open session: its snapshot, all its life
    sql = run("sql", "--format", "csv", query)  # a new reader (another process; in this one: the next test)
    assert sql.stdout.split() == ["model", "m1"], sql.stderr
    # past the grace period, a writer still keeps what the open readers may read ...
    assert collect(db, keep_s=0) == []
    assert old.con.execute(query).fetchall() == [("toy",)]
    # ... and once they are closed, deletes it
    old.close()
    folder = f"trace_meta/trace_id={MIXED_ID}"
    assert f"{folder}/{first}" in collect(db, keep_s=0)
    assert sorted(p.name for p in (marts_dir(db) / folder).iterdir()) == [second]
    assert not list((marts_dir(db) / ".readers").iterdir())  # every pin removed with its reader
    sql = run("sql", "--format", "csv", query)
    assert sql.stdout.split() == ["model", "m1"], sql.stderr


def test_a_second_reader_in_the_same_process_gets_the_new_snapshot_for_its_whole_life(home: Path, run: Run) -> None:
    """Issue 30 item 6, in one process (a notebook's `tb.open()` twice while a writer publishes): DuckDB shares an
    open database instance by path, so a second read-only open of the snapshot file got the first reader's
    instance, i.e. the replaced file: the old values, through views naming marts files that its pin (taken after
    they were replaced) does not keep; once the first reader closed, a writer deleted them under the second reader.
    Each reader's snapshot is now an instance of its own: the new reader reads the new snapshot, all its life."""
    from taxbreak.engine.runner import publish
    from taxbreak.store.marts import collect
    from taxbreak.store.query import open_readonly

    db = home / "taxbreak.duckdb"
    assert run("analyze", "-q").returncode == 0
    query = "SELECT model FROM trace_meta"

    def rename(model: str) -> None:
        publish(db, lambda con: con.execute("UPDATE trace_meta SET model = ?", [model]), traces=[MIXED_ID],
                tables=["trace_meta"])

    old = open_readonly(db, home / "lake")
    assert old.source == "snapshot" and old.con.execute(query).fetchall() == [("toy",)]
    rename("m1")
    new = open_readonly(db, home / "lake")
    try:
        assert new.source == "snapshot"
        assert new.con.execute(query).fetchall() == [("m1",)]  # the snapshot published after the first opened
        assert old.con.execute(query).fetchall() == [("toy",)]  # and the first keeps its own
        old.close()
        collect(db, keep_s=0)  # the first reader's files go; the second's stay
        rename("m2")
        collect(db, keep_s=0)
        assert new.con.execute(query).fetchall() == [("m1",)]
    finally:
        new.close()
    again = open_readonly(db, home / "lake")
    try:
        assert again.con.execute(query).fetchall() == [("m2",)]
    finally:
        again.close()
