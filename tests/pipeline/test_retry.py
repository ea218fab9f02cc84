"""`taxbreak retry`: a failed trace is re-read only on request, from the source its catalogue row recorded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest

import taxbreak.ingest as ingest_mod
from taxbreak.cli import main
from taxbreak.ingest import Lake, ingest_file

from .conftest import NSIGHT_EVENTS, NSIGHT_KERNELS, write_nsight


def _out_of_memory(*args: object, **kwargs: object) -> None:
    raise MemoryError


def test_retry_failed_trace(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    src = write_nsight(env["inbox"] / "n.sqlite")
    trace_id = hashlib.sha256(src.read_bytes()).hexdigest()
    lake = Lake(env["lake"])

    with monkeypatch.context() as m:  # a transient failure: the host ran out of memory
        m.setattr(ingest_mod, "_open_adapter", _out_of_memory)
        assert ingest_file(src, lake).status == "failed"
    row = lake.catalogue_row(trace_id)
    assert row["status"] == "failed" and "ran out of memory" in row["error"]
    # unchanged content is not retried by itself
    assert ingest_file(src, lake).status == "failed"

    assert main(["retry", "--all-failed", "--lake", "/nonexistent-lake"]) == 2
    assert "the catalogue at /nonexistent-lake is empty: nothing was ingested there" in capsys.readouterr().err
    assert main(["retry", trace_id[:12]]) == 0
    printed = capsys.readouterr().out
    assert f"[ingested] {trace_id[:16]}  n.sqlite  ({NSIGHT_EVENTS} events)" in printed
    assert "1 of 1 failed trace(s) now ingested" in printed
    row = lake.catalogue_row(trace_id)
    assert row["status"] == "ingested" and row["event_count"] == NSIGHT_EVENTS and row["source_path"] == str(src)
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kernel_taxbreak WHERE trace_id = $t",
                           {"t": trace_id}).fetchall() == [(NSIGHT_KERNELS,)]
    capsys.readouterr()
    # nothing failed any more: nothing to do, no error (it exited 2, as for a bad option, until issue 29)
    assert main(["retry", "--all-failed"]) == 0
    assert f"no failed trace among the 1 in the catalogue at {env['lake']}: nothing to retry" in capsys.readouterr().out


def test_retry_reports_a_missing_source(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    bad = env["inbox"] / "broken.json"
    bad.write_bytes(b'{"traceEvents": [')  # a broken trace (a file that is no trace at all is not retried)
    res = ingest_file(bad, Lake(env["lake"]))
    assert res.status == "failed"
    bad.unlink()
    assert main(["retry", res.trace_id[:8]]) == 1
    assert f"{bad}: the source file is gone" in capsys.readouterr().err


def test_retry_from_s3(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A failed trace whose source is an S3 object is downloaded again and re-ingested; the catalogue keeps the
    object's URL (never the temporary file's path), also in a failure's reason; a vanished object is reported."""
    import boto3  # pinned in requirements.lock
    from moto.server import ThreadedMotoServer

    from taxbreak.features.retry import retry_row
    from taxbreak.store.bucket import S3Bucket, ingest_from

    from .conftest import write_kineto

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "TAXBREAK_S3_ENDPOINT_URL": f"http://{host}:{port}"}.items():
            monkeypatch.setenv(k, v)
        s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}")
        s3.create_bucket(Bucket="reports")
        good = write_kineto(tmp_path / "src" / "k.json", 2).read_bytes()
        s3.put_object(Bucket="reports", Key="in/run1/k.json", Body=good)
        s3.put_object(Bucket="reports", Key="in/broken.json", Body=b'{"traceEvents": [')  # a broken trace
        lake, bucket = Lake(env["lake"]), S3Bucket("s3://reports/in")

        broken = ingest_from(bucket, "broken.json", lake, force=False, cache_dir=None)
        assert broken.status == "failed"
        assert broken.error.startswith("s3://reports/in/broken.json: truncated JSON")
        assert lake.catalogue_row(broken.trace_id)["source_path"] == "s3://reports/in/broken.json"

        with monkeypatch.context() as m:  # a transient failure
            m.setattr(ingest_mod, "_open_adapter", _out_of_memory)
            first = ingest_from(bucket, "run1/k.json", lake, force=False, cache_dir=None)
        assert first.status == "failed" and first.trace_id == hashlib.sha256(good).hexdigest()
        out = retry_row(lake.catalogue_row(first.trace_id), lake)
        assert (out.error, out.result.status) == (None, "ingested")
        row = lake.catalogue_row(first.trace_id)
        assert (row["status"], row["event_count"], row["source_path"]) == (
            "ingested", 7, "s3://reports/in/run1/k.json")

        s3.delete_object(Bucket="reports", Key="in/broken.json")
        gone = retry_row(lake.catalogue_row(broken.trace_id), lake)
        # reported, never raised (ingest_from fails that one object only); no catalogue row is touched
        assert gone.result.status == "failed"
        assert gone.error.startswith("s3://reports/in/broken.json: cannot download the object (")
    finally:
        server.stop()
