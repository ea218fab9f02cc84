"""The lake on S3: against moto's S3 server on 127.0.0.1 (real HTTP, real multipart uploads), no mock objects.

Ingest, re-ingest, a failing file, an interrupted write, DuckDB reading the lake (analysis into a local DuckDB
file, the ``taxbreak sql`` views, the ingest summary's link counts)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import duckdb
import pyarrow as pa
import pytest
from s3_helpers import empty, moto_s3, point_at

from taxbreak.ingest import Lake, TraceInfo, ingest_file
from taxbreak.ingest.objects import S3Settings
from taxbreak.schemas import EVENT_SCHEMA

BUCKET = "lake"
ROOT = f"s3://{BUCKET}/team/lake"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """An S3 endpoint URL (moto's threaded server on loopback), bucket ``lake`` created."""
    with moto_s3(BUCKET) as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - a boto3 S3 client; the lake emptied
    """A client on the server, the environment pointing at it (as the bucket's variables do), an empty lake."""
    point_at(monkeypatch, s3_server)
    empty(s3_server, BUCKET)
    return boto3.client("s3", endpoint_url=s3_server)


def _keys(client) -> list[str]:  # noqa: ANN001
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def _kineto(path: Path, n_kernels: int) -> Path:
    """n aten::mm ops, each launching one 40 us kernel: 3n timed events + 1 process_name = 3n + 1 events."""
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "python"}}]
    for i in range(n_kernels):
        t = 1000.0 + 100.0 * i
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 11, "tid": 22, "ts": t, "dur": 30.0,
             "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 22, "ts": t + 5.0,
             "dur": 10.0, "args": {"correlation": 100 + i, "External id": i + 1}},
            {"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": t + 20.0, "dur": 40.0,
             "args": {"device": 0, "stream": 7, "correlation": 100 + i, "External id": i + 1}},
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_ingest_into_s3_then_unchanged(s3, tmp_path: Path) -> None:  # noqa: ANN001
    lake = Lake(ROOT)
    assert lake.is_object_store and str(lake.root) == ROOT
    res = ingest_file(_kineto(tmp_path / "k.json", 3), lake)
    assert res.status == "ingested", res.error
    tid = res.trace_id
    # exactly one events object and one catalogue object; nothing staged in the store
    assert _keys(s3) == [f"team/lake/catalogue/{tid}.parquet", f"team/lake/events/trace_id={tid}/part-0.parquet"]
    assert lake.has_events(tid) and not lake.has_events("0" * 64)
    events = lake.read_events(tid)
    assert events.num_rows == 10 and events.schema == EVENT_SCHEMA
    kernels = sorted((r["name"], r["ts_ns"], r["dur_ns"]) for r in events.to_pylist() if r["kind"] == "kernel")
    # ns from the trace's first timestamp (1000 us): kernel i at 1020 + 100 i us
    assert kernels == [("gemm_0", 20_000, 40_000), ("gemm_1", 120_000, 40_000), ("gemm_2", 220_000, 40_000)]
    row = lake.catalogue_row(tid)
    assert (row["status"], row["event_count"], row["duration_ns"]) == ("ingested", 10, 260_000)
    assert lake.catalogue().to_pylist() == [row]

    etag = s3.head_object(Bucket=BUCKET, Key=f"team/lake/events/trace_id={tid}/part-0.parquet")["ETag"]
    again = ingest_file(tmp_path / "k.json", Lake(ROOT))
    assert again.status == "unchanged" and again.row["ingested_at_ns"] == row["ingested_at_ns"]
    assert s3.head_object(Bucket=BUCKET, Key=f"team/lake/events/trace_id={tid}/part-0.parquet")["ETag"] == etag

    forced = ingest_file(tmp_path / "k.json", lake, force=True)  # replaces the object whole
    assert forced.status == "ingested" and forced.row["ingested_at_ns"] > row["ingested_at_ns"]
    assert len(_keys(s3)) == 2 and lake.read_events(tid).num_rows == 10


