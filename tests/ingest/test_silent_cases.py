"""Issue 30 item 5, the ingest side: inputs that were stored wrong without a word now fail naming the field, or are
stored with a count (a sidecar sweep block, counts beyond int64, traceEvents twice, dangling Nsight string ids, a
kernel table that is a view)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from nsys_fixtures import build_tiny_export, insert, kernel_row

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.sidecar import MAX_COUNT, MetaError, validate_meta

V = {"taxbreak_meta_version": 1}


@pytest.mark.parametrize(("meta", "message"), [
    ({"sweep": {"batch_size": -8}}, "sidecar: sweep.batch_size must be a positive integer, got -8"),
    ({"sweep": {"batch_size": 0}}, "sidecar: sweep.batch_size must be a positive integer, got 0"),
    ({"sweep": {"seq_len": "2048"}}, "sidecar: sweep.seq_len must be a positive integer, got '2048'"),
    ({"sweep": {"phase": "warmup"}}, "sidecar: sweep.phase must be one of ('prefill', 'decode'), got 'warmup'"),
    ({"sweep": {"name": 3}}, "sidecar: sweep.name must be a string, got 3"),
    ({"sweep": [4]}, "sidecar: sweep must be an object, got list"),
    ({"output_tokens": 10**30}, f"sidecar: output_tokens must be at most {MAX_COUNT}, got {10**30}"),
    ({"output_tokens": 1e30}, "sidecar: output_tokens must be a non-negative integer, got 1e+30"),
    ({"steps": [{"name": "s", "tokens": 2**63}]}, f"sidecar: steps[0].tokens must be at most {MAX_COUNT}, got "
     f"{2**63}"),
])
def test_sidecar_values_out_of_range_name_the_field(meta: dict, message: str) -> None:
    with pytest.raises(MetaError) as err:
        validate_meta({**V, **meta})
    assert str(err.value) == message


def test_a_good_sweep_block_and_the_largest_count_pass() -> None:
    meta = validate_meta({**V, "output_tokens": MAX_COUNT, "sweep": {"name": "bs", "batch_size": 8, "seq_len": 2048,
                                                                    "phase": "decode", "extra": 1}})
    assert meta["sweep"] == {"name": "bs", "batch_size": 8, "seq_len": 2048, "phase": "decode", "extra": 1}
    assert meta["output_tokens"] == MAX_COUNT


EV = '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}'


@pytest.mark.parametrize("body", [
    '{"traceEvents":[' + EV + '],"traceEvents":[' + EV + "," + EV + "]}",  # the streaming route merged both arrays
    '{"traceEvents":[' + EV + '],"x":1,"traceEvents":[]}',  # the fast route kept the first array only
    '{"traceEvents":[],"traceEvents":[' + EV + "]}",
])
def test_trace_events_twice_fails_naming_the_key(tmp_path: Path, body: str) -> None:
    path = tmp_path / "twice.json"
    path.write_text(body)
    res = ingest_file(path, Lake(tmp_path / "lake"))
    assert res.status == "failed"
    assert res.error == (f"{path}: the key traceEvents appears twice at the top level: which array is the trace is "
                         "unknown (a JSON reader keeps one and drops the other); not ingested")


def test_trace_events_nested_in_metadata_is_no_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "nested.json"
    path.write_text('{"traceEvents":[' + EV + '],"meta":{"traceEvents":1}}')
    res = ingest_file(path, Lake(tmp_path / "lake"))
    assert res.status == "ingested" and res.row["event_count"] == 1


def test_dangling_string_ids_are_counted(tmp_path: Path) -> None:
    path = build_tiny_export(tmp_path / "dangling.sqlite")
    con = sqlite3.connect(path)
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(5000, 5100, 11, 7, 777, 778))  # ids StringIds lacks
    con.commit()
    con.close()
    lake = Lake(tmp_path / "lake")
    res = ingest_file(path, lake)
    assert res.status == "ingested"
    meta = json.loads(res.row["metadata_json"])
    assert meta["dangling_string_ids"] == {"CUPTI_ACTIVITY_KIND_KERNEL.demangledName": 1,
                                           "CUPTI_ACTIVITY_KIND_KERNEL.shortName": 1}
    assert "2 row(s) name a string id that StringIds does not hold" in " ".join(meta["notes"])
    events = pq.read_table(lake.events_path(res.trace_id))
    kernels = events.filter(pc.equal(events.column("kind"), "kernel"))
    assert kernels.column("name").null_count == 1 and kernels.num_rows == 5


def test_clean_export_has_no_dangling_count(tmp_path: Path) -> None:
    res = ingest_file(build_tiny_export(tmp_path / "tiny.sqlite"), Lake(tmp_path / "lake"))
    assert "dangling_string_ids" not in json.loads(res.row["metadata_json"])


def test_a_kernel_table_stored_as_a_view_is_read(tmp_path: Path) -> None:
    plain = build_tiny_export(tmp_path / "plain.sqlite")
    want = ingest_file(plain, Lake(tmp_path / "lake1")).row["event_counts_json"]
    path = build_tiny_export(tmp_path / "view.sqlite")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO kernels_raw")
    con.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM kernels_raw")
    con.commit()
    con.close()
    res = ingest_file(path, Lake(tmp_path / "lake2"))
    assert res.status == "ingested"
    assert json.loads(res.row["event_counts_json"])["kernel"] == 4
    assert res.row["event_counts_json"] == want


def test_text_ids_fail_naming_the_file_table_and_column(tmp_path: Path) -> None:
    """Issue 30 item 6: text where Nsight writes integer ids surfaced as "unexpected ArrowInvalid ...".  Text that
    reads as an integer ('7') is still read; any other text fails naming the file, the table and the column."""
    path = build_tiny_export(tmp_path / "text_ids.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE s2 (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("INSERT INTO s2 SELECT CAST(id AS TEXT), value FROM StringIds")
    con.execute("DROP TABLE StringIds")
    con.execute("ALTER TABLE s2 RENAME TO StringIds")
    con.commit()
    assert ingest_file(path, Lake(tmp_path / "lake1")).status == "ingested"  # '1', '2': integers as text
    con.execute("UPDATE StringIds SET id = 'x' || id WHERE rowid = (SELECT max(rowid) FROM StringIds)")
    con.commit()
    (bad,) = [r for (r,) in con.execute("SELECT id FROM StringIds WHERE id LIKE 'x%'")]
    con.close()
    res = ingest_file(path, Lake(tmp_path / "lake2"))
    assert (res.status, res.error) == ("failed", f"{path}: StringIds.id holds {bad!r}, not an integer (Nsight writes "
                                                 "integer ids; was the export rewritten by another tool?)")
    path = build_tiny_export(tmp_path / "text_kernel.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 'gemm'")
    con.commit()
    con.close()
    res = ingest_file(path, Lake(tmp_path / "lake3"))
    assert res.status == "failed" and res.error.startswith(
        f"{path}: CUPTI_ACTIVITY_KIND_KERNEL.shortName holds 'gemm', not an integer"), res.error
