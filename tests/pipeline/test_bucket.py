"""The sensor's cursor and settling rule (pure functions), and a real sensor tick over 10,000 files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import pytest

from taxbreak.store.bucket import Cursor, Entry, LocalBucket, is_bucket_trace_name, select_new

S = 1_000_000_000


def test_names_taken_and_left() -> None:
    for name in ("a.json", "b/c.json.gz", "r.nsys-rep", "x.sqlite", "x.json.meta.json", "d/y.qdrep"):
        assert is_bucket_trace_name(name), name
    for name in (".hidden.json", ".tmp/a.json", "notes.txt", "a.json.part", "upload.json.tmp"):
        assert not is_bucket_trace_name(name), name


def test_select_new_orders_settles_and_limits() -> None:
    entries = [Entry(10 * S, "b.json", 1), Entry(10 * S, "a.json", 1), Entry(5 * S, "z.json", 1),
               Entry(19 * S, "late.json", 1)]
    batch, cur, waiting = select_new(entries, Cursor(), now_ns=20 * S, settle_s=2, max_files=2)
    assert [e.name for e in batch] == ["z.json", "a.json"]
    assert cur == Cursor(10 * S, "a.json") and waiting == 1
    batch, cur, waiting = select_new(entries, cur, now_ns=20 * S, settle_s=2, max_files=10)
    assert [e.name for e in batch] == ["b.json"] and cur == Cursor(10 * S, "b.json") and waiting == 1
    # late.json changed 1 s before "now": still being written; one second later it has settled.
    batch, cur, _ = select_new(entries, cur, now_ns=21 * S, settle_s=2, max_files=10)
    assert [e.name for e in batch] == ["late.json"] and cur == Cursor(19 * S, "late.json")
    assert select_new(entries, cur, now_ns=99 * S, settle_s=2, max_files=10)[0] == []
    # rewritten in place: a newer change time puts it after the mark again
    again = [*entries, Entry(30 * S, "a.json", 2)]
    assert [e.name for e in select_new(again, cur, now_ns=99 * S, settle_s=2, max_files=10)[0]] == ["a.json"]


def test_cursor_stays_small_over_10000_files() -> None:
    entries = [Entry((i // 7) * 1000, f"host{i % 13}/trace_{i:05d}.json", 1) for i in range(10_000)]
    cur, seen, sizes = Cursor(), [], []
    while True:
        batch, cur, _ = select_new(entries, cur, now_ns=10**18, settle_s=5, max_files=200)
        if not batch:
            break
        seen += [e.name for e in batch]
        sizes.append(len(cur.dumps()))
    assert len(seen) == 10_000 and len(set(seen)) == 10_000
    assert len(sizes) == 50 and max(sizes) < 80
    assert Cursor.loads(cur.dumps()) == cur


def test_sensor_tick_over_10000_files(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    """A real tick on a local bucket of 10,000 files: 200 runs requested, cursor a few dozen bytes."""
    from taxbreak.pipeline.local import evaluate_sensor, load_defs

    inbox = env["inbox"]
    for i in range(10_000):
        d = inbox / f"host{i % 10}"
        d.mkdir(exist_ok=True)
        (d / f"t{i:05d}.json").write_bytes(b"{}" if i == 0 else f'{{"n": {i}}}'.encode())
    defs = load_defs()
    data = evaluate_sensor(defs, instance)
    assert len(data.run_requests) == 200
    assert len(data.dynamic_partitions_requests[0].partition_keys) == 200
    assert len(data.cursor) < 80
    for req in data.dynamic_partitions_requests:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    data2 = evaluate_sensor(defs, instance, data.cursor)
    assert len(data2.run_requests) == 200 and len(data2.cursor) < 80
    first = {r.partition_key for r in data.run_requests}
    assert not first & {r.partition_key for r in data2.run_requests}


def test_unsettled_file_is_left_for_later(
    env: dict[str, Path], instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taxbreak.pipeline.local import evaluate_sensor, load_defs

    monkeypatch.setenv("TAXBREAK_SETTLE_S", "3600")
    (env["inbox"] / "writing.json").write_text('{"traceEvents": [')
    defs = load_defs()
    data = evaluate_sensor(defs, instance)
    assert data.run_requests == [] and "1 still settling" in (data.skip_message or "")
    assert Cursor.loads(data.cursor) == Cursor()


def test_local_bucket_lists_relative_names(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "t.json.gz").write_bytes(b"\x1f\x8b")
    (tmp_path / "a" / "notes.md").write_text("x")
    (tmp_path / "a" / "t.json.gz.meta.json").write_text("{}")
    names = sorted(e.name for e in LocalBucket(tmp_path).list())
    assert names == ["a/b/t.json.gz", "a/t.json.gz.meta.json"]


def test_sweep_schedule_requests_only_unseen_traces(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    from taxbreak.ingest import Lake, ingest_file
    from taxbreak.pipeline.local import load_defs

    from .conftest import write_kineto

    known = write_kineto(env["inbox"] / "known.json", 1)
    assert ingest_file(known, Lake(env["lake"])).status == "ingested"
    new = write_kineto(env["inbox"] / "sub" / "new.json", 2)
    defs = load_defs()
    schedule = defs.resolve_schedule_def("bucket_sweep_schedule")
    # closed here: a context left to the garbage collector exits its instance late and restores a stale
    # Dagster defs-state storage into whichever test is running then (test_definitions failed that way)
    with dg.build_schedule_context(instance=instance, resources=dict(defs.resources or {}),
                                   repository_def=defs.get_repository_def()) as context:
        data = schedule.evaluate_tick(context)
    new_id = hashlib.sha256(new.read_bytes()).hexdigest()
    assert [(r.partition_key, r.tags["taxbreak/trace_id"], r.run_config["ops"]["trace_ingest"]["config"]["source"])
            for r in data.run_requests] == [(f"new-{new_id[:12]}", new_id, "sub/new.json")]
    assert instance.get_dynamic_partitions("traces") == [f"new-{new_id[:12]}"]


def test_first_tick_over_an_analysed_bucket_requests_no_run(env: dict[str, Path],
                                                            instance: dg.DagsterInstance) -> None:
    """`make demo` analysed the bucket's traces, then `dg dev` starts on an instance with no partitions: its first
    tick requests no run for them (issue 29: it re-ran all four demo traces, 150-285 s each). A trace the catalogue
    holds ingested but the warehouse lacks is run; a failed one is not (it waits for `taxbreak retry`)."""
    from taxbreak.api import ingest_and_analyze
    from taxbreak.ingest import Lake, ingest_file
    from taxbreak.pipeline.local import load_defs, tick

    from .conftest import write_kineto

    done = [write_kineto(env["inbox"] / f"{n}.json", k, base_us=10.0 * k) for n, k in (("a", 1), ("b", 2))]
    for f in done:
        ingest_and_analyze(f, env["lake"], env["warehouse"])
    lake = Lake(env["lake"])
    unanalysed = write_kineto(env["inbox"] / "late.json", 3, base_us=30.0)
    assert ingest_file(unanalysed, lake).status == "ingested"
    (env["inbox"] / "bad.json").write_bytes(b'{"traceEvents": [')
    assert ingest_file(env["inbox"] / "bad.json", lake).status == "failed"
    assert instance.get_dynamic_partitions("traces") == []  # a fresh instance
    t = tick(load_defs(), instance)
    late_id = hashlib.sha256(unanalysed.read_bytes()).hexdigest()
    assert t.trace_ids == [late_id] and all(r.success for r in t.runs)
    assert instance.get_dynamic_partitions("traces") == [f"late-{late_id[:12]}"]
    # the next tick over the same bucket (a fresh cursor: everything listed again) requests nothing
    again = tick(load_defs(), instance)
    assert again.runs == [] and again.skip_reason == "4 settled file(s), nothing new"


# -- nothing in a bucket blocks the others (issue 13) -------------------------------------------------------------
TRACE = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'


def _hostile_bucket(tmp_path: Path) -> tuple[Path, Path]:
    """A bucket with a good trace, a FIFO, a link to /dev/zero, a link leaving the bucket and a link inside it."""
    import os

    inbox, outside = tmp_path / "inbox", tmp_path / "outside"
    inbox.mkdir()
    outside.mkdir()
    (inbox / "good.json").write_bytes(TRACE)
    os.mkfifo(inbox / "fifo.json")
    (inbox / "zero.json").symlink_to("/dev/zero")
    (outside / "secret.json").write_bytes(TRACE + b" ")
    (inbox / "out.json").symlink_to(outside / "secret.json")
    (inbox / "sub").mkdir()
    (inbox / "sub" / "alias.json").symlink_to(inbox / "good.json")
    return inbox, outside


def test_local_bucket_lists_regular_files_inside_it_only(tmp_path: Path) -> None:
    inbox, _ = _hostile_bucket(tmp_path)
    bucket = LocalBucket(inbox)
    assert sorted(e.name for e in bucket.list()) == ["good.json", "sub/alias.json"]
    assert bucket.rejected["fifo.json"] == "not a regular file"
    assert bucket.rejected["zero.json"] == "a link leading out of the bucket (to /dev/zero)"
    assert "out of the bucket" in bucket.rejected["out.json"]


def test_hashing_a_fifo_or_a_device_fails_at_once(tmp_path: Path) -> None:
    import time

    from taxbreak.store.bucket import sha256_of

    inbox, _ = _hostile_bucket(tmp_path)
    bucket = LocalBucket(inbox)
    t0 = time.monotonic()
    for name in ("fifo.json", "zero.json", "out.json"):
        with pytest.raises(OSError):
            sha256_of(bucket, name)
    assert time.monotonic() - t0 < 5  # nothing blocked (a FIFO open or /dev/zero read never returns)
    assert sha256_of(bucket, "sub/alias.json") == hashlib.sha256(TRACE).hexdigest()


def test_ingest_from_a_hostile_bucket_records_the_good_file_and_names_the_rest(tmp_path: Path) -> None:
    from taxbreak.ingest import Lake
    from taxbreak.store.bucket import ingest_from

    inbox, _ = _hostile_bucket(tmp_path)
    bucket, lake = LocalBucket(inbox), Lake(tmp_path / "lake")
    good = ingest_from(bucket, "good.json", lake, force=False, cache_dir=None)
    assert good.status == "ingested" and good.row["event_count"] == 1
    for name, phrase in (("fifo.json", "not a regular file (a FIFO)"), ("zero.json", "leading out of the bucket"),
                         ("out.json", "a link leading out of the bucket")):
        res = ingest_from(bucket, name, lake, force=False, cache_dir=None)
        assert res.status == "failed" and phrase in res.error and str(inbox / name) in res.error, res.error
    assert [r["file_name"] for r in lake.catalogue().to_pylist()] == ["good.json"]


def test_ingest_file_refuses_a_device_and_a_fifo_without_blocking(tmp_path: Path) -> None:
    import os

    from taxbreak.ingest import Lake, ingest_file, iter_trace_files

    inbox, _ = _hostile_bucket(tmp_path)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(inbox / "zero.json", lake)  # named explicitly: the link is followed, the device refused
    assert res.status == "failed" and "not a regular file (a character device)" in res.error
    res = ingest_file(inbox / "fifo.json", lake)
    assert res.status == "failed" and "not a regular file (a FIFO)" in res.error
    assert not lake.catalogue_paths()  # no content was read: no trace id, no row
    # a folder expands to its regular files, links not followed
    assert [p.name for p in iter_trace_files([inbox])] == ["good.json"]
    assert os.path.exists(inbox / "fifo.json")


def test_a_sidecar_after_its_trace_updates_the_catalogue_without_reading_events(tmp_path: Path) -> None:
    from taxbreak.ingest import Lake
    from taxbreak.ingest.sidecar import find_meta
    from taxbreak.store.bucket import apply_sidecar, ingest_from

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "t.json").write_bytes(TRACE)
    bucket, lake = LocalBucket(inbox), Lake(tmp_path / "lake")
    first = ingest_from(bucket, "t.json", lake, force=False, cache_dir=None)
    events_before = lake.events_path(first.trace_id).stat()
    (inbox / "t.json.meta.json").write_text('{"taxbreak_meta_version": 1, "batch_size": 4, "output_tokens": 7}')
    res = apply_sidecar(bucket, "t.json", lake, cache_dir=None)
    assert (res.status, res.trace_id, res.error) == ("meta_updated", first.trace_id, None)
    row = lake.catalogue_row(first.trace_id)
    stored = __import__("json").loads(row["metadata_json"])["taxbreak_sidecar"]
    assert (stored["batch_size"], stored["output_tokens"]) == (4, 7)
    assert row["event_count"] == 1
    after = lake.events_path(first.trace_id).stat()
    assert (after.st_ino, after.st_mtime_ns) == (events_before.st_ino, events_before.st_mtime_ns)  # not rewritten
    # the stored copy serves when the trace's source is not beside it (an object store, a moved inbox)
    meta, source, _ = find_meta(row["metadata_json"], "s3://bucket/inbox/t.json")
    assert (meta["output_tokens"], source) == (7, "sidecar")
    # an invalid sidecar: recorded as such, the earlier copy dropped
    (inbox / "t.json.meta.json").write_text('{"taxbreak_meta_version": 1, "batch_size": -1}')
    bad = apply_sidecar(bucket, "t.json", lake, cache_dir=None)
    assert bad.status == "meta_updated" and "batch_size must be a non-negative integer" in bad.error
    meta, source, note = find_meta(lake.catalogue_row(first.trace_id)["metadata_json"], "s3://b/t.json")
    assert meta is None and "batch_size must be a non-negative integer" in note


def test_a_sidecar_before_its_trace_is_stored_ingests_the_trace(tmp_path: Path) -> None:
    from taxbreak.ingest import Lake
    from taxbreak.store.bucket import apply_sidecar

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "t.json").write_bytes(TRACE)
    (inbox / "t.json.meta.json").write_text('{"taxbreak_meta_version": 1}')
    res = apply_sidecar(LocalBucket(inbox), "t.json", Lake(tmp_path / "lake"), cache_dir=None)
    assert res.status == "ingested" and res.row["event_count"] == 1


def test_object_key_segments_are_names_not_paths() -> None:
    from taxbreak.store.bucket import local_copy_name

    for name in ("../up.json", "./dot.json", "/etc/x.json", "a/../b.json"):  # '', '.', '..' are key segments
        assert is_bucket_trace_name(name), name
    assert not is_bucket_trace_name("a/.hidden/b.json")
    assert local_copy_name("d/" + "n" * 300 + ".JSON.GZ") == "object.json.gz"  # short, keeps the suffix
    assert local_copy_name("d/short.json") == "short.json"


def test_a_tick_hashes_a_bounded_number_of_bytes() -> None:
    entries = [Entry(1 * S, "a.json", 3 << 30), Entry(2 * S, "b.json", 2 << 30), Entry(3 * S, "c.json", 1 << 30),
               Entry(4 * S, "huge.json", 9 << 30)]
    batch, cur, _ = select_new(entries, Cursor(), now_ns=10 * S, settle_s=0, max_files=10, max_bytes=4 << 30)
    assert [e.name for e in batch] == ["a.json"] and cur == Cursor(1 * S, "a.json")  # 3 + 2 GiB > 4 GiB
    batch, cur, _ = select_new(entries, cur, now_ns=10 * S, settle_s=0, max_files=10, max_bytes=4 << 30)
    assert [e.name for e in batch] == ["b.json", "c.json"]
    batch, cur, _ = select_new(entries, cur, now_ns=10 * S, settle_s=0, max_files=10, max_bytes=4 << 30)
    assert [e.name for e in batch] == ["huge.json"]  # one file always goes, however large