def test_a_failing_file_leaves_only_its_catalogue_object(s3, tmp_path: Path) -> None:  # noqa: ANN001
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur"')
    lake = Lake(ROOT)
    res = ingest_file(bad, lake)
    assert res.status == "failed" and res.error
    assert _keys(s3) == [f"team/lake/catalogue/{res.trace_id}.parquet"]
    row = lake.catalogue_row(res.trace_id)
    assert (row["status"], row["event_count"], row["error"]) == ("failed", 0, res.error)
    assert not lake.has_events(res.trace_id)
    assert ingest_file(bad, lake).status == "failed"  # failed content is not retried unasked
    assert len(_keys(s3)) == 1


def test_an_interrupted_write_uploads_nothing(s3) -> None:  # noqa: ANN001
    tid = "ab" * 32

    def batches() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist([{"trace_id": tid, "source_format": "kineto", "kind": "kernel",
                                           "name": "k", "ts_ns": 0, "dur_ns": 5}], schema=EVENT_SCHEMA)
        raise RuntimeError("adapter broke halfway")

    lake = Lake(ROOT)
    with pytest.raises(RuntimeError, match="halfway"):
        lake.write_events(tid, batches(), TraceInfo(source_format="kineto"), file_name="t.json",
                          source_path="/x/t.json", file_bytes=1)
    assert _keys(s3) == []
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert lake.catalogue().num_rows == 0 and not (lake.root / "events").exists()


def test_duckdb_reads_the_s3_lake(s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from taxbreak.engine.analysis import materialize
    from taxbreak.ingest.links import link_counts
    from taxbreak.ingest.nsys_rep import lake_kernel_summary
    from taxbreak.store.query import open_readonly

    lake = Lake(ROOT)
    ids = {n: ingest_file(_kineto(tmp_path / f"k{n}.json", n), lake).trace_id for n in (2, 5)}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    ingest_file(bad, lake)

    warehouse = tmp_path / "wh" / "taxbreak.duckdb"
    counts = materialize(warehouse, ROOT)  # the root as given on the command line; S3 settings from the env
    assert counts["kernel_taxbreak"] == 7
    with duckdb.connect(str(warehouse), read_only=True) as con:
        per_trace = dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())
    assert per_trace == {ids[2]: 2, ids[5]: 5}
    assert not any(tmp_path.glob("**/events")) and not (tmp_path / "s3:").exists()  # nothing of the lake local

    # ``taxbreak sql`` attaches the lake as views; Paths() turns the URL into Path('s3:/lake/...'), accepted too
    opened = open_readonly(warehouse, Path(ROOT))
    try:
        assert opened.con.execute("SELECT count(*) FROM events WHERE kind = 'kernel'").fetchone() == (7,)
        assert sorted(opened.con.execute("SELECT status, event_count FROM catalogue").fetchall()) == [
            ("failed", 0), ("ingested", 7), ("ingested", 16)]
    finally:
        opened.con.close()

    assert link_counts(ROOT, ids[5]) == {"kernels": 5, "launches": 5, "memcpys": 0, "to_launch": 5}
    # nsys-check's side of the comparison reads the lake the same way: each kernel once, 40 us
    assert lake_kernel_summary(ROOT, ids[2]) == {"gemm_0": (1, 40_000), "gemm_1": (1, 40_000)}

    # explicit settings win over the environment: with the variables pointing nowhere, the Lake's own reach S3
    settings = S3Settings.from_env()
    monkeypatch.setenv("TAXBREAK_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    explicit = Lake(ROOT, s3=settings)
    assert explicit.catalogue().num_rows == 3
    assert materialize(tmp_path / "wh2.duckdb", explicit, trace_ids=[ids[2]])["kernel_taxbreak"] == 2


def test_s3_urls_and_settings() -> None:
    from taxbreak.ingest.objects import is_s3_url, normalise_s3_url

    assert normalise_s3_url("s3://b/p/") == "s3://b/p" == normalise_s3_url(Path("s3://b/p"))
    assert is_s3_url(Path("s3://b")) and not is_s3_url("/data/s3/lake") and not is_s3_url("s3-lake")
    with pytest.raises(ValueError, match="needs a bucket"):
        normalise_s3_url("s3://")
    assert Lake(Path("s3://b/p"), s3=S3Settings(endpoint_url="http://127.0.0.1:9")).url == "s3://b/p"
    assert str(Lake("warehouse/lake").root) == "warehouse/lake" and not Lake("warehouse/lake").is_object_store
