"""Issue 12: the per-trace marts on S3 (``paths.marts = "s3://bucket/prefix"``), against moto's S3 server on
127.0.0.1 (real HTTP, as the lake's S3 tests), no mock objects.

Two traces analysed with the marts on S3, read through the snapshot and ``taxbreak sql``; one re-analysed: the
other's objects untouched, the replaced objects kept for the grace period and then collected; a write whose upload
fails leaves the manifest, the objects and the readers' results as they were; a writer killed after its uploads
leaves the manifest and the results as they were, and the next writer deletes its uploads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import duckdb
import pytest
from cli_support import FUSION_ID, MIXED_ID, Run, add_fusion
from s3_helpers import empty, moto_s3, point_at

from taxbreak.store import marts
from taxbreak.store.faults import FAULT_ENV
from taxbreak.store.query import open_readonly
from taxbreak.store.warehouse import snapshot_path, writer

BUCKET = "marts"
PREFIX = "team/marts"
URL = f"s3://{BUCKET}/{PREFIX}"
# the kernels of the scenario traces (tests/sql/scenarios.py): mixed 9 (one of them on device 1), fusion 10
# (A B C A B C A B C D, 100 ns each)
KERNELS = {MIXED_ID: 9, FUSION_ID: 10}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    with moto_s3(BUCKET) as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables pointing this process and the ``taxbreak`` processes at the server and the marts at
    ``URL`` (the bucket emptied)."""
    env = point_at(monkeypatch, s3_server, TAXBREAK_MARTS=URL)
    empty(s3_server, BUCKET)
    return env


def _objects(endpoint: str) -> dict[str, str]:
    """key (below the prefix) -> ETag of every object of the marts."""
    client = boto3.client("s3", endpoint_url=endpoint)
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        out |= {o["Key"][len(PREFIX) + 1:]: o["ETag"] for o in page.get("Contents", [])}
    return out


def _manifest(endpoint: str) -> bytes:
    return boto3.client("s3", endpoint_url=endpoint).get_object(Bucket=BUCKET, Key=f"{PREFIX}/_manifest.json")[
        "Body"].read()


def _data_objects(endpoint: str) -> set[str]:
    """The objects holding rows of the per-trace tables (loose partitions and segments)."""
    return {k for k in _objects(endpoint) if "/trace_id=" in k or "/seg-" in k}


def _named(endpoint: str) -> set[str]:
    """The objects the manifest names: read (loose partitions, segments) or kept for the grace period."""
    m = json.loads(_manifest(endpoint))
    return ({f"{rel}/{name}" for rel, name in m.get("parts", {}).items()}
            | {f"{t}/{f}" for seg in m["segments"].values() for t, f in seg["files"].items()}
            | {rel for rel, _ in m["replaced"]})


def _snapshot_rows(db: Path, sql: str) -> list[tuple]:
    """``sql`` over the readers' snapshot, the marts' filesystem registered as every reader does."""
    con = duckdb.connect(str(snapshot_path(db)), read_only=True)
    try:
        marts.register_filesystem(con, db)
        return con.execute(sql).fetchall()
    finally:
        con.close()


PER_TRACE = "SELECT trace_id, count(*), sum(kernel_dur_ns) FROM kernel_taxbreak GROUP BY ALL ORDER BY 1"


