"""The report's what-if section on a trace analysed end to end: ingested, every table computed, the default
scenarios replayed and published (the readers' snapshot then holds views, not tables), ``taxbreak report`` run.
Issue 29: the section never appeared because it tested for a *table* named whatif_results."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from taxbreak.cli import main
from taxbreak.engine import analysis
from taxbreak.features import whatif
from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.schemas import EVENT_SCHEMA
from taxbreak.store.query import has_relation, open_readonly
from taxbreak.store.warehouse import writer

from .test_whatif import TINY, tiny_rows


def test_report_page_shows_the_whatif_section(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA H100 80GB HBM3"], host_name="h", metadata={})
    Lake(root).write_events(TINY, [pa.RecordBatch.from_pylist(tiny_rows(), schema=EVENT_SCHEMA)], info,
                            file_name="tiny.json", source_path="/nonexistent/tiny.json", file_bytes=1)
    wh = tmp_path / "wh" / "taxbreak.duckdb"
    analysis.materialize(wh, root)
    with writer(wh, traces=[TINY]) as con:  # as the Dagster what-if step publishes: marts + snapshot
        whatif.compute_and_write(con, root, [TINY])
    opened = open_readonly(wh)
    try:
        assert opened.source == "snapshot"  # what every reader reads, and it holds views
        assert has_relation(opened.con, "whatif_results")
        assert not opened.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'whatif_results'"
                                      ).fetchone()[0]
    finally:
        opened.con.close()
    out = tmp_path / "rep"
    assert main(["report", "--warehouse", str(wh), "-o", str(out)]) == 0
    page = next(p for p in out.rglob("*.html") if p.name != "index.html").read_text()
    assert "What-if replay: latency vs host speed" in page
    # identity path: k2 <- gap 1000 <- k1 <- launch path 6000 <- aten::a 4000: host 10000 of 31000 ns
    assert "host 32%" in page and "Critical path split" in page
    # the other scenarios' table, one row each, with the trace's own IL 31000 ns
    for name in ("gpu_x2", "cuda_graph_decode", "fuse_top5"):
        assert f"<td>{name}</td>" in page
    assert page.count("<td class='n'>31 µs</td>") >= 3
    con = duckdb.connect(str(wh), read_only=True)
    try:
        gpu2 = con.execute("SELECT il_replay_ns FROM whatif_results WHERE scenario = 'gpu_x2' AND scope_kind = "
                           "'trace'").fetchone()[0]
    finally:
        con.close()
    from taxbreak.read.plots import fmt_value

    assert f"<td class='n'>{fmt_value(gpu2, 'ns')}</td>" in page
