"""The invariants (sql/checks/*.sql) find the rows that break them: clean tables pass, one corrupted value is caught;
Dagster shows them as blocking asset checks of the tables they guard."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from taxbreak.engine.analysis import materialize
from taxbreak.engine.checks import check_files, evaluate
from taxbreak.ingest import Lake, ingest_file

from .conftest import write_kineto


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checks")
    lake = Lake(root / "lake")
    for name, n in (("a.json", 3), ("b.json", 2)):
        assert ingest_file(write_kineto(root / "in" / name, n), lake).status == "ingested"
    db = root / "taxbreak.duckdb"
    materialize(db, root / "lake")
    return db


def _run(db: Path) -> dict[str, tuple[int, int]]:
    with duckdb.connect(str(db)) as con:
        return {r.name: (r.rows_checked, r.violations) for r in evaluate(con)}


def test_the_checks_are_the_files_beside_the_tables() -> None:
    checks = {c.name: c for c in check_files()}
    assert sorted(checks) == sorted(c[0] for c in CORRUPTIONS)
    assert {c.table for c in checks.values()} == {"taxbreak_by_scope", "kernel_taxbreak"}
    assert {c.severity for c in checks.values()} == {"error"}
    assert checks["kernel_sums_match_trace_rows"].reads == ("kernel_taxbreak", "taxbreak_by_scope")
    from taxbreak.pipeline.defs.checks import check_specs

    specs = {s.name: s for s in check_specs(["kernel_taxbreak"])}
    assert sorted(specs) == ["kernel_sums_match_trace_rows", "per_kernel_costs_consistent"]
    assert all(s.blocking for s in specs.values())


# (rule broken, statement breaking it in one row of trace a's 3 kernels); the trace row is scope_kind 'trace'
ONE_TRACE = "trace_id = (SELECT trace_id FROM kernel_taxbreak GROUP BY ALL HAVING count(*) = 3)"
CORRUPTIONS = [
    ("hdbi_in_unit_interval", f"UPDATE taxbreak_by_scope SET hdbi = 1.5 WHERE scope_kind = 'trace' AND {ONE_TRACE}"),
    ("times_never_negative",
     f"UPDATE taxbreak_by_scope SET t_device_active_ns = -1 WHERE scope_kind = 'trace' AND {ONE_TRACE}"),
    ("linked_plus_orphan_is_all_kernels",
     f"UPDATE taxbreak_by_scope SET orphan_kernels = orphan_kernels + 1 WHERE scope_kind = 'trace' AND {ONE_TRACE}"),
    ("orchestrate_is_ft_plus_ct_plus_kt",
     f"UPDATE taxbreak_by_scope SET t_orchestrate_ns = t_orchestrate_ns + 1 WHERE scope_kind = 'trace' "
     f"AND {ONE_TRACE}"),
    ("scopes_partition_the_trace",
     f"UPDATE taxbreak_by_scope SET t_device_active_ns = t_device_active_ns + 1 WHERE scope_kind = 'trace' "
     f"AND {ONE_TRACE}"),
    ("per_kernel_costs_consistent",
     f"UPDATE kernel_taxbreak SET delta_kt_ns = t_sys_ns + 1 WHERE kernel_seq = (SELECT min(kernel_seq) FROM "
     f"kernel_taxbreak WHERE {ONE_TRACE}) AND {ONE_TRACE}"),
    ("kernel_sums_match_trace_rows",
     f"UPDATE taxbreak_by_scope SET kernels = kernels + 1 WHERE scope_kind = 'trace' AND {ONE_TRACE}"),
]


def test_clean_tables_pass_every_rule(warehouse: Path) -> None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        n_kernels = con.execute("SELECT count(*) FROM kernel_taxbreak").fetchone()[0]
        n_scopes = con.execute("SELECT count(*) FROM taxbreak_by_scope").fetchone()[0]
    assert n_kernels == 5
    assert _run(warehouse) == {c.name: (n_kernels if c.table == "kernel_taxbreak" else n_scopes, 0)
                               for c in check_files()}


@pytest.mark.parametrize(("rule", "corruption"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_one_bad_value_is_caught(warehouse: Path, tmp_path: Path, rule: str, corruption: str) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copyfile(warehouse, db)
    with duckdb.connect(str(db)) as con:
        assert con.execute(corruption).fetchone()[0] == 1  # one row changed
        # the scope kinds that partition trace a: each disagrees with its trace row now
        kinds = con.execute(f"SELECT count(DISTINCT scope_kind) FROM taxbreak_by_scope WHERE {ONE_TRACE} "
                            "AND scope_kind IN ('step', 'phase', 'op', 'kernel')").fetchone()[0]
    got = {name: bad for name, (_checked, bad) in _run(db).items() if bad}
    expected = {
        "hdbi_in_unit_interval": {rule: 1},
        # the trace row's device time no longer matches its partitions either
        "times_never_negative": {rule: 1, "scopes_partition_the_trace": kinds},
        "linked_plus_orphan_is_all_kernels": {rule: 1},
        "orchestrate_is_ft_plus_ct_plus_kt": {rule: 1},
        "scopes_partition_the_trace": {rule: kinds},
        # the kernel's ΔKT no longer sums to its trace row either
        "per_kernel_costs_consistent": {rule: 1, "kernel_sums_match_trace_rows": 1},
        # the trace row's kernel count: every partition of it disagrees as well
        "kernel_sums_match_trace_rows": {rule: 1, "linked_plus_orphan_is_all_kernels": 1,
                                         "scopes_partition_the_trace": kinds},
    }[rule]
    assert kinds >= 2 and got == expected


def test_a_broken_invariant_blocks_the_trace(env: dict[str, Path], instance, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The checks are blocking and evaluated before the commit: a trace whose rows break a rule (here a rule made to
    flag every trace row) publishes nothing: no rows in the tables, no partition in the marts; the run fails and the
    failed evaluation is recorded; the trace before it stays as it was."""
    import dataclasses

    from taxbreak.engine import runner
    from taxbreak.pipeline.local import load_defs, tick

    defs = load_defs()
    first = write_kineto(env["inbox"] / "first.json", 2)
    t1 = tick(defs, instance)
    assert [r.success for r in t1.runs] == [True]
    broken = [dataclasses.replace(c, text="SELECT trace_id FROM taxbreak_by_scope WHERE scope_kind = 'trace'")
              if c.name == "hdbi_in_unit_interval" else c for c in check_files()]
    monkeypatch.setattr(runner, "check_files", lambda: broken)
    write_kineto(env["inbox"] / "second.json", 3, base_us=99.0)
    t2 = tick(defs, instance, t1.cursor)
    (run,) = t2.runs
    assert not run.success
    evals = {e.check_name: e for e in run.get_asset_check_evaluations()}
    assert not evals["hdbi_in_unit_interval"].passed
    assert evals["hdbi_in_unit_interval"].metadata["violations"].value == 1  # the new trace's row only
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        kernels = con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall()
    import hashlib

    first_id = hashlib.sha256(first.read_bytes()).hexdigest()
    assert kernels == [(first_id, 2)]
    marts = env["warehouse"].parent / "marts" / "kernel_taxbreak"
    assert [p.name for p in marts.glob("trace_id=*")] == [f"trace_id={first_id}"]
    # the downstream assets did not run for it
    done = {e.asset_key.to_user_string() for e in run.get_asset_materialization_events()}
    assert "warehouse_report" not in done and "kernel_taxbreak" not in done
    # and the tables' partitions page shows it: only the first trace's partition is materialised
    import dagster as dg

    for table in ("kernel_taxbreak", "taxbreak_by_scope"):
        assert set(instance.get_materialized_partitions(dg.AssetKey(table))) == set(t1.partition_keys)