def test_marts_on_s3(home: Path, run: Run, s3: dict[str, str]) -> None:
    endpoint = s3["TAXBREAK_S3_ENDPOINT_URL"]
    db = home / "taxbreak.duckdb"
    add_fusion(home / "lake")
    done = run("analyze", "-q", env=s3)
    assert done.returncode == 0, done.stderr
    objects = _objects(endpoint)
    manifest = json.loads(_manifest(endpoint))
    # two traces (below marts.compact_loose = 4): loose partitions, each a uniquely named object the manifest names
    mixed = {k for k in objects if f"/trace_id={MIXED_ID}/" in k}
    fusion = {k for k in objects if f"/trace_id={FUSION_ID}/" in k}
    assert mixed and fusion and all(k.rsplit("/", 1)[1].startswith("part-") and k.endswith(".parquet")
                                    for k in mixed | fusion)
    assert {f"{rel}/{name}" for rel, name in manifest["parts"].items()} == mixed | fusion
    assert "kernel_taxbreak/_empty.parquet" in objects
    assert not list(marts.marts_dir(db).rglob("*.parquet"))  # nothing of the marts kept locally

    # the snapshot's views read the objects; the same rows as the warehouse file
    views = {r[0]: r[1] for r in _snapshot_rows(db, "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal")}
    assert f"'{URL}/kernel_taxbreak/trace_id={MIXED_ID}/part-" in views["kernel_taxbreak"]
    with duckdb.connect(str(db), read_only=True) as con:
        expected = con.execute(PER_TRACE).fetchall()
    assert {t: n for t, n, _ in expected} == KERNELS
    assert dict((t, d) for t, _, d in expected)[FUSION_ID] == 1000  # ten kernels of 100 ns
    assert _snapshot_rows(db, PER_TRACE) == expected
    # ``taxbreak sql`` (its sandbox on), ``summary`` and ``compare`` read the snapshot over S3
    sql = run("sql", "--format", "csv", "SELECT trace_id, count(*) AS n FROM kernel_taxbreak GROUP BY ALL ORDER BY 1",
              env=s3)
    assert sql.returncode == 0, sql.stderr
    assert sql.stdout.split() == ["trace_id,n", f"{MIXED_ID},9", f"{FUSION_ID},10"]
    summary = run("summary", FUSION_ID[:12], "--json", env=s3)
    assert summary.returncode == 0, summary.stderr
    headline = json.loads(summary.stdout)["headline"]
    assert (headline["kernels"], headline["t_device_active_ns"]) == (10, 1000)
    compare = run("compare", MIXED_ID[:12], FUSION_ID[:12], "--json", env=s3)
    assert compare.returncode == 0, compare.stderr
    assert json.loads(compare.stdout)["b"]["trace_ids"] == [FUSION_ID]
    # without the snapshot, the readers' last resort reads the manifest's objects directly (sandboxed too)
    opened = open_readonly(db, prefer="exports", sandbox=True)
    try:
        assert opened.source == "exports" and opened.con.execute(PER_TRACE).fetchall() == expected
    finally:
        opened.close()  # (and its pin: collect below keeps no replaced object for it)

    # the fusion trace analysed again: new objects for it, the mixed trace's untouched, the old ones kept a while
    again = run("analyze", "-q", "--trace", FUSION_ID[:12], env=s3)
    assert again.returncode == 0, again.stderr
    after = _objects(endpoint)
    assert {k: after.get(k) for k in mixed} == {k: objects[k] for k in mixed}
    new_fusion = {k for k in after if f"/trace_id={FUSION_ID}/" in k} - fusion
    assert len(new_fusion) == len(fusion) and fusion <= set(after)  # replaced, not yet deleted
    manifest = json.loads(_manifest(endpoint))
    assert {rel for rel, _ in manifest["replaced"]} == fusion
    assert {f"{rel}/{name}" for rel, name in manifest["parts"].items()} == mixed | new_fusion
    assert _snapshot_rows(db, PER_TRACE) == expected
    # past the grace period the replaced objects are deleted, and only those
    assert sorted(marts.collect(db, keep_s=0)) == sorted(fusion)
    assert set(_objects(endpoint)) == set(after) - fusion
    assert json.loads(_manifest(endpoint))["replaced"] == []
    assert _snapshot_rows(db, PER_TRACE) == expected
    # forgetting a trace deletes every object holding it at once
    assert run("forget", FUSION_ID[:12], env=s3).returncode == 0
    assert not any(f"trace_id={FUSION_ID}" in k for k in _objects(endpoint))
    assert {k for k in _objects(endpoint) if "trace_id=" in k} == mixed
    assert _snapshot_rows(db, PER_TRACE) == [r for r in expected if r[0] == MIXED_ID]


