"""The Dagster asset whatif_tables: the default scenarios of every analysed trace, written once per trace."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pytest

from taxbreak.engine import analysis
from taxbreak.features import whatif
from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource
from taxbreak.pipeline.defs.whatif_assets import whatif_tables
from taxbreak.schemas import EVENT_SCHEMA
from taxbreak.store.warehouse import WarehouseBusy, warehouse_lock

from .test_whatif import TABLES, TINY, tiny_rows


def test_asset_computes_default_scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA H100 80GB HBM3"], host_name="h", metadata={})
    Lake(root).write_events(TINY, [pa.RecordBatch.from_pylist(tiny_rows(), schema=EVENT_SCHEMA)], info,
                            file_name="tiny.json", source_path="/nonexistent/tiny.json", file_bytes=1)
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, root, tables=TABLES)
    lock_free: list[bool] = []
    real = whatif.replay_traces

    def replay(*a, **k):  # noqa: ANN002, ANN003, ANN202 - whatif.replay_traces' arguments
        try:  # the replay only reads: another writer may take the lock meanwhile
            with warehouse_lock(wh, wait_s=0):
                lock_free.append(True)
        except WarehouseBusy:
            lock_free.append(False)
        return real(*a, **k)

    monkeypatch.setattr(whatif, "replay_traces", replay)
    res = dg.materialize([whatif_tables], resources={"lake": LakeResource(root=str(root)),
                                                     "warehouse": WarehouseResource(path=str(wh))})
    assert res.success
    assert lock_free == [True]
    con = duckdb.connect(str(wh), read_only=True)
    names = [r[0] for r in con.execute("SELECT scenario FROM whatif_results ORDER BY scenario").fetchall()]
    assert names == sorted(s.name for s in whatif.default_scenarios())
    assert con.execute("SELECT il_replay_ns FROM whatif_results WHERE scenario = 'host_x2'").fetchone()[0] == 29000
    assert con.execute("SELECT count(*) FROM critical_path").fetchone()[0] == len(names)
    con.close()
    # a second run finds nothing new to replay
    res = dg.materialize([whatif_tables], resources={"lake": LakeResource(root=str(root)),
                                                     "warehouse": WarehouseResource(path=str(wh))})
    mats = res.asset_materializations_for_node("whatif_tables")
    assert {m.metadata["traces_replayed"].value for m in mats} == {0}
