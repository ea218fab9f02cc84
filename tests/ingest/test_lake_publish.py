"""Publishing a trace (issue 13): races with identical content, a failure never overwriting a stored trace, the
recovery of what dead writers left, impossible values and secrets stopped at the one place every adapter's rows
pass, errors that name the source and never a temporary file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taxbreak.config import ingest_limits
from taxbreak.ingest import Lake, TraceInfo, ingest_file
from taxbreak.ingest.base import make_owned_dir, owned_name
from taxbreak.ingest.lake import STAGING_DIR, STAGING_PREFIX, TMP_PREFIX
from taxbreak.schemas import EVENT_SCHEMA

TID = "b" * 64
GOOD = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 5},'
        b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12, "dur": 2, '
        b'"args": {"device": 0, "stream": 7}}]}')


def _batch(rows: list[dict]) -> pa.RecordBatch:
    cols = {f.name: [r.get(f.name) for r in rows] for f in EVENT_SCHEMA}
    cols["trace_id"] = [TID] * len(rows)
    cols["source_format"] = ["test"] * len(rows)
    return pa.RecordBatch.from_pydict(cols, schema=EVENT_SCHEMA)


def _write(lake: Lake, rows: list[dict], **kw: object) -> tuple[dict, bool]:
    return lake.publish_events(TID, iter([_batch(rows)]), TraceInfo(source_format="test"), file_name="t.json",
                               source_path="/x/t.json", file_bytes=1, **kw)


def test_losing_a_publish_race_to_identical_content_is_success(lake: Lake) -> None:
    first, won = _write(lake, [{"kind": "kernel", "ts_ns": 0, "dur_ns": 5}])
    assert won and first["status"] == "ingested"
    second, won = _write(lake, [{"kind": "kernel", "ts_ns": 0, "dur_ns": 5}])  # another process, same bytes
    assert not won and second == first  # the stored row, untouched
    third, won = _write(lake, [{"kind": "kernel", "ts_ns": 0, "dur_ns": 5}], replace=True)  # forced: swapped
    assert won and third["ingested_at_ns"] > first["ingested_at_ns"]
    assert os.listdir(lake.events_dir(TID)) == ["part-0.parquet"]


def test_a_failure_never_overwrites_a_stored_trace(lake: Lake) -> None:
    stored, _ = _write(lake, [{"kind": "kernel", "ts_ns": 0, "dur_ns": 5}])
    row = lake.record_failure(TID, file_name="t.json", source_path="/x/t.json", file_bytes=1,
                              error="/x/t.json: [Errno 39] Directory not empty", source_format="test")
    assert row == stored and lake.catalogue_row(TID)["status"] == "ingested"


def test_four_processes_ingesting_one_file_all_succeed(tmp_path: Path) -> None:
    """The issue's reproduction: 4 x ingest of one file at once; every process succeeds, one row 'ingested'."""
    path = tmp_path / "t.json"
    path.write_bytes(GOOD)
    code = ("import sys; from taxbreak.ingest import Lake, ingest_file; "
            "r = ingest_file(sys.argv[1], Lake(sys.argv[2])); print('@@', r.status, r.error)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(tmp_path / "lake")],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    statuses = sorted(next(ln for ln in o.splitlines() if ln.startswith("@@")).split()[1] for o in outs)
    assert set(statuses) <= {"ingested", "unchanged"} and "ingested" in statuses, outs
    (row,) = Lake(tmp_path / "lake").catalogue().to_pylist()
    assert (row["status"], row["event_count"]) == ("ingested", 2)


def test_rows_no_trace_can_hold_are_dropped_and_counted_at_the_lake(lake: Lake) -> None:
    """Whatever an adapter lets through: a timed row without ts, a negative duration, an end past int64."""
    big = (1 << 63) - 10
    row, _ = _write(lake, [
        {"kind": "kernel", "ts_ns": 0, "dur_ns": 5},
        {"kind": "kernel", "ts_ns": None, "dur_ns": 5},
        {"kind": "metadata", "ts_ns": None, "dur_ns": None},  # metadata may lack a time
        {"kind": "kernel", "ts_ns": 3, "dur_ns": -2},
        {"kind": "kernel", "ts_ns": big, "dur_ns": 100},
        {"kind": "kernel", "ts_ns": 7, "dur_ns": None},
    ])
    assert row["event_count"] == 3
    assert json.loads(row["skipped_counts_json"]) == {"end_out_of_range": 1, "missing_ts": 1, "negative_dur": 1}
    assert row["source_event_count"] == 6
    assert row["duration_ns"] == 7  # from 0 to 7: the dropped rows do not stretch it
    stored = pq.read_table(lake.events_path(TID)).to_pydict()
    assert stored["ts_ns"] == [0, None, 7] and stored["dur_ns"] == [5, None, None]


def test_secrets_in_event_args_and_metadata_are_redacted_at_the_lake(lake: Lake) -> None:
    args = {"cmd": "aws s3 cp --aws-secret-access-key wJalrXUtnFEMIK7MDENG s3://x", "n": 3,
            "url": "postgres://admin:hunter2pw@db:5432/x", "api_token": "abc123"}
    info = TraceInfo(source_format="test", metadata={"argv": "run.py --password=pw1234 --bs 4",
                                                     "env": {"DB": "mysql://root:rootpw@h/d"}})
    row, _ = lake.publish_events(TID, iter([_batch([{"kind": "kernel", "ts_ns": 0, "dur_ns": 1,
                                                     "args_json": json.dumps(args)},
                                                    {"kind": "kernel", "ts_ns": 1, "dur_ns": 1,
                                                     "args_json": '{"grid": [1, 1, 1]}'}])]),
                                 info, file_name="t.json", source_path="/x", file_bytes=1)
    stored = pq.read_table(lake.events_path(TID)).column("args_json").to_pylist()
    assert json.loads(stored[0]) == {
        "cmd": "aws s3 cp --aws-secret-access-key <redacted> s3://x", "n": 3,
        "url": "postgres://admin:<redacted>@db:5432/x", "api_token": "<redacted>"}
    assert stored[1] == '{"grid": [1, 1, 1]}'  # nothing secret-looking: the text is kept as it was
    assert json.loads(row["metadata_json"]) == {"argv": "run.py --password=<redacted> --bs 4",
                                                "env": {"DB": "mysql://root:<redacted>@h/d"}}


def test_recover_completes_a_publish_killed_between_events_and_catalogue(lake: Lake) -> None:
    row, _ = _write(lake, [{"kind": "kernel", "ts_ns": 0, "dur_ns": 5}])
    lake.catalogue_path(TID).unlink()  # as if killed after the events rename
    assert lake.is_stored(TID) is None  # invisible: the catalogue row is the commit point
    assert lake.recover()["completed_publishes"] == 1
    assert lake.is_stored(TID) == row


def test_recover_removes_what_dead_writers_left(lake: Lake, tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    live_staging = make_owned_dir(STAGING_PREFIX, lake.root / STAGING_DIR)  # this process: alive
    dead_staging = lake.root / STAGING_DIR / owned_name(STAGING_PREFIX).replace(f"-{os.getpid()}-",
                                                                                 f"-{dead_pid}-")
    dead_staging.mkdir()
    (dead_staging / "part-0.parquet").write_bytes(b"x" * 100)
    other_host = lake.root / STAGING_DIR / f"{STAGING_PREFIX}elsewhere-{dead_pid}-abc"  # another host's
    other_host.mkdir()
    (lake.root / "catalogue").mkdir(parents=True)
    dead_tmp = lake.root / "catalogue" / (owned_name(TMP_PREFIX).replace(f"-{os.getpid()}-", f"-{dead_pid}-")
                                          + "-x.parquet")
    dead_tmp.write_bytes(b"half")
    orphan = lake.events_dir("c" * 64)
    orphan.mkdir(parents=True)
    (orphan / "part-0.parquet").write_bytes(b"not parquet")  # no footer row: cannot be completed
    assert lake.recover() == {"staging": 1, "catalogue_tmp": 1, "orphan_partitions": 1, "completed_publishes": 0}
    assert live_staging.exists() and other_host.exists()
    assert not dead_staging.exists() and not dead_tmp.exists() and not orphan.exists()


def test_an_orphan_partition_whose_writer_holds_the_lock_is_left_alone(lake: Lake) -> None:
    orphan = lake.events_dir(TID)
    orphan.mkdir(parents=True)
    (orphan / "part-0.parquet").write_bytes(b"being published")
    code = ("import sys, time; from taxbreak.ingest import Lake\n"
            "with Lake(sys.argv[1]).trace_lock(sys.argv[2]):\n    print('held', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(lake.root), TID], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lake.recover()["orphan_partitions"] == 0 and orphan.exists()
    finally:
        holder.kill()
        holder.wait()
    assert lake.recover()["orphan_partitions"] == 1


def test_errors_name_the_source_never_a_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(GOOD)
    monkeypatch.setenv("TAXBREAK_MAX_TEMP_BYTES", "10")
    res = ingest_file(path, Lake(tmp_path / "lake"), source_path="s3://bucket/inbox/t.json", file_name="t.json",
                      limits=ingest_limits())
    assert res.status == "failed"
    assert res.error.startswith("s3://bucket/inbox/t.json: more than 10 bytes of JSON")
    assert str(tmp_path) not in res.error and "taxbreak-ingest-" not in res.error
    row = Lake(tmp_path / "lake").catalogue_row(res.trace_id)
    assert (row["source_path"], row["file_name"], row["error"]) == ("s3://bucket/inbox/t.json", "t.json", res.error)


def test_not_a_trace_is_recorded_as_such_and_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"learning_rate": 0.1}')
    lake = Lake(tmp_path / "lake")
    res = ingest_file(path, lake)
    assert (res.status, lake.catalogue_row(res.trace_id)["status"]) == ("not_a_trace", "not_a_trace")
    assert "JSON without traceEvents" in res.error
    again = ingest_file(path, lake)
    assert again.status == "not_a_trace" and again.row["ingested_at_ns"] == res.row["ingested_at_ns"]
