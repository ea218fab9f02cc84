"""The file's hash and the adapter's opening (``ingest_file``): with ``force`` a plain-JSON Kineto trace is opened
(its events array copied) while the file is hashed on a thread; without it the hash comes first, so content already
in the lake is skipped without opening anything.  A file changed meanwhile is still never stored."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import taxbreak.ingest as ingest
import taxbreak.ingest.kineto as kineto
from taxbreak.ingest import Lake, ingest_file

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11.0, "dur": 2.0,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 14.0, "dur": 3.0,
     "args": {"correlation": 7, "device": 0, "stream": 7}},
]


def _leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(ingest.WORK_PREFIX))


@pytest.fixture
def trace(write_kineto) -> Path:  # noqa: ANN001
    return write_kineto("t.json", EVENTS)


def test_force_copies_the_array_while_the_file_is_hashed(trace: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    copying = threading.Event()
    real_hash, real_copy = ingest._sha256_of, kineto._copy_events_array

    def hash_after_the_copy_started(fh):  # noqa: ANN001, ANN202
        assert copying.wait(10), "the array was not copied while the file was hashed"
        return real_hash(fh)

    def copy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        copying.set()
        return real_copy(*a, **k)

    monkeypatch.setattr(ingest, "_sha256_of", hash_after_the_copy_started)
    monkeypatch.setattr(kineto, "_copy_events_array", copy)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake, force=True, tmp_dir=tmp_path)
    assert res.status == "ingested", res.error
    assert res.trace_id == hashlib.sha256(trace.read_bytes()).hexdigest()
    table = pq.read_table(lake.events_path(res.trace_id))
    assert table.num_rows == 3
    assert set(table.column("trace_id").to_pylist()) == {res.trace_id}
    assert sorted(table.column("ts_ns").to_pylist()) == [0, 1_000, 4_000]  # from the origin at 10 us
    assert _leftovers(tmp_path) == []


def test_without_force_stored_content_is_skipped_before_any_opening(trace: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    lake = Lake(tmp_path / "lake")
    first = ingest_file(trace, lake, tmp_dir=tmp_path)
    assert first.status == "ingested"

    def no_copy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the adapter was opened for content already in the lake")

    monkeypatch.setattr(kineto, "_copy_events_array", no_copy)
    again = ingest_file(trace, lake, tmp_dir=tmp_path)
    assert (again.status, again.trace_id) == ("unchanged", first.trace_id)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("force", [False, True])
def test_a_file_changed_while_hashed_is_read_again(trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   force: bool) -> None:
    """The first hash sees the file change under it: the attempt is dropped (its early copy too) and the file
    read again; stored under the hash of the bytes now there, never the first content's."""
    old = trace.read_bytes()
    new = old.replace(b'"gemm"', b'"gemv"')
    real_hash = ingest._sha256_of
    calls = []

    def hash_then_change(fh):  # noqa: ANN001, ANN202
        digest = real_hash(fh)
        calls.append(digest)
        if len(calls) == 1:
            trace.write_bytes(new)
            st = os.stat(trace)
            os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return digest

    monkeypatch.setattr(ingest, "_sha256_of", hash_then_change)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake, force=force, tmp_dir=tmp_path)
    assert res.status == "ingested", res.error
    assert calls[0] == hashlib.sha256(old).hexdigest()
    assert res.trace_id == hashlib.sha256(new).hexdigest() == calls[1]
    assert lake.catalogue_row(calls[0]) is None and not lake.has_events(calls[0])
    names = pq.read_table(lake.events_path(res.trace_id)).column("name").to_pylist()
    assert "gemv" in names and "gemm" not in names
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("force", [False, True])
def test_a_file_changed_on_every_attempt_is_rejected(trace: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, force: bool) -> None:
    """Changed while its array is copied (with ``force``, during the hash), on both attempts: failed, nothing
    stored under any hash, no temporary folder left."""
    real_copy = kineto._copy_events_array
    n = [0]

    def copy_then_touch(path, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = real_copy(path, *a, **k)
        n[0] += 1
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + n[0] * 1_000_000_000))
        return out

    monkeypatch.setattr(kineto, "_copy_events_array", copy_then_touch)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake, force=force, tmp_dir=tmp_path)
    assert res.status == "failed" and res.row is None
    assert res.error is not None and "changed while it was" in res.error and str(trace) in res.error
    assert n[0] == 2
    assert lake.catalogue_paths() == []
    assert not (tmp_path / "lake" / "events").exists() or list((tmp_path / "lake" / "events").iterdir()) == []
    assert _leftovers(tmp_path) == []


def test_force_an_error_of_the_early_opening_is_recorded_as_before(trace: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise ingest.IngestError(f"{path}: broken on purpose")

    monkeypatch.setattr(kineto, "_copy_events_array", broken)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake, force=True, tmp_dir=tmp_path)
    assert (res.status, res.error) == ("failed", f"{trace}: broken on purpose")
    row = lake.catalogue_row(hashlib.sha256(trace.read_bytes()).hexdigest())
    assert row is not None and (row["status"], row["source_format"]) == ("failed", "kineto")
    assert _leftovers(tmp_path) == []


def test_force_a_hash_that_fails_drops_the_early_opening(trace: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(fh):  # noqa: ANN001, ANN202
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ingest, "_sha256_of", unreadable)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(trace, lake, force=True, tmp_dir=tmp_path)
    assert (res.status, res.error) == ("failed", f"{trace}: cannot read the file (Input/output error)")
    assert lake.catalogue_paths() == []
    assert _leftovers(tmp_path) == []
