"""The one object store of the lake and the marts (taxbreak.ingest.objects): the same behaviour on a local folder
and on S3 (moto's server), relative names, whole puts, listings of files only, deletes of files and prefixes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from s3_helpers import S3_ENV, moto_s3

from taxbreak.ingest.objects import LocalStore, S3Settings, S3Store, open_store

BUCKET = "store-test"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_s3(BUCKET) as url:
        yield url


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LocalStore | S3Store:
    if request.param == "local":
        return open_store(tmp_path / "root")
    url = f"s3://{BUCKET}/{tmp_path.name}"
    return open_store(url, S3Settings(endpoint_url=request.getfixturevalue("endpoint"),
                                      access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                                      secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                                      region=S3_ENV["AWS_DEFAULT_REGION"]))


def test_put_read_list_delete(store: LocalStore | S3Store, tmp_path: Path) -> None:
    assert store.read_bytes("a/x.bin") is None and not store.is_file("a/x.bin") and not store.exists("a")
    store.put_bytes("a/x.bin", b"\x00\x01")
    store.put_text("a/b.json", '{"k": 1}')
    staged = tmp_path / "staged.parquet"
    duckdb.sql("COPY (SELECT 42 AS v) TO '" + str(staged) + "' (FORMAT parquet)")
    store.put_file(staged, "a/sub/part.parquet")
    assert store.read_bytes("a/x.bin") == b"\x00\x01"
    assert store.read_text("a/b.json") == '{"k": 1}'
    assert store.names("a") == ["b.json", "x.bin"]  # files only: the sub-folder is not listed
    assert store.names("nowhere") == []
    assert store.is_file("a/sub/part.parquet") and not store.is_file("a/sub") and store.exists("a/sub")
    con = duckdb.connect()
    store.register_filesystem(con)
    assert con.execute(f"SELECT v FROM read_parquet('{store.path('a/sub/part.parquet')}')").fetchone() == (42,)
    store.put_bytes("a/x.bin", b"new")  # replaced whole
    assert store.read_bytes("a/x.bin") == b"new"
    store.delete(["a/sub", "a/x.bin", "a/missing"])  # a prefix, a file, nothing: no error
    assert store.names("a") == ["b.json"] and not store.exists("a/sub")


def test_open_store_by_location(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path), LocalStore)
    s3 = open_store("s3:/bucket/prefix/")  # the spelling Path('s3://...') gives
    assert isinstance(s3, S3Store) and s3.url == "s3://bucket/prefix" and s3.path("x/y") == "s3://bucket/prefix/x/y"


def test_a_failed_local_put_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    store.put_bytes("f.txt", b"old")

    def refuse(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("taxbreak.ingest.objects.os.replace", refuse)
    with pytest.raises(OSError, match="No space"):
        store.put_bytes("f.txt", b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"] and store.read_bytes("f.txt") == b"old"