def test_out_of_memory_fails_the_step_with_the_one_line(env: dict[str, Path], instance,  # noqa: ANN001
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's out-of-memory error in the Dagster analysis step: the step fails with the same one line as the
    command line (the table, the memory_limit, the setting to change), the new trace publishes nothing and the
    trace before it stays as it was."""
    import hashlib

    from taxbreak.pipeline.local import load_defs, tick

    defs = load_defs()
    first = write_kineto(env["inbox"] / "first.json", 2)
    t1 = tick(defs, instance)
    assert [r.success for r in t1.runs] == [True]
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "1MB")
    write_kineto(env["inbox"] / "second.json", 3, base_us=99.0)
    t2 = tick(load_defs(), instance, t1.cursor)
    (run,) = t2.runs
    assert not run.success
    messages = []  # Dagster wraps the step's exception: ours is the first cause, as its UI shows it
    for event in run.get_step_failure_events():
        error = event.step_failure_data.error
        while error is not None:
            messages.append(error.message)
            error = error.cause
    assert any(m.startswith("taxbreak.engine.analysis.AnalysisOutOfMemory: ") and " ran out of memory at "
               "memory_limit 976.5 KiB (Out of Memory Error: " in m and "nothing of this run was published. Set "
               "analysis.duckdb_memory ($TAXBREAK_DUCKDB_MEMORY) to another size" in m for m in messages), messages
    first_id = hashlib.sha256(first.read_bytes()).hexdigest()
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        kernels = con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall()
    assert kernels == [(first_id, 2)]