def test_a_failed_upload_leaves_the_marts_as_they_were(home: Path, run: Run, s3: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = s3["TAXBREAK_S3_ENDPOINT_URL"]
    db = home / "taxbreak.duckdb"
    add_fusion(home / "lake")
    assert run("analyze", "-q", env=s3).returncode == 0
    objects, manifest = _objects(endpoint), _manifest(endpoint)
    before = _snapshot_rows(db, PER_TRACE)

    real = marts.ObjectMarts.upload
    calls: list[str] = []

    def failing(self: marts.ObjectMarts, local: Path, rel: str) -> None:
        calls.append(rel)
        if len(calls) == 3:
            raise OSError("connection reset (test)")
        real(self, local, rel)

    monkeypatch.setattr(marts.ObjectMarts, "upload", failing)
    with pytest.raises(OSError, match="connection reset"), writer(db, traces=[FUSION_ID]):
        pass  # the fusion trace's partitions exported again: the third upload fails
    assert len(calls) == 3 and all(f"trace_id={FUSION_ID}/part-" in rel for rel in calls[:2])
    assert _manifest(endpoint) == manifest  # the commit point unchanged
    assert _objects(endpoint) == objects  # the two uploaded objects deleted again
    assert not list(marts.marts_dir(db).glob(".uploads-*"))
    assert _snapshot_rows(db, PER_TRACE) == before
    markers, traces = marts.pending(db)
    assert len(markers) == 1 and traces == [FUSION_ID]  # the next writer exports the trace again

    monkeypatch.setattr(marts.ObjectMarts, "upload", real)
    with writer(db, traces=[]):
        pass
    assert marts.pending(db) == ([], [])
    assert _snapshot_rows(db, PER_TRACE) == before
    assert json.loads(_manifest(endpoint))["replaced"]  # the fusion trace's previous objects, kept a while

    # a writer killed after its uploads, before the manifest: the manifest and the snapshot's results as they were
    manifest = _manifest(endpoint)
    killed = run("analyze", "-q", "--trace", FUSION_ID[:12], env={**s3, FAULT_ENV: "marts_renamed"})
    assert killed.returncode == -9
    assert _manifest(endpoint) == manifest
    assert _snapshot_rows(db, PER_TRACE) == before
    assert marts.pending(db)[1] == [FUSION_ID]
    assert _data_objects(endpoint) - _named(endpoint)  # its uploads, named by no manifest
    # the next writer (another trace, one table) exports the dead writer's trace again and deletes its uploads
    assert run("analyze", "-q", "--trace", MIXED_ID[:12], "--table", "trace_meta", env=s3).returncode == 0
    assert marts.pending(db) == ([], [])
    assert _manifest(endpoint) != manifest and _snapshot_rows(db, PER_TRACE) == before
    assert _data_objects(endpoint) == _named(endpoint)
    assert not list(marts.marts_dir(db).glob(".uploads-*"))


def test_segments_on_s3(home: Path, run: Run, s3: dict[str, str]) -> None:
    """With ``marts.compact_loose = 2`` the two traces are one segment object; a trace analysed again is a loose
    object, and the segment, half superseded, is rewritten without it (read back from S3); the other trace analysed
    again makes two loose traces, compacted into one new segment (the first trace's loose objects read in place
    from S3); every replaced object is collected after the grace period."""
    endpoint = s3["TAXBREAK_S3_ENDPOINT_URL"]
    env = {**s3, "TAXBREAK_MARTS_COMPACT_LOOSE": "2"}
    db = home / "taxbreak.duckdb"
    add_fusion(home / "lake")
    assert run("analyze", "-q", env=env).returncode == 0
    with duckdb.connect(str(db), read_only=True) as con:
        expected = con.execute(PER_TRACE).fetchall()
    assert {t: n for t, n, _ in expected} == KERNELS
    first = {k for k in _objects(endpoint) if k.startswith("kernel_taxbreak/seg-")}
    assert len(first) == 1 and not any("trace_id=" in k for k in _objects(endpoint))
    assert _snapshot_rows(db, PER_TRACE) == expected

    assert run("analyze", "-q", "--trace", FUSION_ID[:12], env=env).returncode == 0
    view = dict(_snapshot_rows(db, "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal"))["kernel_taxbreak"]
    # the loose object, and a segment of the mixed trace alone (half of the first one superseded: rewritten)
    assert f"trace_id={FUSION_ID}/part-" in view and "/kernel_taxbreak/seg-" in view
    manifest = json.loads(_manifest(endpoint))
    assert [s["traces"] for s in manifest["segments"].values()] == [[MIXED_ID]]
    assert _snapshot_rows(db, PER_TRACE) == expected

    assert run("analyze", "-q", "--trace", MIXED_ID[:12], env=env).returncode == 0
    objects = _objects(endpoint)
    segments = {k for k in objects if k.startswith("kernel_taxbreak/seg-")}
    manifest = json.loads(_manifest(endpoint))
    assert len(manifest["segments"]) == 1 and "parts" not in manifest  # nothing loose, nothing named apart
    (sid, seg), = manifest["segments"].items()
    assert seg["traces"] == sorted(KERNELS) and f"kernel_taxbreak/{seg['files']['kernel_taxbreak']}" in segments
    assert first <= {rel for rel, _ in manifest["replaced"]}  # kept for the previous snapshot's readers
    assert _snapshot_rows(db, PER_TRACE) == expected
    assert _snapshot_rows(db, "SELECT count(*) FROM kernel_taxbreak WHERE kernel_name = 'D'") == [(1,)]
    marts.collect(db, keep_s=0)
    assert {k for k in _objects(endpoint) if "/seg-" in k or "trace_id=" in k} == {
        f"{t}/{f}" for t, f in seg["files"].items()}
    assert _snapshot_rows(db, PER_TRACE) == expected
