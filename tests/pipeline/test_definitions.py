"""`dg check defs` passes, and the definitions hold what the pipeline promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[2]


def test_dg_check_defs(dagster_home: Path) -> None:
    dg_bin = Path(sys.executable).parent / "dg"
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "DAGSTER_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run([str(dg_bin), "check", "defs"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All definitions loaded successfully." in proc.stdout + proc.stderr


def test_jobs_resolve_without_warnings() -> None:
    """Every job resolves silently: trace_job's partitioned assets share one backfill policy (issue 29: every run
    printed "Asset job trace_job materializes assets with varying BackfillPolicies")."""
    import warnings

    from taxbreak.pipeline.defs.ingest_assets import TRACES, single_run_asset
    from taxbreak.pipeline.local import load_defs

    defs = load_defs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jobs = {name: defs.resolve_job_def(name) for name in ("trace_job", "refresh_job")}

        @single_run_asset(key="probe", partitions_def=TRACES)  # how trace_ingest and trace_analysis are declared
        def probe() -> None:
            return None

    said = [str(w.message) for w in caught if "BackfillPolic" in str(w.message) or "backfill_policy" in str(w.message)]
    assert said == [] and probe.backfill_policy == dg.BackfillPolicy.single_run()
    assert jobs["trace_job"].backfill_policy == dg.BackfillPolicy.single_run()
    graph = defs.resolve_asset_graph()
    for key in ("trace_ingest", "trace_analysis", "kernel_taxbreak"):
        assert graph.get(dg.AssetKey(key)).backfill_policy == dg.BackfillPolicy.single_run(), key


def test_definitions_content() -> None:
    from taxbreak.engine.analysis import sql_files
    from taxbreak.pipeline.local import load_defs

    defs = load_defs()
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    tables = {f.name for f in sql_files() if f.materialize != "temp"}
    assert keys == {"trace_ingest", "warehouse_exports", "warehouse_report", "request_model_fit", "whatif_results",
                    "levers", "critical_path", "trace_analysis"} | tables
    assert graph.get(dg.AssetKey("trace_analysis")).partitions_def.name == "traces"  # per-trace status in the UI
    assert graph.get(dg.AssetKey("trace_analysis")).pools == set()  # it reads the snapshot: no writer, no pool
    ingest = graph.get(dg.AssetKey("trace_ingest"))
    assert isinstance(ingest.partitions_def, dg.DynamicPartitionsDefinition)
    assert ingest.partitions_def.name == "traces"
    cross = {f.name for f in sql_files() if f.scope == "cross_trace"}
    assert cross == {"sweep_points", "sweep_transition", "workload_trends", "workload_changes"}
    for name in tables:  # each table's code version hashes its SQL (and run-local inputs)
        node = graph.get(dg.AssetKey(name))
        assert node.code_version and len(node.code_version) == 16
        # the per-trace tables compute before they take the writer lock: no pool, so runs compute at once
        assert node.pools == ({"duckdb_writer"} if name in cross else set())
        # per-trace tables: `traces` partitions, one step for a whole refresh; the sweeps over traces: unpartitioned
        assert (node.partitions_def is None) if name in cross else (node.partitions_def.name == "traces")
        assert node.backfill_policy == (None if name in cross else dg.BackfillPolicy.single_run())
    assert {s.name for s in defs.sensors} == {"bucket_sensor", "request_refit_sensor"}
    assert {s.name for s in defs.schedules} == {"bucket_sweep_schedule", "refresh_tables_schedule"}
    assert all(s.cron_schedule == "0 * * * *" for s in defs.schedules)
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert checks == {
        ("trace_ingest", "ingest_completeness"), ("taxbreak_by_scope", "hdbi_in_unit_interval"),
        ("taxbreak_by_scope", "linked_plus_orphan_is_all_kernels"),
        ("taxbreak_by_scope", "orchestrate_is_ft_plus_ct_plus_kt"), ("taxbreak_by_scope", "scopes_partition_the_trace"),
        ("kernel_taxbreak", "per_kernel_costs_consistent"), ("kernel_taxbreak", "kernel_sums_match_trace_rows"),
        ("taxbreak_by_scope", "times_never_negative"), ("workload_changes", "no_regression_in_landed_runs"),
    }
    spec = next(s for n in graph.get(dg.AssetKey("workload_changes")).assets_def.check_specs
                for s in [n] if s.name == "no_regression_in_landed_runs")
    assert spec.blocking is False  # a regression warns, it never stops the pipeline


def test_regression_warning_carries_the_numbers() -> None:
    from taxbreak.pipeline.defs.checks import regression_result

    row = {"workload_id": "ab12cd34ef56", "program": "toy", "trace_id": "1" * 64, "file_name": "run15.json",
           "run_seq": 15, "figure": "delta_ft_ns", "value": 1_080_000.0, "baseline_median": 1_000_000.0,
           "baseline_runs": 14, "confirm_median": 1_081_000.0, "rel_change": 0.081, "robust_z": 5.6,
           "status": "confirmed", "components_moved": ["t_orchestrate_ns +6.2%"], "top_ops": [], "top_kernels": []}
    warn = regression_result([row], "trace 1111111111111111")
    assert (warn.passed, warn.severity, warn.check_name) == (False, dg.AssetCheckSeverity.WARN,
                                                           "no_regression_in_landed_runs")
    assert warn.metadata["regressions"].value == 1 and warn.metadata["figures"].value == ["delta_ft_ns"]
    assert abs(warn.metadata["max_rel_change"].value - 0.081) < 1e-12
    assert "| ab12cd34ef56 | 15 | run15.json | delta_ft_ns | +8.1% | confirmed | 1,000,000 | 5.6 | " \
           "t_orchestrate_ns +6.2% |" in warn.metadata["details"].value
    assert "delta_ft_ns +8.1% (confirmed) vs the median 1,000,000 of 14 runs, z 5.6" in warn.description
    ok = regression_result([], "trace 2222222222222222")
    assert ok.passed and ok.metadata["regressions"].value == 0


def test_nothing_outside_pipeline_imports_dagster() -> None:
    offenders = []
    for folder in ("ingest", "schemas", "sql", "taxbreak"):
        for path in (REPO / folder).rglob("*.py"):
            if "pipeline" in path.relative_to(REPO).parts:
                continue
            text = path.read_text()
            if "import dagster" in text or "from dagster" in text:
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []


def test_cron_from_environment() -> None:
    code = ("from taxbreak.pipeline.local import load_defs; "
            "print(sorted({s.cron_schedule for s in load_defs().schedules}))")
    env = {**os.environ, "TAXBREAK_SCHEDULE_CRON": "*/15 * * * *"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['*/15 * * * *']"


def test_code_version_follows_run_local_inputs_and_rules() -> None:
    """Editing a run-local file (int_busy_intervals) or a kernel-name rule changes the versions of the tables
    computed from it, and only theirs."""
    import dataclasses
    from unittest import mock

    from taxbreak.engine import analysis, rules
    from taxbreak.engine.plan import code_version

    files = {f.name: f for f in analysis.sql_files()}
    before = {n: code_version(n, files) for n in files if files[n].materialize != "temp"}
    edited = dict(files, int_busy_intervals=dataclasses.replace(
        files["int_busy_intervals"], text=files["int_busy_intervals"].text + "\n-- edited"))
    after = {n: code_version(n, edited) for n in before}
    changed = {n for n in before if before[n] != after[n]}
    # the three tables that read it (their dependents follow through Dagster's upstream-changed staleness)
    assert changed == {"device_idle_gaps", "skip_by_trace", "diagnosis"}
    # each run setting: only the tables whose SQL reads its table (sql/ '-- reads:' headers)
    for attr, value, readers in (
        ("LIB_KERNEL_RULES", (99, "x", 1, "x", "own_name"), {"kernel_taxbreak"}),
        ("STEP_PATTERNS", (99, "x", "decode", "x"), {"int_steps"}),
        ("T_SYS_DEFAULTS", (99, "x", 1, "x"), {"trace_launch_floor"}),
    ):
        with mock.patch.object(rules, attr, [*getattr(rules, attr), value]):  # the run settings' defaults
            assert {n for n in before if code_version(n, files) != before[n]} == readers, attr
    # a scalar setting (a run_config column): the tables whose SQL, or run-local inputs, read run_config
    readers = {n for n in before if "run_config" in files[n].reads or any(
        r in files and files[r].materialize == "temp" and "run_config" in files[r].reads for r in files[n].reads)}
    assert {"fusion_candidates", "taxbreak_by_scope", "int_steps", "host_partition"} <= readers
    with mock.patch.object(analysis.RunConfig, "from_settings",
                           classmethod(lambda cls, t_sys_ns=None: cls(fusion_min_count=3))):
        assert {n for n in before if code_version(n, files) != before[n]} == readers


def test_code_version_of_a_python_node_follows_its_module() -> None:
    """A table computed in Python (whatif_results: a header-only plan node) changes version with the source of its
    ``-- computed_by`` module; so does a later stage's SQL table (levers), whose statement that module runs."""
    from unittest import mock

    from taxbreak.engine import plan

    before = {n: plan.code_version(n) for n in ("whatif_results", "critical_path", "levers")}
    real = plan._module_source
    with mock.patch.object(plan, "_module_source", lambda fn: real(fn) + b"\n# edited"):
        after = {n: plan.code_version(n) for n in before}
    assert after["whatif_results"] != before["whatif_results"]
    assert after["critical_path"] != before["critical_path"]
    # levers is SQL whose statement whatif.write_tables runs: its module is the orchestration, hashed too
    assert after["levers"] != before["levers"]
    assert plan.node("whatif_results").python_only and not plan.node("levers").python_only


