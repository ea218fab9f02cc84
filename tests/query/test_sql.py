"""`taxbreak sql`: one-shot queries in every output format, the interactive prompt, and reading while another
process holds the warehouse read-write (snapshot, then Parquet exports)."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys

import duckdb
import pyarrow.parquet as pq
import pytest

from taxbreak.cli import main
from taxbreak.store import marts
from taxbreak.store.query import WarehouseUnavailable, interactive, open_readonly
from taxbreak.store.warehouse import publish_snapshot


def _count_sql(trace_id: str) -> str:
    return f"SELECT count(*) AS n FROM kernel_taxbreak WHERE trace_id = '{trace_id}'"


def test_one_shot_table(wh: dict, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["sql", "--warehouse", str(wh["warehouse"]), "--lake", str(wh["lake"]),
               _count_sql(wh["ids"]["dense_bs1"])])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert out[0].strip() == "n" and out[2].strip() == str(wh["kernels"]["dense_bs1"]) and out[3] == "(1 row)"


def test_csv_and_parquet_outputs(wh: dict, tmp_path) -> None:  # noqa: ANN001
    sql = ("SELECT trace_id, kernels FROM taxbreak_by_scope WHERE scope_kind = 'trace' AND trace_id IN "
           f"('{wh['ids']['dense_bs4']}', '{wh['ids']['moe']}') ORDER BY kernels")
    out_csv = tmp_path / "r.csv"
    assert main(["sql", "--warehouse", str(wh["warehouse"]), "--format", "csv", "-o", str(out_csv), sql]) == 0
    rows = list(csv.reader(out_csv.open()))
    assert rows == [["trace_id", "kernels"], [wh["ids"]["dense_bs4"], str(wh["kernels"]["dense_bs4"])],
                    [wh["ids"]["moe"], str(wh["kernels"]["moe"])]]
    out_pq = tmp_path / "r.parquet"
    assert main(["sql", "--warehouse", str(wh["warehouse"]), "--format", "parquet", "-o", str(out_pq), sql]) == 0
    t = pq.read_table(out_pq)
    assert t.column("kernels").to_pylist() == [wh["kernels"]["dense_bs4"], wh["kernels"]["moe"]]
    assert main(["sql", "--warehouse", str(wh["warehouse"]), "--format", "parquet", sql]) == 1  # needs -o


def test_lake_views_are_attached(wh: dict) -> None:
    opened = open_readonly(wh["warehouse"], wh["lake"])
    try:
        n = opened.con.execute("SELECT count(*) FROM events WHERE kind = 'kernel' AND trace_id = $t",
                               {"t": wh["ids"]["moe"]}).fetchone()[0]
    finally:
        opened.con.close()
    assert opened.source == "warehouse" and n == wh["kernels"]["moe"]


def test_interactive_prompt(wh: dict, capsys: pytest.CaptureFixture[str]) -> None:
    opened = open_readonly(wh["warehouse"])
    stdin = io.StringIO(".tables\nSELECT count(*) AS n\nFROM trace_meta;\nSELECT nope;\n.quit\nSELECT 1;\n")
    try:
        assert interactive(opened, stdin=stdin) == 0
    finally:
        opened.con.close()
    cap = capsys.readouterr()
    assert "kernel_taxbreak" in cap.out and "fusion_candidates" in cap.out
    assert f"\n{len(wh['ids'])}\n" in cap.out.replace(" ", "")  # the count, then .quit stops before SELECT 1
    assert cap.out.count("(1 row)") == 1 and "error:" in cap.err


def _export(warehouse, exports) -> None:  # noqa: ANN001 - what the pipeline's export step publishes
    exports.mkdir(exist_ok=True)
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            con.execute(f"COPY \"{name}\" TO '{exports / (name + '.parquet')}' (FORMAT parquet)")
    finally:
        con.close()
    shutil.copyfile(warehouse, exports / "snapshot.duckdb")


def test_reads_while_a_writer_holds_the_warehouse(wh: dict, tmp_path) -> None:  # noqa: ANN001
    db = tmp_path / "taxbreak.duckdb"
    shutil.copyfile(wh["warehouse"], db)
    exports = tmp_path / "exports"
    _export(db, exports)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
         "sys.stdin.read()", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(duckdb.IOException):  # the premise: even a read-only open is refused
            duckdb.connect(str(db), read_only=True)
        sql = _count_sql(wh["ids"]["dense_bs16"])
        opened = open_readonly(db)
        assert opened.source == "snapshot"
        assert opened.con.execute(sql).fetchone()[0] == wh["kernels"]["dense_bs16"]
        opened.con.close()
        (exports / "snapshot.duckdb").unlink()
        opened = open_readonly(db)
        assert opened.source == "exports"
        assert opened.con.execute(sql).fetchone()[0] == wh["kernels"]["dense_bs16"]
        opened.con.close()
        proc = subprocess.run([sys.executable, "-m", "taxbreak.cli", "sql", "--warehouse", str(db), "--format", "csv",
                               sql], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["n", str(wh["kernels"]["dense_bs16"])]
        assert "reading the exports" in proc.stderr
        shutil.rmtree(exports)
        with pytest.raises(WarehouseUnavailable, match="taxbreak analyze"):
            open_readonly(db)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_readme_query_runs_on_plain_duckdb(wh: dict, tmp_path) -> None:  # noqa: ANN001
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Querying the warehouse", 1)[1]
    sql = section.split("```sql", 1)[1].split("```", 1)[0]
    (tmp_path / "warehouse").mkdir()
    shutil.copyfile(wh["warehouse"], tmp_path / "warehouse" / "taxbreak.duckdb")
    con = duckdb.connect(str(tmp_path / "warehouse" / "taxbreak.duckdb"))
    try:  # the per-trace Parquet marts and the snapshot a writer publishes beside the warehouse (taxbreak.store.marts)
        marts.export(con, tmp_path / "warehouse" / "taxbreak.duckdb", None, compact_loose=2)  # one segment
    finally:
        publish_snapshot(tmp_path / "warehouse" / "taxbreak.duckdb", con)  # closes con
    code = "import duckdb, sys; print(duckdb.sql(sys.stdin.read()).fetchall())"  # no taxbreak import
    proc = subprocess.run([sys.executable, "-I", "-c", code], input=sql, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("synthetic_dense") == 3 and "synthetic_moe" in proc.stdout


def test_missing_warehouse_names_the_file_and_the_fix(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    db = tmp_path / "nowhere" / "taxbreak.duckdb"
    for argv in (["sql", "--warehouse", str(db), "SELECT 1"], ["report", "--warehouse", str(db), "-o",
                                                               str(tmp_path / "r.html")],
                 ["compare", "--warehouse", str(db), "a", "b"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{db} does not exist" in err and "taxbreak analyze" in err
    assert not (tmp_path / "r.html").exists()


def test_no_progress_bar_reaches_stdout(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    """DuckDB draws a progress bar on stdout once a query runs 2 s (seen under load: `compare --json` printed it
    before its JSON); every connection of a reader and of a writer has it off."""
    from taxbreak.store.query import open_readonly
    from taxbreak.store.warehouse import connect

    db = tmp_path / "wh.duckdb"
    duckdb.connect(str(db)).close()
    setting = "SELECT current_setting('enable_progress_bar')"
    for sandbox in (False, True):
        opened = open_readonly(db, sandbox=sandbox)
        assert opened.con.execute(setting).fetchone()[0] is False, sandbox
        opened.con.close()
    con = connect(None)
    assert con.execute(setting).fetchone()[0] is False
    con.close()
