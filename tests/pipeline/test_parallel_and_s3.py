"""Several partitions at once under the multiprocess executor; the S3 path against moto's server on loopback."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from s3_helpers import client as s3_client
from s3_helpers import moto_s3, point_at

from taxbreak.ingest import Lake
from taxbreak.pipeline.local import load_defs, tick

from .conftest import NSIGHT_EVENTS, NSIGHT_KERNELS, write_kineto, write_nsight


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_batch_job_ingests_partitions_in_parallel(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    inbox = env["inbox"]
    files = [write_kineto(inbox / "a.json", 2), write_kineto(inbox / "b.json", 3), write_nsight(inbox / "n.sqlite")]
    from taxbreak.pipeline import local

    with dg.execute_job(
        dg.reconstructable(local.ingest_batch_job), instance=instance,
        run_config={"execution": {"config": {
            "max_concurrent": 3, "start_method": {"forkserver": {"preload_modules": ["taxbreak.pipeline.preload"]}},
        }}},
    ) as result:
        assert result.success
        keys = {f"{f.name.split('.')[0]}-{_sha(f.read_bytes())[:12]}" for f in files}  # a-…, b-…, n-…
        assert set(instance.get_dynamic_partitions("traces")) == keys
        mats = result.get_asset_materialization_events()
        assert {m.partition for m in mats} == keys
        assert {m.materialization.metadata["status"].value for m in mats} == {"ingested"}
        # one step per trace, each in a process of its own
        pids = {e.pid for e in result.all_events if e.is_step_start and e.step_key.startswith("ingest_one")}
        assert len(pids) == 3
        cat = {r["trace_id"]: r["event_count"] for r in Lake(env["lake"]).catalogue().to_pylist()}
        assert cat == {_sha(files[0].read_bytes()): 7, _sha(files[1].read_bytes()): 10,
                       _sha(files[2].read_bytes()): NSIGHT_EVENTS}
        assert result.output_for_node("summarise") == {"ingested": 3}


@pytest.mark.parametrize("lake_on", ["local", "s3"])
def test_s3_bucket_end_to_end(env: dict[str, Path], instance: dg.DagsterInstance,
                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lake_on: str) -> None:
    """Reports uploaded to S3 -> sensor tick -> runs -> tables; the lake local or on S3 (same endpoint)."""
    buckets = ["reports"] + (["pipeline-lake", "pipeline-marts"] if lake_on == "s3" else [])
    with moto_s3(*buckets) as endpoint:
        point_at(monkeypatch, endpoint, TAXBREAK_BUCKET="s3://reports/inbox")
        s3 = s3_client(endpoint)
        lake_root: str | Path = env["lake"]
        if lake_on == "s3":
            lake_root = "s3://pipeline-lake/taxbreak"
            monkeypatch.setenv("TAXBREAK_LAKE", lake_root)
            monkeypatch.setenv("TAXBREAK_MARTS", "s3://pipeline-marts/marts")  # the marts on S3 too
        good = write_kineto(tmp_path / "src" / "k.json", 2).read_bytes()
        nsight = write_nsight(tmp_path / "src" / "n.sqlite").read_bytes()
        s3.put_object(Bucket="reports", Key="inbox/gpu-01/k.json", Body=good)
        s3.put_object(Bucket="reports", Key="inbox/gpu-02/n.sqlite", Body=nsight)
        s3.put_object(Bucket="reports", Key="inbox/notes.txt", Body=b"not a trace")

        defs = load_defs()
        t1 = tick(defs, instance)
        assert sorted(t1.trace_ids) == sorted([_sha(good), _sha(nsight)])
        assert sorted(t1.partition_keys) == sorted([f"k-{_sha(good)[:12]}", f"n-{_sha(nsight)[:12]}"])
        assert all(r.success for r in t1.runs)
        cat = {r["trace_id"]: r for r in Lake(lake_root).catalogue().to_pylist()}
        assert cat[_sha(good)]["status"] == "ingested" and cat[_sha(good)]["event_count"] == 7
        assert cat[_sha(good)]["source_path"] == "s3://reports/inbox/gpu-01/k.json"
        assert cat[_sha(nsight)]["source_path"] == "s3://reports/inbox/gpu-02/n.sqlite"
        with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
            kernels = dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())
        assert kernels == {_sha(good): 2, _sha(nsight): NSIGHT_KERNELS}
        if lake_on == "s3":  # the lake is two objects per trace in the store, nothing of it on local disk
            keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="pipeline-lake")["Contents"])
            assert keys == sorted(f"taxbreak/{d}" for t in (_sha(good), _sha(nsight))
                                  for d in (f"catalogue/{t}.parquet", f"events/trace_id={t}/part-0.parquet"))
            assert not env["lake"].exists()
            # the marts too, and the report step read them through the snapshot (the S3 filesystem registered)
            marts = {o["Key"] for o in s3.list_objects_v2(Bucket="pipeline-marts", Prefix="marts/")["Contents"]}
            assert "marts/_manifest.json" in marts
            assert any(k.startswith("marts/kernel_taxbreak/") for k in marts)
            report = env["warehouse"].parent / "reports" / "index.html"
            assert report.exists() and "k.json" in report.read_text(encoding="utf-8")
            (exports,) = [e for e in t1.runs[-1].get_asset_materialization_events()
                          if e.asset_key.to_user_string() == "warehouse_exports"]
            assert exports.materialization.metadata["traces_kernel_taxbreak"].value == 2
            assert exports.materialization.metadata["marts_dir"].value == "s3://pipeline-marts/marts"
        assert tick(defs, instance, t1.cursor).runs == []