def test_settings_tables_are_declared_where_read() -> None:
    """Code versions follow the '-- reads:' headers, so every SQL file naming a run-settings table declares it."""
    import dataclasses
    import re

    from taxbreak.engine import analysis
    from taxbreak.engine.rules import settings_tables

    SETTINGS_TABLES = settings_tables()

    # every run setting is hashed into the versions of the tables that read it
    assert {a for attrs in SETTINGS_TABLES.values() for a in attrs} == {
        f.name for f in dataclasses.fields(analysis.RunConfig)}
    for f in analysis.sql_files():
        body = "\n".join(line for line in f.text.splitlines() if not line.startswith("--"))
        for table in SETTINGS_TABLES:
            assert bool(re.search(rf"\b{table}\b", body)) == (table in f.reads), (f.name, table)


def test_preload_builds_the_jobs_once_per_environment(monkeypatch) -> None:  # noqa: ANN001 - pytest fixture
    """The forkserver's preload (taxbreak.pipeline.preload) builds the jobs that reconstructable steps ask for; a
    step process forked from it gets the same objects, and a different environment gets jobs built for it."""
    import importlib

    from taxbreak.pipeline import local

    monkeypatch.setattr(local, "_JOBS", {})
    importlib.reload(importlib.import_module("taxbreak.pipeline.preload"))
    assert sorted(name for name, _env in local._JOBS) == ["ingest_batch_job", "refresh_job", "trace_job"]
    built = dict(local._JOBS)
    assert local.refresh_job() is built[("refresh_job", repr(sorted(os.environ.items())))]
    assert local.refresh_job().name == "refresh_job" and local.ingest_batch_job().name == "ingest_batch_job"
    monkeypatch.setenv("TAXBREAK_EXECUTOR", "in_process")
    assert local.trace_job() is not built[next(k for k in built if k[0] == "trace_job")]
    assert len(local._JOBS) == 4


def test_exports_take_the_writer_only_when_the_readers_copy_lags(tmp_path: Path) -> None:
    """warehouse_exports: every writer publishes its own marts and snapshot, so the step takes the lock only for
    what a killed writer left pending or a snapshot older than the file."""
    from taxbreak.pipeline.defs.analysis_assets import exports_behind
    from taxbreak.store.marts import mark_pending
    from taxbreak.store.warehouse import snapshot_path, writer

    db = tmp_path / "taxbreak.duckdb"
    assert exports_behind(db)  # nothing published yet
    with writer(db, traces=[]) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
    assert not exports_behind(db)
    marker = mark_pending(db, ["a" * 64])  # a writer that died before its marts
    assert exports_behind(db)
    marker.unlink()
    assert not exports_behind(db)
    snap = snapshot_path(db).stat().st_mtime_ns
    os.utime(db, ns=(snap + 10**9, snap + 10**9))  # the file changed after the snapshot
    assert exports_behind(db)
