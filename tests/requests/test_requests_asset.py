"""The Dagster asset refits only the (model, GPU, phase) groups that got new serving steps."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

dg = pytest.importorskip("dagster")

from taxbreak.capture.synthetic_serving import ServingConfig, run_tables, simulate_serving  # noqa: E402
from taxbreak.pipeline.defs.request_assets import request_model_fit  # noqa: E402
from taxbreak.pipeline.defs.resources import WarehouseResource  # noqa: E402


def _write(db: Path, steps: pa.Table, reqs: pa.Table, mode: str) -> None:
    con = duckdb.connect(str(db))
    con.register("_s", steps)
    con.register("_r", reqs)
    if mode == "create":
        con.execute("CREATE TABLE serving_steps AS SELECT * FROM _s")
        con.execute("CREATE TABLE serving_step_requests AS SELECT * FROM _r")
    else:
        con.execute("INSERT INTO serving_steps SELECT * FROM _s")
        con.execute("INSERT INTO serving_step_requests SELECT * FROM _r")
    con.close()


def _run(db: Path) -> dict:
    res = dg.materialize([request_model_fit], resources={"warehouse": WarehouseResource(path=str(db))})
    assert res.success
    (mat,) = res.asset_materializations_for_node("request_model_fit")
    return {k: v.value for k, v in mat.metadata.items()}


def test_asset_refits_stale_groups_only(tmp_path: Path) -> None:
    db = tmp_path / "wh.duckdb"
    run = simulate_serving(ServingConfig(n_requests=120, policy="separate", seed=2))
    steps, reqs, _ = run_tables(run, trace_id="t1")
    _write(db, steps, reqs, "create")
    first = _run(db)
    assert first["refitted_groups"] == 2 and first["refitted"].count("synthetic-serving-dense") == 2
    assert _run(db)["refitted_groups"] == 0  # nothing new
    # a second trace of another GPU arrives: only its groups are fitted, the first GPU's fits stay
    run2 = simulate_serving(ServingConfig(n_requests=60, policy="separate", seed=5, gpu_name="NVIDIA H200"))
    s2, r2, _ = run_tables(run2, trace_id="t2")
    _write(db, s2, r2, "insert")
    third = _run(db)
    assert third["refitted_groups"] == 2 and "NVIDIA H200" in third["refitted"]
    assert "H100" not in third["refitted"]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM request_model_fit").fetchone()[0] == 4
    assert con.execute("SELECT count(DISTINCT trace_id) FROM request_totals").fetchone()[0] == 2
    con.close()
