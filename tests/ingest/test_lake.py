"""The Parquet lake: atomic partitions, catalogue rows, refusal of unknown schema major versions."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taxbreak.ingest import Lake, TraceInfo
from taxbreak.schemas import CATALOGUE_SCHEMA, EVENT_SCHEMA, SchemaVersionError

TRACE_ID = "ab" * 32


def _batch(n: int, start_ns: int = 0) -> pa.RecordBatch:
    rows = [
        {"trace_id": TRACE_ID, "source_format": "kineto", "kind": "kernel", "name": f"k{i}",
         "ts_ns": start_ns + 10 * i, "dur_ns": 5}
        for i in range(n)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=EVENT_SCHEMA)


def _leftovers(lake: Lake) -> list[str]:
    staging = lake.root / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def test_write_publishes_one_partition_and_a_catalogue_row(lake):
    info = TraceInfo(source_format="kineto", skipped_counts={"missing_ts": 2}, source_event_count=7)
    row = lake.write_events(TRACE_ID, iter([_batch(3), _batch(2, start_ns=100)]), info,
                            file_name="t.json", source_path="/x/t.json", file_bytes=123)
    assert _leftovers(lake) == []
    assert [p.name for p in lake.events_dir(TRACE_ID).iterdir()] == ["part-0.parquet"]
    table = lake.read_events(TRACE_ID)
    assert table.num_rows == 5 and table.schema == EVENT_SCHEMA
    assert (row["event_count"], row["source_event_count"], row["duration_ns"]) == (5, 7, 115)
    assert (row["event_counts_json"], row["skipped_counts_json"]) == ('{"kernel": 5}', '{"missing_ts": 2}')
    assert (row["status"], row["file_bytes"], row["schema_version"]) == ("ingested", 123, "1.2.0")
    assert lake.catalogue_row(TRACE_ID) == row  # what was returned is what was stored
    assert lake.catalogue().to_pylist() == [row]


def test_batches_of_a_looser_schema_are_cast_to_the_event_schema(lake):
    """An adapter's batch without field metadata and with a wider device_id is stored in EVENT_SCHEMA."""
    loose = pa.schema([f.remove_metadata() for f in EVENT_SCHEMA]).remove_metadata()
    loose = loose.set(loose.get_field_index("device_id"), pa.field("device_id", pa.int64()))
    batch = pa.RecordBatch.from_pylist(
        [{"trace_id": TRACE_ID, "source_format": "kineto", "kind": "kernel", "ts_ns": 7, "device_id": 3}], schema=loose)
    lake.write_events(TRACE_ID, iter([batch]), TraceInfo(source_format="kineto"), file_name="t.json",
                      source_path="/x/t.json", file_bytes=1)
    table = lake.read_events(TRACE_ID)
    assert table.schema.equals(EVENT_SCHEMA, check_metadata=True)
    assert table.select(["kind", "ts_ns", "device_id"]).to_pylist() == [{"kind": "kernel", "ts_ns": 7, "device_id": 3}]


def test_a_failing_batch_stream_leaves_nothing_behind(lake):
    def batches() -> Iterator[pa.RecordBatch]:
        yield _batch(3)
        raise RuntimeError("adapter broke halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        lake.write_events(TRACE_ID, batches(), TraceInfo(source_format="kineto"),
                          file_name="t.json", source_path="/x/t.json", file_bytes=1)
    assert _leftovers(lake) == []
    assert not lake.events_dir(TRACE_ID).exists()
    assert lake.catalogue_row(TRACE_ID) is None


def test_reader_refuses_an_unknown_major_version(lake):
    part = lake.events_dir(TRACE_ID) / "part-0.parquet"
    part.parent.mkdir(parents=True)
    future = EVENT_SCHEMA.with_metadata({"taxbreak.schema.name": "taxbreak.events", "taxbreak.schema.version": "2.0.0"})
    pq.write_table(pa.Table.from_batches([_batch(1)]).cast(future), part)
    with pytest.raises(SchemaVersionError, match=r"written with taxbreak event schema 2\.0\.0.*major version 1"):
        lake.read_events(TRACE_ID)


def test_catalogue_refuses_an_unknown_major_version(lake):
    path = lake.catalogue_path(TRACE_ID)
    path.parent.mkdir(parents=True)
    future = CATALOGUE_SCHEMA.with_metadata(
        {"taxbreak.schema.name": "taxbreak.catalogue", "taxbreak.schema.version": "2.0.0"})
    pq.write_table(CATALOGUE_SCHEMA.empty_table().cast(future), path)
    with pytest.raises(SchemaVersionError, match="2.0.0"):
        lake.catalogue()
    with pytest.raises(SchemaVersionError, match="upgrade taxbreak or re-ingest"):
        lake.catalogue_row(TRACE_ID)


def test_analysis_refuses_an_events_partition_of_an_unknown_major_version(lake, tmp_path):
    from taxbreak.engine import analysis

    lake.write_events(TRACE_ID, iter([_batch(2)]), TraceInfo(source_format="kineto"), file_name="t.json",
                      source_path="/x/t.json", file_bytes=1)
    assert lake.check_events_version(TRACE_ID) == "1.2.0"
    part = lake.events_dir(TRACE_ID) / "part-0.parquet"
    future = EVENT_SCHEMA.with_metadata({"taxbreak.schema.name": "taxbreak.events", "taxbreak.schema.version": "2.1.0"})
    pq.write_table(pa.Table.from_batches([_batch(2)]).cast(future), part)
    with pytest.raises(SchemaVersionError, match=rf"{part}: written with taxbreak event schema 2\.1\.0"):
        analysis.materialize(tmp_path / "wh.duckdb", lake.root)


def test_kernel_gpu_count_is_the_devices_that_ran_kernels(lake):
    """The host lists 8 GPUs, kernels ran on devices 0 and 3: kernel_gpu_count 2, gpu_count (the host's list) 8.
    A catalogue file written before schema 1.2 (no kernel_gpu_count column) reads with the column NULL."""
    batch = _batch(4)
    devices = pa.array([0, 3, 3, None], pa.int32())
    batch = batch.set_column(batch.schema.get_field_index("device_id"), EVENT_SCHEMA.field("device_id"), devices)
    info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA A100"] * 8)
    row = lake.write_events(TRACE_ID, iter([batch]), info, file_name="t.json", source_path="/x/t.json", file_bytes=1)
    assert (row["kernel_gpu_count"], row["gpu_count"]) == (2, 8)
    old = pa.Table.from_pylist([row], schema=CATALOGUE_SCHEMA).drop_columns(["kernel_gpu_count"])
    pq.write_table(old, lake.catalogue_path(TRACE_ID))
    assert lake.catalogue().to_pylist() == [{**row, "kernel_gpu_count": None}]
