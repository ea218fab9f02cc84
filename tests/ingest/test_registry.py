"""The adapter registry (``taxbreak.ingest.ADAPTERS``): detection by bytes then name with the messages of before, and
a new trace format added as one adapter plus one registry line (here a tiny text format defined in this file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

import taxbreak.ingest as ingest
from taxbreak.ingest import (
    Adapter,
    AdapterOutput,
    IngestError,
    Lake,
    NotATraceError,
    OpenContext,
    TraceInfo,
    adapter_for,
    detect_format,
    ingest_file,
    iter_trace_files,
)
from taxbreak.ingest.base import event_batch, starts_with
from taxbreak.schemas import EVENT_SCHEMA
from taxbreak.store.bucket import is_bucket_trace_name, local_copy_name

KINETO = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}]}'


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_detection_by_bytes_then_by_name(tmp_path: Path) -> None:
    cases = {
        "a.json": (KINETO, "kineto"),
        "b.json.gz": (gzip.compress(KINETO), "kineto"),
        "c.trace": (b"\xef\xbb\xbf \n[" + KINETO[1:], "kineto"),  # BOM and blanks, then an array: any name
        "d.db": (b"SQLite format 3\x00" + b"\x00" * 80, "nsys-sqlite"),
        "e.bin": (b"NVIDIA Tegra Profiler Report 2025@1@1", "nsys-rep"),
        "f.qdrep": (b"\x00\x01 no header nsys could still read", "nsys-rep"),  # the name alone picks nsys-rep
        # a signature is tried before any sniff: 'Nsight' near the start of JSON text is taken for a report, as before
        "g.json": (b'{"Nsight": 1, "traceEvents": []}', "nsys-rep"),
    }
    for name, (data, fmt) in cases.items():
        assert detect_format(_file(tmp_path, name, data)) == fmt, name
    assert adapter_for(tmp_path / "d.db").label == "Nsight SQLite"


@pytest.mark.parametrize("name, data, message", [
    ("empty.json", b"", "the file is empty"),
    ("x.sqlite", b"not a database", "named like a SQLite export but is not a SQLite database"),
    ("x.json", b"plain text", "not JSON (the file does not start with '{' or '[')"),
    ("x.txt", b"plain text", "unrecognised format (expected Kineto JSON, Nsight SQLite or .nsys-rep)"),
])
def test_not_a_trace_messages_name_the_file(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    path = _file(tmp_path, name, data)
    with pytest.raises(NotATraceError) as exc:
        detect_format(path)
    assert str(exc.value) == f"{path}: {message}"


def test_suffixes_come_from_the_registry() -> None:
    assert ingest.trace_suffixes() == (".json", ".json.gz", ".sqlite", ".db", ".nsys-rep", ".qdrep")
    assert ingest.TRACE_SUFFIXES == ingest.trace_suffixes()
    assert [a.name for a in ingest.ADAPTERS] == ["kineto", "nsys-sqlite", "nsys-rep"]


def test_event_batch_is_the_common_schema() -> None:
    batch = event_batch(
        {"kind": pa.array(["kernel", "runtime_api"]), "ts_ns": pa.array([5, 7], pa.int32()),
         "device_id": pa.array([0, None], pa.int64()), "not_a_field": pa.array([1, 2])},
        2, trace_id="t" * 64, source_format="demo",
    )
    assert batch.schema == EVENT_SCHEMA and batch.schema.metadata == EVENT_SCHEMA.metadata  # the version stamp
    rows = batch.to_pylist()
    assert [(r["trace_id"], r["source_format"], r["kind"], r["ts_ns"], r["device_id"]) for r in rows] == [
        ("t" * 64, "demo", "kernel", 5, 0), ("t" * 64, "demo", "runtime_api", 7, None)]
    assert batch.column("ts_ns").type == pa.int64() and batch.column("name").null_count == 2


# -- a new format: this module is its adapter, the Adapter(...) below its registry line ----------------------------
MAGIC = b"KTRACE1\n"


def open_trace(path: Path, trace_id: str, ctx: OpenContext) -> AdapterOutput:
    """'KTRACE1' then one kernel per line: ``name start_us dur_us`` (times in µs since the trace start)."""
    lines = path.read_bytes().split(b"\n")
    if lines[0] + b"\n" != MAGIC:
        raise IngestError(f"{path}: no KTRACE1 header")
    rows = [line.decode().split() for line in lines[1:] if line.strip()]
    info = TraceInfo(source_format="ignored: ingest_file sets the registry's name", metadata={"lines": len(rows)})

    def batches():  # noqa: ANN202
        yield event_batch({"kind": pa.array(["kernel"] * len(rows)), "name": pa.array([r[0] for r in rows]),
                           "ts_ns": pa.array([int(r[1]) * 1000 for r in rows]),
                           "dur_ns": pa.array([int(r[2]) * 1000 for r in rows])},
                          len(rows), trace_id=trace_id, source_format="ktrace")

    return AdapterOutput(info, batches())


KTRACE = Adapter("ktrace", "KTRACE text", (".ktrace",), open_trace, signature=starts_with(MAGIC))


def test_a_new_format_is_one_adapter_and_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "ADAPTERS", (*ingest.ADAPTERS, KTRACE))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = _file(inbox, "run.ktrace", MAGIC + b"gemm 10 4\nsoftmax 20 1\n")
    _file(inbox, "notes.txt", b"not listed")
    assert [p.name for p in iter_trace_files([inbox])] == ["run.ktrace"]  # folders list the new suffix
    assert is_bucket_trace_name("in/run.KTRACE") and local_copy_name("d/" + "n" * 300 + ".ktrace") == "object.ktrace"

    lake = Lake(tmp_path / "lake")
    res = ingest_file(good, lake)
    assert res.status == "ingested", res.error
    assert (res.row["source_format"], res.row["event_count"], res.row["duration_ns"]) == ("ktrace", 2, 11_000)
    assert json.loads(res.row["metadata_json"])["lines"] == 2
    events = lake.read_events(res.trace_id).to_pylist()
    assert [(e["name"], e["ts_ns"], e["dur_ns"], e["source_format"]) for e in events] == [
        ("gemm", 10_000, 4_000, "ktrace"), ("softmax", 20_000, 1_000, "ktrace")]

    # named like the format, bytes that are not: the opener's error, recorded under the format's name
    bad = _file(inbox, "bad.ktrace", b"KTRACE0\n")
    res = ingest_file(bad, lake)
    assert (res.status, res.error) == ("failed", f"{bad}: no KTRACE1 header")
    assert lake.catalogue_row(res.trace_id)["source_format"] == "ktrace"


def test_without_its_line_the_format_is_not_a_trace(tmp_path: Path) -> None:
    path = _file(tmp_path, "run.ktrace", MAGIC + b"gemm 10 4\n")
    res = ingest_file(path, Lake(tmp_path / "lake"))
    assert res.status == "not_a_trace" and res.error == (
        f"{path}: unrecognised format (expected Kineto JSON, Nsight SQLite or .nsys-rep)")
    assert iter_trace_files([tmp_path]) == []
