"""Nsight exports as they exist in the wild (issue 11 §6) and impossible values (issue 13), on fixtures built by
code in nsys_fixtures.py: undecodable text never fails an ingest and is counted in the catalogue; the version of
an old export is read from EXPORT_META_DATA; rows with impossible times are skipped and counted per reason."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from nsys_fixtures import (
    BAD_SHORT_NAME,
    EXPORT_META_DATA_DDL,
    build_impossible_export,
    build_tiny_export,
    build_wild_export,
    insert,
)

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.nsys_sqlite import MAX_TIMESTAMP_NS, _drop_impossible, _Tally, _utf8, read_nsys_sqlite


def _ingest(src: Path, lake_root: Path) -> tuple[dict, list[dict]]:
    lake = Lake(lake_root)
    res = ingest_file(src, lake)
    assert res.status == "ingested", res.error
    return res.row, lake.read_events(res.trace_id).to_pylist()


def test_blobs_and_bad_utf8_never_fail_the_ingest(tmp_path: Path) -> None:
    src = build_wild_export(tmp_path / "dlprof.sqlite")
    con = sqlite3.connect(src)  # and a payload TEXT column (args_json) with a byte that is not UTF-8
    con.execute("UPDATE NVTX_EVENTS SET jsonText = CAST(X'7b2261223a317dff' AS TEXT) WHERE text = 'mark'")
    con.commit()
    con.close()
    row, events = _ingest(src, tmp_path / "lake")
    meta = json.loads(row["metadata_json"])
    # the blob is one repaired value, the Hostname row beside it keeps its text (not "b'dgx-1'")
    assert row["host_name"] == "dgx-1"
    assert meta["text_repairs"] == {"NVTX_EVENTS.args_json": 1, "NVTX_EVENTS.text": 1, "StringIds.value": 1,
                                    "TARGET_INFO_SYSTEM_ENV.value": 1}
    (note,) = meta["notes"]
    assert note.startswith("4 text value(s) held bytes that are not UTF-8") and "StringIds.value 1" in note
    kernels = sorted((e for e in events if e["kind"] == "kernel"), key=lambda e: e["ts_ns"])
    assert kernels[0]["short_name"] == BAD_SHORT_NAME  # b"ge\xffmm": the one bad byte replaced, the rest kept
    assert [k["short_name"] for k in kernels[1:]] == ["graph_k"] * 3
    # a blob in a TEXT column of args_json is written losslessly as hex; the JSON stays valid
    assert json.loads(kernels[0]["args_json"])["tensorSizeMinusOneElements"] == "0x00FF"
    assert json.loads(kernels[1]["args_json"])["tensorSizeMinusOneElements"] == "[]"
    (step,) = [e for e in events if e["kind"] == "nvtx_range" and e["ts_ns"] == 0]
    assert step["name"] == "step\ufffd" and step["dur_ns"] == 7100
    (mark,) = [e for e in events if e["kind"] == "nvtx_mark"]
    assert json.loads(mark["args_json"])["jsonText"] == '{"a":1}\ufffd'
    assert row["event_count"] == 12  # nothing was lost: the same events as the clean fixture
    # every stored string is valid UTF-8: DuckDB (which validates) reads the whole partition
    part = str(Lake(tmp_path / "lake").events_path(row["trace_id"]))
    got = duckdb.execute("SELECT count(*), count(DISTINCT short_name) FROM read_parquet(?)", [part]).fetchall()
    assert got == [(12, 2)]  # the repaired gemm name and graph_k


def test_old_export_keeps_its_version_in_export_meta_data(tmp_path: Path) -> None:
    row, _ = _ingest(build_wild_export(tmp_path / "old.sqlite"), tmp_path / "lake")
    versions = json.loads(row["tool_versions_json"])
    assert (versions["nsys_export"], versions["export_schema"]) == ("2022.1.1.61-1d07dc0", "2.7.1")
    assert json.loads(row["metadata_json"])["export"] == {
        "EXPORT_PRODUCT_VERSION": "2022.1.1.61-1d07dc0", "EXPORT_SCHEMA_VERSION": "2.7.1"}


def test_both_export_meta_tables_the_newer_wins(tmp_path: Path) -> None:
    src = build_tiny_export(tmp_path / "both.sqlite")  # META_DATA_EXPORT says 2026.2.1.210 / 3.25.0
    con = sqlite3.connect(src)
    con.execute(EXPORT_META_DATA_DDL)
    insert(con, "EXPORT_META_DATA", name="EXPORT_PRODUCT_VERSION", value="2021.5.1.77")
    insert(con, "EXPORT_META_DATA", name="EXTRA_RECORD", value="kept")
    con.commit()
    con.close()
    row, _ = _ingest(src, tmp_path / "lake")
    assert json.loads(row["tool_versions_json"])["nsys_export"] == "2026.2.1.210"
    assert json.loads(row["metadata_json"])["export"]["EXTRA_RECORD"] == "kept"
    assert "text_repairs" not in json.loads(row["metadata_json"])  # a clean export reports no repair


def test_a_file_with_only_export_meta_data_is_an_nsight_export(tmp_path: Path) -> None:
    src = tmp_path / "meta_only.sqlite"
    con = sqlite3.connect(src)
    con.execute(EXPORT_META_DATA_DDL)
    insert(con, "EXPORT_META_DATA", name="EXPORT_SCHEMA_VERSION", value="2.4.0")
    con.commit()
    con.close()
    row, events = _ingest(src, tmp_path / "lake")
    assert events == [] and json.loads(row["tool_versions_json"]) == {"export_schema": "2.4.0"}


def test_impossible_times_are_skipped_and_counted_per_reason(tmp_path: Path) -> None:
    row, events = _ingest(build_impossible_export(tmp_path / "bad.sqlite"), tmp_path / "lake")
    assert json.loads(row["skipped_counts_json"]) == {
        "CUPTI_ACTIVITY_KIND_KERNEL:end_before_start": 1,  # correlation 3: [3000, 2990]
        "CUPTI_ACTIVITY_KIND_KERNEL:end_out_of_range": 1,  # 6: end INT64_MAX
        "CUPTI_ACTIVITY_KIND_KERNEL:start_null": 1,  # 4
        "CUPTI_ACTIVITY_KIND_KERNEL:start_out_of_range": 2,  # 5: start INT64_MAX; 7: start -5
        "CUPTI_ACTIVITY_KIND_RUNTIME:end_null": 1,  # 8
        "NVTX_EVENTS:end_before_start": 1,  # the backwards range
    }
    assert (row["event_count"], row["source_event_count"]) == (5, 12)  # 3 runtime + 7 kernels + 2 NVTX rows
    got = sorted((e["kind"], e["correlation_id"], e["ts_ns"], e["dur_ns"]) for e in events)
    # origin 900 = the NVTX mark, the earliest start among the rows kept (not -5 nor the NULL)
    assert got == [("kernel", 1, 600, 100), ("kernel", 2, 1600, 200), ("nvtx_mark", None, 0, None),
                   ("runtime_api", 1, 100, 100), ("runtime_api", 2, 1100, 100)]
    assert row["duration_ns"] == 1800  # 900 -> 2700, not stretched to INT64_MAX


def test_arrow_rule_and_sql_rule_agree_row_by_row(tmp_path: Path) -> None:
    """_drop_impossible (Arrow, per batch) keeps exactly the rows _valid_sql (SQLite, the origin query) accepts."""
    from taxbreak.ingest.nsys_sqlite import _valid_sql

    starts = [None, -1, 0, 5, 5, 5, MAX_TIMESTAMP_NS, MAX_TIMESTAMP_NS + 1, 7, 7, 3]
    ends = [1, 3, 0, 4, None, MAX_TIMESTAMP_NS + 1, MAX_TIMESTAMP_NS, MAX_TIMESTAMP_NS + 2, 7, -7, 9]
    con = sqlite3.connect(":memory:")
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"):
        con.execute(f'CREATE TABLE "{table}" (i INTEGER, start INTEGER, "end" INTEGER)')
        rows = list(zip(range(len(starts)), starts, ends, strict=True))
        con.executemany(f'INSERT INTO "{table}" VALUES (?, ?, ?)', rows)
        sql_kept = [r[0] for r in con.execute(f'SELECT i FROM "{table}" WHERE {_valid_sql(table)} ORDER BY i')]
        batch = pa.record_batch({"i": pa.array(range(len(starts))), "start": pa.array(starts, pa.int64()),
                                 "end": pa.array(ends, pa.int64())})
        tally = _Tally()
        arrow_kept = _drop_impossible(table, batch, tally).column("i").to_pylist()
        assert arrow_kept == sql_kept
        assert sum(tally.counts.values()) == len(starts) - len(arrow_kept)
    # by hand: rows 2 ([0, 0]), 6 ([MAX, MAX]), 8 ([7, 7]), 10 ([3, 9]) everywhere; row 4 (no end) for NVTX only
    assert arrow_kept == [2, 4, 6, 8, 10]


def test_utf8_repair_counts_values_not_bytes() -> None:
    arr = pa.array([b"ok", b"\xff\xfe", None, b"a\xc3", "é".encode()], pa.binary())
    fixed, bad = _utf8(arr)
    assert (fixed.to_pylist(), bad) == (["ok", "\ufffd\ufffd", None, "a\ufffd", "é"], 2)
    clean = pa.array(["x", None])
    assert _utf8(clean) == (clean, 0)


@pytest.mark.parametrize("converted", [False, True])
def test_messages_name_the_file_the_user_gave(tmp_path: Path, converted: bool) -> None:
    src = tmp_path / "cache" / "0123abcd.sqlite"
    src.parent.mkdir()
    src.write_text("not a database")
    name = str(tmp_path / "run-7.nsys-rep") if converted else None
    from taxbreak.ingest.base import IngestError

    with pytest.raises(IngestError) as exc:
        read_nsys_sqlite(src, "t", source_name=name)
    assert str(exc.value).startswith(f"{name or src}: not a SQLite database")
    assert ("0123abcd" in str(exc.value)) is not converted
