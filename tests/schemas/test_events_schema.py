from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taxbreak.schemas import (
    CATALOGUE_SCHEMA,
    EVENT_KINDS,
    EVENT_SCHEMA,
    LAUNCH_KINDS,
    SchemaVersionError,
    check_schema_version,
)


@pytest.mark.parametrize("schema", [EVENT_SCHEMA, CATALOGUE_SCHEMA])
def test_every_field_has_unit_and_description(schema: pa.Schema) -> None:
    for fld in schema:
        md = fld.metadata or {}
        assert b"unit" in md and b"description" in md, fld.name
        assert md[b"description"].strip(), fld.name
        # times are int64 ns and say so in their name, both ways round; byte counts name their unit too
        assert fld.name.endswith("_ns") == (md[b"unit"] == b"ns"), fld.name
        if fld.name.endswith("_ns"):
            assert fld.type == pa.int64(), fld.name
        if md[b"unit"] == b"bytes":
            assert fld.name.endswith("bytes") and fld.type == pa.int64(), fld.name


def test_time_fields_and_required_columns() -> None:
    names = set(EVENT_SCHEMA.names)
    for required in ("trace_id", "source_format", "kind", "name", "ts_ns", "dur_ns", "pid", "tid", "device_id",
                     "stream_id", "correlation_id", "external_id", "grid_x", "block_x", "registers_per_thread",
                     "shared_memory_bytes", "bytes", "copy_kind", "args_json"):
        assert required in names
    assert EVENT_SCHEMA.field("pid").type == pa.string()
    assert {"kernel", "runtime_api", "driver_api", "library_api", "graph_launch", "nvtx_range", "flow"} <= set(
        EVENT_KINDS
    )
    assert LAUNCH_KINDS == ("runtime_api", "driver_api", "graph_launch") and set(LAUNCH_KINDS) <= set(EVENT_KINDS)


def test_schema_version_round_trips_through_parquet(tmp_path) -> None:
    path = tmp_path / "e.parquet"
    pq.write_table(EVENT_SCHEMA.empty_table(), path)
    meta = pq.read_schema(path).metadata
    assert check_schema_version(meta, str(path)) == "1.2.0"
    # field metadata survives the round trip
    assert pq.read_schema(path).field("ts_ns").metadata[b"unit"] == b"ns"


def test_unknown_major_version_is_refused_with_a_clear_message() -> None:
    with pytest.raises(SchemaVersionError, match=r"x\.parquet: written with taxbreak event schema 2\.0\.0.*major "
                       r"version 1 only"):
        check_schema_version({b"taxbreak.schema.version": b"2.0.0"}, "x.parquet")
    with pytest.raises(SchemaVersionError, match="not a taxbreak file"):
        check_schema_version({}, "y.parquet")
    assert check_schema_version({b"taxbreak.schema.version": b"1.7.3"}, "z") == "1.7.3"
