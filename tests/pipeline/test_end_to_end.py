"""Files dropped in a temporary inbox -> bucket sensor -> runs -> tables, all through Dagster in this process."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from taxbreak.ingest import Lake
from taxbreak.pipeline.local import load_defs, tick
from taxbreak.store.marts import load_manifest

from .conftest import NSIGHT_EVENTS, NSIGHT_KERNELS, write_kineto, write_nsight


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kernels_per_trace(warehouse: Path) -> dict[str, int]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())


def _materialized(run: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in run.get_asset_materialization_events()}


def test_inbox_to_tables(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    inbox = env["inbox"]
    good = write_kineto(inbox / "run1" / "good.pt.trace.json", 3)
    nsight = write_nsight(inbox / "nsight.sqlite")
    (inbox / "corrupt.json").write_bytes(b'{"traceEvents": [{"ph": "X", "name": ')
    defs = load_defs()

    t1 = tick(defs, instance)
    ids = {_sha(good), _sha(nsight), _sha(inbox / "corrupt.json")}
    # the partition keys a person reads in the UI: the file stem, then the first 12 hex of the content hash
    keys = {f"good.pt.trace-{_sha(good)[:12]}", f"nsight-{_sha(nsight)[:12]}",
            f"corrupt-{_sha(inbox / 'corrupt.json')[:12]}"}
    assert set(t1.partition_keys) == keys and set(t1.trace_ids) == ids and len(t1.runs) == 3
    assert all(r.success for r in t1.runs)
    assert set(instance.get_dynamic_partitions("traces")) == keys
    statuses = {}
    for run in t1.runs:
        (mat,) = [e for e in run.get_asset_materialization_events() if e.asset_key.to_user_string() == "trace_ingest"]
        meta = mat.materialization.metadata
        assert mat.partition == run.dagster_run.tags["dagster/partition"] in keys
        statuses[meta["trace_id"].value] = meta["status"].value
    assert statuses == {_sha(good): "ingested", _sha(nsight): "ingested", _sha(inbox / "corrupt.json"): "failed"}
    cat = {r["trace_id"]: r for r in Lake(env["lake"]).catalogue().to_pylist()}
    assert cat[_sha(inbox / "corrupt.json")]["status"] == "failed" and cat[_sha(inbox / "corrupt.json")]["error"]
    assert cat[_sha(good)]["event_count"] == 10  # 3 ops + 3 launches + 3 kernels + 1 metadata event
    assert cat[_sha(nsight)]["event_count"] == NSIGHT_EVENTS  # 110, counted by hand in conftest.py
    kernels = _kernels_per_trace(env["warehouse"])
    assert kernels == {_sha(good): 3, _sha(nsight): NSIGHT_KERNELS}
    every_check = {"ingest_completeness", "hdbi_in_unit_interval", "linked_plus_orphan_is_all_kernels",
                   "orchestrate_is_ft_plus_ct_plus_kt", "scopes_partition_the_trace", "per_kernel_costs_consistent",
                   "kernel_sums_match_trace_rows", "times_never_negative",
                       "no_regression_in_landed_runs"}  # the regression warning (issue 28): one run, no workload moved
    for run in t1.runs:  # every check ran and passed; a failed file's run checks the ingest only
        evals = run.get_asset_check_evaluations()
        assert all(e.passed for e in evals), [(e.check_name, e.metadata) for e in evals if not e.passed]
        failed_run = run.dagster_run.tags["taxbreak/trace_id"] == _sha(inbox / "corrupt.json")
        assert {e.check_name for e in evals} == ({"ingest_completeness"} if failed_run else every_check)
        assert "kernel_taxbreak" not in _materialized(run) if failed_run else "kernel_taxbreak" in _materialized(run)
    # the readers' copy: one Parquet partition per trace and table (taxbreak.store.marts), and the snapshot's views
    marts = env["warehouse"].parent / "marts" / "kernel_taxbreak"
    assert sorted(p.name for p in marts.glob("trace_id=*")) == sorted(f"trace_id={_sha(f)}" for f in (good, nsight))
    parquet = [str(marts.parent / rel) for rel in load_manifest(marts.parent).sources("kernel_taxbreak")[0]]
    assert duckdb.execute("SELECT count(*) FROM read_parquet($p)", {"p": parquet}).fetchall() == [(3 + NSIGHT_KERNELS,)]
    snap = duckdb.connect(str(env["warehouse"].parent / "exports" / "snapshot.duckdb"), read_only=True)
    assert snap.execute("SELECT count(*) FROM kernel_taxbreak").fetchall() == [(3 + NSIGHT_KERNELS,)]
    snap.close()
    # the report: an HTML file, and in the Dagster UI its headline table and the split plot as metadata
    last = [e for r in t1.runs for e in r.get_asset_materialization_events()
            if e.asset_key.to_user_string() == "warehouse_report"][-1].materialization.metadata
    assert Path(last["report"].value).exists() and last["traces"].value == 2
    assert "| good.pt.trace.json |" in last["summary"].value and "| nsight.sqlite |" in last["summary"].value
    assert last["orchestration_split"].value.startswith("![orchestration split](data:image/svg+xml;base64,")

    # nothing new: no run; the same good file again under another name: still no run, no new partition
    assert tick(defs, instance, t1.cursor).runs == []
    shutil.copyfile(good, inbox / "good-copy.json")
    t2 = tick(defs, instance, t1.cursor)
    assert t2.runs == [] and len(instance.get_dynamic_partitions("traces")) == 3

    # the good Kineto file changes (4 kernels now): one run, for its new content
    write_kineto(good, 4)
    t3 = tick(defs, instance, t2.cursor)
    assert t3.trace_ids == [_sha(good)] and t3.partition_keys == [f"good.pt.trace-{_sha(good)[:12]}"]
    assert t3.runs[0].success
    assert _kernels_per_trace(env["warehouse"])[_sha(good)] == 4

    # a fourth file: only its partition runs, and the tables are rebuilt for it alone
    fourth = write_kineto(inbox / "fourth.json", 2, base_us=50.0)
    before = {p: p.stat().st_mtime_ns for p in marts.parent.glob("*/trace_id=*/part-*.parquet")}
    t4 = tick(defs, instance, t3.cursor)
    assert t4.trace_ids == [_sha(fourth)] and t4.partition_keys == [f"fourth-{_sha(fourth)[:12]}"]
    run = t4.runs[0]
    assert run.success and "trace_ingest" in _materialized(run)
    (ktx,) = [e for e in run.get_asset_materialization_events() if e.asset_key.to_user_string() == "kernel_taxbreak"]
    assert ktx.materialization.metadata["scope"].value == f"trace {_sha(fourth)[:16]}"
    assert ktx.materialization.metadata["rows_computed"].value == 2
    final = _kernels_per_trace(env["warehouse"])
    assert final[_sha(fourth)] == 2 and final[_sha(nsight)] == NSIGHT_KERNELS
    (exp,) = [e for e in run.get_asset_materialization_events() if e.asset_key.to_user_string() == "warehouse_exports"]
    # the marts' trace counts come from the manifest: every trace with kernel rows in the warehouse, no other
    assert exp.materialization.metadata["traces_kernel_taxbreak"].value == len(final)
    # its run wrote its own partitions and left every other trace's untouched
    after = {p: p.stat().st_mtime_ns for p in marts.parent.glob("*/trace_id=*/part-*.parquet")}
    assert {p for p in after if p not in before} == {p for p in after if p.parent.name == f"trace_id={_sha(fourth)}"}
    assert all(after[p] == t for p, t in before.items() if p in after)
    assert len(instance.get_dynamic_partitions("traces")) == 5

    # a sidecar written (or changed) beside a trace: its trace runs again, forced, so new metadata is read
    (inbox / "fourth.json.meta.json").write_text('{"taxbreak_meta_version": 1, "batch_size": 4}')
    t5 = tick(defs, instance, t4.cursor)
    assert t5.partition_keys == t4.partition_keys and t5.trace_ids == [_sha(fourth)] and t5.runs[0].success
    assert t5.runs[0].dagster_run.tags["taxbreak/reason"] == "sidecar"
    assert len(instance.get_dynamic_partitions("traces")) == 5


def test_run_inbox_pipeline_for_the_demo(tmp_path: Path, dagster_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `make demo` calls: sensor and runs in-process over explicit paths; a second call finds nothing new."""
    from taxbreak.config import Paths
    from taxbreak.pipeline.local import run_inbox_pipeline

    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    paths = Paths.from_env(tmp_path / "home")
    a = write_kineto(paths.inbox / "a.json", 2)
    first = run_inbox_pipeline(paths)
    assert [(Path(r.path).name, r.status, r.row["event_count"]) for r in first] == [("a.json", "ingested", 7)]
    assert _kernels_per_trace(paths.warehouse) == {_sha(a): 2}
    assert (paths.warehouse.parent / "exports" / "snapshot.duckdb").exists()
    assert [r.status for r in run_inbox_pipeline(paths)] == ["unchanged"]
