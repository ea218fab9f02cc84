"""`taxbreak retry`: a failed trace is re-read only on request, from the source its catalogue row recorded."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import pytest

import taxbreak.ingest as ingest_mod
from taxbreak.cli import main
from taxbreak.ingest import Lake, ingest_file

from .conftest import PUBLIC

MOCK = PUBLIC / "nsys-ai" / "mock.sqlite"


def test_retry_failed_trace(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    if not MOCK.exists():
        pytest.skip(f"public traces not present at {MOCK}")
    src = env["inbox"] / "mock.sqlite"
    shutil.copyfile(MOCK, src)
    trace_id = hashlib.sha256(src.read_bytes()).hexdigest()
    lake = Lake(env["lake"])

    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    with monkeypatch.context() as m:  # a transient failure: the host ran out of memory
        m.setattr(ingest_mod, "_open_adapter", out_of_memory)
        assert ingest_file(src, lake).status == "failed"
    row = lake.catalogue_row(trace_id)
    assert row["status"] == "failed" and "ran out of memory" in row["error"]
    # unchanged content is not retried by itself
    assert ingest_file(src, lake).status == "failed"

    assert main(["retry", "--all-failed", "--lake", "/nonexistent-lake"]) == 2
    assert main(["retry", trace_id[:12]]) == 0
    printed = capsys.readouterr().out
    assert f"[ingested] {trace_id[:16]}  mock.sqlite  (13 events)" in printed
    assert "1 of 1 failed trace(s) now ingested" in printed
    row = lake.catalogue_row(trace_id)
    assert row["status"] == "ingested" and row["event_count"] == 13 and row["source_path"] == str(src)
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kernel_taxbreak WHERE trace_id = $t",
                           {"t": trace_id}).fetchall() == [(2,)]
    assert main(["retry", "--all-failed"]) == 2  # nothing failed any more


def test_retry_reports_a_missing_source(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    bad = env["inbox"] / "broken.json"
    bad.write_bytes(b"not json at all")
    res = ingest_file(bad, Lake(env["lake"]))
    assert res.status == "failed"
    bad.unlink()
    assert main(["retry", res.trace_id[:8]]) == 1
    assert f"{bad}: the source file is gone" in capsys.readouterr().err
