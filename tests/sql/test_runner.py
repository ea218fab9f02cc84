"""The SQL runner: file headers, dependency order, warehouse comments, per-trace incremental rebuild, sidecars."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest.sidecar import MetaError, find_meta, validate_meta, write_sidecar

from .scenarios import FUSION_ID, MIXED_ID, MIXED_META, build_mixed, fusion_rows, mixed_rows, write_trace


def test_sql_files_ordered_and_documented() -> None:
    files = analysis.sql_files()
    names = [f.name for f in files]
    pos = {n: i for i, n in enumerate(names)}
    for f in files:
        assert f.grain, f.name
        for dep in f.reads:
            if dep in pos:
                assert pos[dep] < pos[f.name], (dep, f.name)
        assert f.params in ([], ["event_files"], ["trace_ids"]), f.name  # the run's file and trace lists only
    assert names.index("int_kernel_links") < names.index("kernel_taxbreak") < names.index("taxbreak_by_scope")


def test_plan_declares_every_input(tmp_path: Path) -> None:
    """A name in '-- reads:' is another file or an input the engine declares (taxbreak.engine.plan.INPUTS), and prepare
    creates exactly the declared inputs: a typo in a header or an input added without its declaration fails here."""
    from taxbreak.engine import plan

    files = {f.name for f in plan.sql_files()}
    declared = {i.name for i in plan.INPUTS}
    assert declared == {"selected_traces", "stg_catalogue", "stg_meta_raw", "run_config", "lib_kernel_rules",
                        "step_patterns", "t_sys_defaults", "gpu_arch_rules", "stg_request_lists"}
    assert {i.name for i in plan.INPUTS if i.source == "settings"} == set(plan.settings_tables())
    undeclared = {(f.name, r) for f in plan.sql_files() for r in f.reads if r not in files | declared}
    assert undeclared == set()
    assert {p for f in plan.sql_files() for p in f.params} == set(plan.PARAMETERS)
    build_mixed(tmp_path / "lake")
    con = analysis.connect(None)
    # (an input too large to load is a temporary view over lake files: the request lists)
    temp_tables = ("SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp' UNION ALL "
                   "SELECT view_name FROM duckdb_views() WHERE database_name = 'temp' AND NOT internal")
    before = {r[0] for r in con.execute(temp_tables).fetchall()}
    bound = analysis.prepare(con, tmp_path / "lake", [MIXED_ID], tables=["trace_meta"])
    made = {r[0] for r in con.execute(temp_tables).fetchall()}
    assert made - before - {"_run_state"} == declared
    assert set(bound) == set(plan.PARAMETERS) and bound["trace_ids"] == [MIXED_ID]
    con.close()


def test_every_table_is_a_plan_node() -> None:
    """The what-if replay's and the request fit's tables are plan nodes beside the analysis': each later-stage node
    names the Python function that writes it (a callable of that module), reads only plan tables or the fit's rows,
    and comes after what it reads; the Python-only nodes hold no statement."""
    import importlib

    from taxbreak.engine import plan

    every = plan.nodes()
    names = [sf.name for sf in every]
    assert len(names) == len(set(names))
    assert [sf.stage for sf in every] == sorted((sf.stage for sf in every), key=plan.STAGES.index)
    later = [sf for sf in every if sf.stage != "analysis"]
    assert [sf.name for sf in later] == ["whatif_results", "critical_path", "levers", "request_model_fit",
                                         "request_step_fit", "request_step_shares", "request_totals",
                                         "request_tenants"]
    assert {sf.name for sf in every if sf.python_only} == {"whatif_results", "critical_path"}
    for sf in later:
        module, _, fn = sf.computed_by.rpartition(".")
        assert callable(getattr(importlib.import_module(module), fn)), sf.name
        for r in sf.reads:
            assert r in names and names.index(r) < names.index(sf.name), (sf.name, r)
        assert sf.columns, sf.name
    with pytest.raises(KeyError, match="no table 'nope'"):
        plan.node("nope")


def test_every_column_documented_in_warehouse(tmp_path: Path) -> None:
    build_mixed(tmp_path / "lake")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    missing = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = 'wh' AND comment IS NULL"
    ).fetchall()
    assert missing == []
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE comment IS NOT NULL").fetchall()}
    assert "stg_events" not in tables  # run-local only
    assert {"int_kernel_links", "kernel_taxbreak", "taxbreak_by_scope", "fusion_candidates"} <= tables
    con.close()


def test_incremental_rebuild_touches_only_the_given_trace(tmp_path: Path) -> None:
    lake = build_mixed(tmp_path / "lake")
    write_trace(lake, FUSION_ID, fusion_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="fusion.json")
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, tmp_path / "lake")
    con = duckdb.connect(str(wh))
    before = con.execute("SELECT trace_id, count(*) FROM int_kernel_links GROUP BY 1 ORDER BY 1").fetchall()
    fusion_before = con.execute("SELECT * FROM taxbreak_by_scope WHERE trace_id = $t ORDER BY ALL",
                                {"t": FUSION_ID}).fetchall()
    con.close()
    # the mixed trace changes (one kernel more), and only it is rebuilt, one table at a time on fresh connections
    rows = mixed_rows()
    from .scenarios import kernel

    rows.append(kernel(MIXED_ID, "late_kernel", 35000, 100, "100", 98))
    write_trace(lake, MIXED_ID, rows, gpu="NVIDIA H100 80GB HBM3", file_name="mixed.json",
                metadata={"taxbreak": MIXED_META})
    for name in ("int_kernel_links", "kernel_taxbreak", "taxbreak_by_scope"):
        con = analysis.connect(wh)
        analysis.materialize_table(con, name, trace_ids=[MIXED_ID], lake_root=tmp_path / "lake")
        con.close()
    con = duckdb.connect(str(wh), read_only=True)
    after = con.execute("SELECT trace_id, count(*) FROM int_kernel_links GROUP BY 1 ORDER BY 1").fetchall()
    assert dict(before) == {MIXED_ID: 9, FUSION_ID: 10}
    assert dict(after) == {MIXED_ID: 10, FUSION_ID: 10}
    assert con.execute("SELECT kernels, orphan_kernels FROM taxbreak_by_scope WHERE trace_id = $t AND "
                       "scope_kind = 'trace'", {"t": MIXED_ID}).fetchall() == [(10, 2)]
    assert con.execute("SELECT * FROM taxbreak_by_scope WHERE trace_id = $t ORDER BY ALL",
                       {"t": FUSION_ID}).fetchall() == fusion_before
    con.close()


def test_sidecar_beside_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "run.json"
    trace.write_text("{}")
    side = write_sidecar(trace, {"taxbreak_meta_version": 1, "output_tokens": 10, "batch_size": 4,
                                 "steps": [{"name": "decode#1", "phase": "decode", "tokens": 1}]})
    assert side.name == "run.json.meta.json"
    meta, source, note = find_meta(json.dumps({"other": 1}), str(trace))
    assert source == "sidecar" and meta["output_tokens"] == 10 and note == ""
    # trace metadata wins over the sidecar
    meta, source, _ = find_meta(json.dumps({"taxbreak": {"taxbreak_meta_version": 1, "output_tokens": 3}}), str(trace))
    assert (source, meta["output_tokens"]) == ("trace_metadata", 3)
    meta, source, note = find_meta(None, str(tmp_path / "absent.json"))
    assert meta is None and source is None and "no sidecar" in note


@pytest.mark.parametrize("bad, msg", [
    ({"output_tokens": 3}, "taxbreak_meta_version"),
    ({"taxbreak_meta_version": 1, "output_tokens": -1}, "output_tokens"),
    ({"taxbreak_meta_version": 1, "kind": "training"}, "kind"),
    ({"taxbreak_meta_version": 1, "steps": [{"name": "x", "phase": "warmup"}]}, "phase"),
])
def test_meta_validation(bad: dict, msg: str) -> None:
    with pytest.raises(MetaError, match=msg):
        validate_meta(bad)


def test_a_run_for_one_trace_reads_only_its_catalogue_file(tmp_path: Path) -> None:
    """A per-trace run's cost must not grow with the lake: it reads its own catalogue file only, so another trace's
    unreadable catalogue file does not stop it, and it recomputes the same rows as the run over every trace."""
    lake = build_mixed(tmp_path / "lake")
    write_trace(lake, FUSION_ID, fusion_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="fusion.json")
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, tmp_path / "lake")
    query = "SELECT * FROM taxbreak_by_scope WHERE trace_id = $t ORDER BY ALL"
    with duckdb.connect(str(wh), read_only=True) as con:
        before = con.execute(query, {"t": MIXED_ID}).fetchall()
    lake.catalogue_path(FUSION_ID).write_bytes(b"not parquet")  # the lake's other trace: unreadable now
    con = analysis.connect(wh)
    try:
        assert analysis.materialize(wh, tmp_path / "lake", trace_ids=[MIXED_ID], con=con)["taxbreak_by_scope"] > 0
        assert con.execute("SELECT trace_id FROM stg_catalogue").fetchall() == [(MIXED_ID,)]
        assert con.execute(query, {"t": MIXED_ID}).fetchall() == before
    finally:
        con.close()


def test_sql_files_parsed_again_when_a_file_changes(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- table: a\n-- grain: one row\n-- reads: b\nSELECT 1 AS x\n")
    (tmp_path / "b.sql").write_text("-- table: b\n-- grain: one row\nSELECT 2 AS y\n")
    assert [f.name for f in analysis.sql_files(tmp_path)] == ["b", "a"]
    assert [f.name for f in analysis.sql_files(tmp_path)] == ["b", "a"]  # the parse kept
    (tmp_path / "b.sql").write_text("-- table: b\n-- grain: one row per thing\n-- reads: c\nSELECT 2 AS y\n")
    (tmp_path / "c.sql").write_text("-- table: c\n-- grain: one row\nSELECT 3 AS z\n")
    files = analysis.sql_files(tmp_path)
    assert [f.name for f in files] == ["c", "b", "a"] and files[1].grain == "one row per thing"


def test_run_local_tables_live_in_the_unlinked_scratch_database(tmp_path: Path) -> None:
    lake = build_mixed(tmp_path / "lake")
    write_trace(lake, FUSION_ID, fusion_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="fusion.json")
    wh = tmp_path / "wh.duckdb"
    con = analysis.connect(wh)
    with analysis.publication(con):
        told: list[tuple[str, bool]] = []
        analysis.prepare(con, tmp_path / "lake", [MIXED_ID], staging=lambda name, done: told.append((name, done)))
        # each run-local table staged is told before and after it is computed, in plan order (the bench times them)
        temp = [f.name for f in analysis.sql_files() if f.materialize == "temp"]
        staged = [name for name, done in told if done]
        assert told == [(n, d) for n in staged for d in (False, True)]
        assert staged == [n for n in temp if n in staged] and {"stg_events", "int_host_segments"} <= set(staged)
        # ... and every table the scratch database holds was told (none computed untold)
        assert sorted(staged) == sorted(t.rsplit("__", 1)[0] for t in analysis._scratch_tables(con))
        # stg_events is a view of the scratch database's table, holding only the run's trace
        (view_sql,) = con.execute("SELECT sql FROM duckdb_views() WHERE database_name = 'temp' "
                                  "AND view_name = 'stg_events'").fetchall()[0]
        assert 'FROM _run.main.stg_events__' in view_sql
        assert con.execute("SELECT DISTINCT trace_id FROM stg_events").fetchall() == [(MIXED_ID,)]
        n_mixed = con.execute("SELECT count(*) FROM stg_events WHERE kind = 'kernel'").fetchall()[0][0]
        assert n_mixed == 9
        # one event id per event, its high bits the events file's place in the run's list (one file per trace)
        assert con.execute("SELECT count(DISTINCT event_id) = count(*), max(event_id >> 40) FROM stg_events"
                           ).fetchall() == [(True, 0)]
        # a second prepare inside the same publication (the transaction already read the scratch database):
        # the restaged tables are not visible to it, so they are computed in memory, for the right traces
        analysis.prepare(con, tmp_path / "lake", [MIXED_ID, FUSION_ID])
        state = analysis._run_state(con)
        files = {f.name: f for f in analysis.sql_files()}
        analysis._build(con, "int_kernel_links", state, files)
        assert dict(con.execute("SELECT trace_id, count(*) FROM int_kernel_links GROUP BY 1").fetchall()) == {
            MIXED_ID: 9, FUSION_ID: 10}
    # the scratch file was unlinked when attached: nothing of it is left beside the warehouse or its spill folder
    assert [p.name for p in tmp_path.iterdir() if "-run-" in p.name] == []
    assert analysis.scratch(con) == "_run"
    con.close()
    assert [p.name for p in tmp_path.iterdir() if "-run-" in p.name] == []


def test_int_traces_is_the_number_stg_events_carries(tmp_path: Path) -> None:
    """One run-local trace number (int_traces): the tables' ordered passes join it, and it is stg_events.trace_key,
    the place of the trace's events file in the run's list, for every trace of a run of two."""
    lake = build_mixed(tmp_path / "lake")
    write_trace(lake, FUSION_ID, fusion_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="fusion.json")
    con = analysis.connect(None)
    bound = analysis.prepare(con, tmp_path / "lake", [FUSION_ID, MIXED_ID])
    keys = con.execute("SELECT trace_id, trace_key FROM int_traces ORDER BY trace_key").fetchall()
    assert keys == [(t, i) for i, t in enumerate(bound["trace_ids"])]
    assert sorted(t for t, _ in keys) == sorted([FUSION_ID, MIXED_ID])
    assert con.execute("SELECT DISTINCT trace_id, trace_key FROM stg_events ORDER BY trace_key").fetchall() == keys
    assert con.execute("SELECT DISTINCT event_id >> 40 FROM stg_events ORDER BY 1").fetchall() == [(0,), (1,)]
    con.close()
