"""Sidecars enter at ingest: ``<trace>.meta.json`` read with its trace into the catalogue row (local folder and S3,
against moto's S3 server), so the analysis's ``find_meta`` needs only the row; a sidecar arriving later updates the
row without the events being read or written again."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from test_lake_s3 import BUCKET, ROOT, s3, s3_server  # noqa: F401 - moto's server and a client (module fixtures)

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.sidecar import SIDECAR_MAX_BYTES, find_meta
from taxbreak.store.bucket import S3Bucket, apply_sidecar, ingest_from

TRACE = (b'{"schemaVersion": 1, "traceEvents": [\n'
         b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 11, "dur": 1,'
         b' "args": {"correlation": 3}},\n'
         b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 4,'
         b' "args": {"device": 0, "stream": 7, "correlation": 3}}\n]}')
SIDECAR = {"taxbreak_meta_version": 1, "batch_size": 4, "output_tokens": 7,
           "steps": [{"name": "decode#1", "phase": "decode", "tokens": 1}]}


def _meta(row: dict) -> dict:
    return json.loads(row["metadata_json"])


def _inbox(tmp_path: Path, sidecar: dict | bytes | None = SIDECAR, trace: bytes = TRACE) -> Path:
    inbox = tmp_path / "inbox"
    inbox.mkdir(exist_ok=True)
    path = inbox / "t.json"
    path.write_bytes(trace)
    if sidecar is not None:
        side = sidecar if isinstance(sidecar, bytes) else json.dumps(sidecar).encode()
        (inbox / "t.json.meta.json").write_bytes(side)
    return path


def test_the_sidecar_is_read_with_its_trace_and_the_folder_may_move(tmp_path: Path) -> None:
    trace = _inbox(tmp_path)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake)
    assert res.status == "ingested", res.error
    meta = _meta(lake.catalogue_row(res.trace_id))
    assert meta["taxbreak_sidecar"]["output_tokens"] == 7 and meta["taxbreak_sidecar_checked"] is True
    assert meta["taxbreak_sidecar_source"] == f"{trace}.meta.json" and "taxbreak_sidecar_error" not in meta
    shutil.rmtree(trace.parent)  # the inbox is gone: the catalogue row still carries everything
    found, source, note = find_meta(lake.catalogue_row(res.trace_id)["metadata_json"], str(trace))
    assert (found["batch_size"], found["output_tokens"], found["steps"][0]["phase"], source, note) == (
        4, 7, "decode", "sidecar", "")


def test_trace_metadata_named_like_the_sidecar_keys_is_not_taken_for_one(tmp_path: Path) -> None:
    doc = json.loads(TRACE)
    doc["taxbreak_sidecar"] = {"taxbreak_meta_version": 1, "output_tokens": 99}
    doc["taxbreak_sidecar_checked"] = False
    trace = _inbox(tmp_path, sidecar=None, trace=json.dumps(doc).encode())
    lake = Lake(tmp_path / "lake")
    row = ingest_file(trace, lake).row
    assert {k: v for k, v in _meta(row).items() if k.startswith("taxbreak_sidecar")} == {
        "taxbreak_sidecar_checked": True}
    found, source, note = find_meta(row["metadata_json"], str(trace))
    assert (found, source) == (None, None)
    assert note == "no taxbreak metadata in the trace and no sidecar beside it when it was ingested"


def test_a_late_local_sidecar_updates_the_row_without_touching_the_events(tmp_path: Path) -> None:
    trace = _inbox(tmp_path, sidecar=None)
    lake = Lake(tmp_path / "lake")
    first = ingest_file(trace, lake)
    assert _meta(first.row) == {"schemaVersion": 1, "taxbreak_sidecar_checked": True}
    events = lake.events_path(first.trace_id).stat()

    (trace.parent / "t.json.meta.json").write_text(json.dumps(SIDECAR))
    again = ingest_file(trace, lake)  # `taxbreak ingest` of the folder again
    assert (again.status, again.trace_id) == ("unchanged", first.trace_id)
    row = lake.catalogue_row(first.trace_id)
    assert _meta(row)["taxbreak_sidecar"]["output_tokens"] == 7 and row == again.row
    assert (row["event_count"], row["ingested_at_ns"]) == (first.row["event_count"], first.row["ingested_at_ns"])
    after = lake.events_path(first.trace_id).stat()
    assert (after.st_ino, after.st_mtime_ns) == (events.st_ino, events.st_mtime_ns)  # not rewritten

    # the same sidecar again: nothing written
    cat = lake.catalogue_path(first.trace_id)
    stamp = cat.stat().st_mtime_ns
    time.sleep(0.01)
    assert ingest_file(trace, lake).row == row and cat.stat().st_mtime_ns == stamp

    # another copy of the same bytes without a sidecar says nothing about this one
    other = tmp_path / "elsewhere" / "copy.json"
    other.parent.mkdir()
    other.write_bytes(TRACE)
    assert ingest_file(other, lake).status == "unchanged"
    assert _meta(lake.catalogue_row(first.trace_id))["taxbreak_sidecar"]["output_tokens"] == 7

    # an invalid one replaces it, with the reason; removed beside the recorded source: the stored copy goes
    (trace.parent / "t.json.meta.json").write_text('{"taxbreak_meta_version": 1, "batch_size": -1}')
    ingest_file(trace, lake)
    found, source, note = find_meta(lake.catalogue_row(first.trace_id)["metadata_json"], str(trace))
    assert found is None and note == f"{trace}.meta.json: batch_size must be a non-negative integer, got -1"
    (trace.parent / "t.json.meta.json").unlink()
    meta = _meta(ingest_file(trace, lake).row)
    assert {k for k in meta if k.startswith("taxbreak_sidecar")} == {"taxbreak_sidecar_checked"}


def test_a_bad_sidecar_never_fails_or_blocks_its_trace(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    cases = {
        "fifo": (None, "cannot read the sidecar (not a regular file (a FIFO); only regular files are ingested)"),
        "big": (b" " * SIDECAR_MAX_BYTES + b"{}", f"larger than {SIDECAR_MAX_BYTES} bytes; not read"),
        "not_json": (b"{oops", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
                               "(char 1))"),
        "wrong_version": (b'{"taxbreak_meta_version": 2}', "taxbreak_meta_version must be 1, got 2"),
    }
    for i, (case, (data, reason)) in enumerate(cases.items()):
        folder = tmp_path / case
        folder.mkdir()
        trace = folder / "t.json"
        trace.write_bytes(TRACE.replace(b'"ts": 13', f'"ts": {13 + i}'.encode()))  # its own content, its own id
        side = folder / "t.json.meta.json"
        if data is None:
            os.mkfifo(side)
        else:
            side.write_bytes(data)
        t0 = time.monotonic()
        res = ingest_file(trace, lake)
        assert time.monotonic() - t0 < 30  # a FIFO is never opened for reading
        assert res.status == "ingested" and res.row["event_count"] == 2, (case, res.error)
        meta = _meta(res.row)
        assert "taxbreak_sidecar" not in meta and meta["taxbreak_sidecar_error"] == f"{side}: {reason}", case
        assert find_meta(res.row["metadata_json"], str(trace))[2] == f"{side}: {reason}"


def test_rows_from_before_fall_back_to_the_sidecar_beside_them(tmp_path: Path) -> None:
    """A catalogue row written before sidecars entered at ingest (no taxbreak_sidecar_checked) still finds the sidecar
    beside its local source; ingesting the file again records it in the row."""
    trace = _inbox(tmp_path)
    lake = Lake(tmp_path / "lake")
    row = ingest_file(trace, lake).row
    old = {k: v for k, v in _meta(row).items() if not k.startswith("taxbreak_sidecar")}
    lake.write_catalogue_row(dict(row, metadata_json=json.dumps(old)))
    found, source, _ = find_meta(json.dumps(old), str(trace))
    assert (found["output_tokens"], source) == (7, "sidecar")
    assert _meta(ingest_file(trace, lake).row)["taxbreak_sidecar"]["output_tokens"] == 7


# -- S3 ----------------------------------------------------------------------------------------------------------
def test_an_s3_sidecar_enters_with_its_trace_and_later_without_its_events(s3, tmp_path: Path) -> None:  # noqa: ANN001, F811
    s3.put_object(Bucket=BUCKET, Key="inbox/run/t.json", Body=TRACE)
    s3.put_object(Bucket=BUCKET, Key="inbox/run/t.json.meta.json", Body=json.dumps(SIDECAR).encode())
    lake, bucket = Lake(ROOT), S3Bucket(f"s3://{BUCKET}/inbox")
    res = ingest_from(bucket, "run/t.json", lake, force=False, cache_dir=None)
    assert res.status == "ingested", res.error
    row = lake.catalogue_row(res.trace_id)
    assert row["source_path"] == f"s3://{BUCKET}/inbox/run/t.json"
    assert _meta(row)["taxbreak_sidecar_source"] == f"s3://{BUCKET}/inbox/run/t.json.meta.json"
    # the bucket is emptied (moved elsewhere): the analysis still has the sidecar, from the lake
    for key in ("inbox/run/t.json", "inbox/run/t.json.meta.json"):
        s3.delete_object(Bucket=BUCKET, Key=key)
    found, source, _ = find_meta(row["metadata_json"], row["source_path"])
    assert (found["batch_size"], found["output_tokens"], source) == (4, 7, "sidecar")

    # a trace without a sidecar, whose sidecar arrives later
    later = TRACE.replace(b'"ts": 13', b'"ts": 15')
    s3.put_object(Bucket=BUCKET, Key="inbox/late.json", Body=later)
    first = ingest_from(bucket, "late.json", lake, force=False, cache_dir=None)
    assert first.status == "ingested" and "taxbreak_sidecar" not in _meta(first.row)
    events_key = f"team/lake/events/trace_id={first.trace_id}/part-0.parquet"
    etag = s3.head_object(Bucket=BUCKET, Key=events_key)["ETag"]
    s3.put_object(Bucket=BUCKET, Key="inbox/late.json.meta.json",
                  Body=json.dumps({"taxbreak_meta_version": 1, "output_tokens": 3}).encode())
    res = apply_sidecar(bucket, "late.json", lake, cache_dir=None)
    assert (res.status, res.trace_id, res.error) == ("meta_updated", first.trace_id, None)
    assert s3.head_object(Bucket=BUCKET, Key=events_key)["ETag"] == etag  # events not written again
    row = lake.catalogue_row(first.trace_id)
    assert row["ingested_at_ns"] == first.row["ingested_at_ns"]
    found, source, _ = find_meta(row["metadata_json"], row["source_path"])
    assert (found["output_tokens"], source) == (3, "sidecar")
    # removed from the bucket: the stored copy goes with it
    s3.delete_object(Bucket=BUCKET, Key="inbox/late.json.meta.json")
    res = apply_sidecar(bucket, "late.json", lake, cache_dir=None)
    assert res.status == "meta_updated" and find_meta(res.row["metadata_json"], row["source_path"])[0] is None
