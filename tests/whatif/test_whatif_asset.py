"""The Dagster asset whatif_tables: the default scenarios of every analysed trace, written once per trace."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa

from taxbreak.engine import analysis
from taxbreak.features import whatif
from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource
from taxbreak.pipeline.defs.whatif_assets import whatif_tables
from taxbreak.schemas import EVENT_SCHEMA

from .test_whatif import TABLES, TINY, tiny_rows


def test_asset_computes_default_scenarios(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA H100 80GB HBM3"], host_name="h", metadata={})
    Lake(root).write_events(TINY, [pa.RecordBatch.from_pylist(tiny_rows(), schema=EVENT_SCHEMA)], info,
                            file_name="tiny.json", source_path="/nonexistent/tiny.json", file_bytes=1)
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, root, tables=TABLES)
    res = dg.materialize([whatif_tables], resources={"lake": LakeResource(root=str(root)),
                                                     "warehouse": WarehouseResource(path=str(wh))})
    assert res.success
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
