"""Kineto inputs no profiler writes (issue 13): impossible numbers are skipped and counted per reason without
failing the file, nesting and expansion are bounded, and no message names a file of the workdir.  Every expected
figure is computed by hand from the events below."""

from __future__ import annotations

import gzip
import json

import pytest

from taxbreak.config import ingest_limits
from taxbreak.ingest import ingest_file
from taxbreak.ingest import kineto as kineto_mod

# an op at 10 µs for 5 µs, its launch at 11 µs for 2 µs (correlation 7), the kernel at 12 µs for 3 µs
BASE = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 2,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3,
     "args": {"device": 0, "stream": 7, "correlation": 7}},
]


def _kernel(**kw: object) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "bad", "pid": 0, "tid": 7, "ts": 14, "dur": 1,
            "args": {"device": 0, "stream": 7}, **kw}


IMPOSSIBLE = {
    # name: (extra event, skip reason)
    "negative_dur": (_kernel(dur=-5), "negative_dur"),
    "ts_null": (_kernel(ts=None), "missing_ts"),
    "ts_absent": ({k: v for k, v in _kernel().items() if k != "ts"}, "missing_ts"),
    "ts_int64_max_us": (_kernel(ts=2**63 - 1), "ts_out_of_range"),  # beyond DECIMAL(21,3): the streaming route
    "ts_past_int64_ns": (_kernel(ts=9_223_372_036_854_776), "ts_out_of_range"),  # fits the decimal, not int64 ns
    "ts_far_negative": (_kernel(ts=-5_000_000_000_000_000), "ts_out_of_range"),
    "end_past_int64_ns": (_kernel(ts=9_223_372_036_854_775, dur=1), "end_out_of_range"),
    "dur_huge": (_kernel(dur=10**30), "dur_out_of_range"),
    "correlation_2_64_plus_1": (_kernel(args={"device": 0, "stream": 7, "correlation": 2**64 + 1}),
                                "bad_correlation"),
    "correlation_text": (_kernel(args={"device": 0, "stream": 7, "correlation": "x"}), "bad_correlation"),
}


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_an_impossible_value_skips_its_event_not_the_file(write_kineto, lake, name):
    extra, reason = IMPOSSIBLE[name]
    res = ingest_file(write_kineto(f"{name}.json", [*BASE, extra]), lake)
    assert res.status == "ingested", res.error
    row = res.row
    assert (row["event_count"], json.loads(row["skipped_counts_json"]), row["source_event_count"]) == \
        (3, {reason: 1}, 4)
    events = {e["name"]: e for e in lake.read_events(res.trace_id).to_pylist()}
    assert sorted(events) == ["aten::mm", "cudaLaunchKernel", "gemm"]
    # the origin is the op at 10 µs: the dropped event never moves it
    assert (events["aten::mm"]["ts_ns"], events["gemm"]["ts_ns"], events["gemm"]["dur_ns"]) == (0, 2_000, 3_000)
    assert row["duration_ns"] == 5_000  # 10 µs .. 15 µs


def test_every_reason_counted_in_one_file(write_kineto, lake):
    extras = [e for e, _ in IMPOSSIBLE.values()]
    res = ingest_file(write_kineto("all.json", [*BASE, *extras]), lake)
    assert res.status == "ingested", res.error
    want: dict[str, int] = {}
    for _, reason in IMPOSSIBLE.values():
        want[reason] = want.get(reason, 0) + 1
    assert json.loads(res.row["skipped_counts_json"]) == want
    assert (res.row["event_count"], res.row["source_event_count"]) == (3, 3 + len(IMPOSSIBLE))


def test_nesting_deeper_than_the_limit_fails_the_file_quickly(write_kineto, lake):
    deep = b"[" * 100_000 + b"]" * 100_000
    raw = (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
           b'"args": {"x": ' + deep + b"}}]}")
    path = write_kineto("deep.json", raw=raw)
    res = ingest_file(path, lake)
    assert res.status == "failed"
    assert res.error == (f"{path}: arrays and objects nested deeper than 128 levels (setting "
                         "ingest.max_json_depth, $TAXBREAK_MAX_JSON_DEPTH)")
    assert lake.catalogue_row(res.trace_id)["error"] == res.error


def test_nesting_within_the_limit_is_stored(write_kineto, lake, monkeypatch):
    monkeypatch.setenv("TAXBREAK_MAX_JSON_DEPTH", "8")
    # top object, events array, event, args: 4 levels; 4 arrays more: 8
    res = ingest_file(write_kineto("ok.json", [{**BASE[0], "args": {"a": [[[[1]]]]}}]), lake, limits=ingest_limits())
    assert res.status == "ingested", res.error
    res = ingest_file(write_kineto("no.json", [{**BASE[0], "args": {"a": [[[[[1]]]]]}}]), lake, limits=ingest_limits())
    assert res.status == "failed" and "nested deeper than 8 levels" in res.error


def test_a_gzip_bomb_fails_with_the_limit_named(write_kineto, lake, monkeypatch):
    monkeypatch.setattr(kineto_mod, "GZIP_FREE_BYTES", 1 << 10)
    monkeypatch.setenv("TAXBREAK_MAX_GZIP_RATIO", "20")
    raw = b'{"traceEvents": [' + b" " * (1 << 20) + b"]}"
    path = write_kineto("bomb.json.gz", raw=raw, gz=True)
    assert len(raw) > 20 * path.stat().st_size
    res = ingest_file(path, lake, limits=ingest_limits())
    assert res.status == "failed"
    assert f"gzip data expanding more than 20 times its {path.stat().st_size:,} bytes" in res.error
    assert "TAXBREAK_MAX_GZIP_RATIO" in res.error


def test_temporary_space_is_capped(write_kineto, lake, monkeypatch):
    monkeypatch.setenv("TAXBREAK_MAX_TEMP_BYTES", "50")
    for name, gz in (("t.json", False), ("t.json.gz", True)):
        path = write_kineto(name, BASE, gz=gz)
        res = ingest_file(path, lake, limits=ingest_limits())
        assert res.status == "failed"
        assert res.error == (f"{path}: more than 50 bytes of JSON, the temporary space one ingest may use "
                             "(setting ingest.max_temp_bytes, $TAXBREAK_MAX_TEMP_BYTES); not ingested")


def test_a_read_error_of_the_streaming_route_names_no_workdir_file(write_kineto, lake, monkeypatch):
    """DuckDB's own messages name the file it reads, which is in the workdir: the message keeps the problem."""
    def failing_stage(con, events_path, fmt, stage_path, max_json_depth):  # noqa: ANN001, ANN202
        raise kineto_mod.duckdb.InvalidInputException(f'Malformed JSON in file "{events_path}", at line 3')

    monkeypatch.setattr(kineto_mod, "_stage", failing_stage)
    path = write_kineto("t.json", BASE)
    res = ingest_file(path, lake)
    assert res.status == "failed"
    assert res.error == (f'{path}: cannot read the trace events (Malformed JSON in file "the trace events", '
                         "at line 3)")


def test_gzip_expansion_below_the_free_size_is_never_refused(write_kineto, lake, monkeypatch):
    monkeypatch.setenv("TAXBREAK_MAX_GZIP_RATIO", "1")  # ratio 1, but 64 MiB are always allowed
    events = [{**BASE[0], "name": f"op{i}", "ts": 10 + i} for i in range(2000)]
    path = write_kineto("many.json.gz", events, gz=True)
    assert len(gzip.decompress(path.read_bytes())) > 5 * path.stat().st_size
    res = ingest_file(path, lake, limits=ingest_limits())
    assert res.status == "ingested" and res.row["event_count"] == 2000


def test_depth_check_counts_structure_not_brackets_in_strings():
    import pyarrow as pa

    values = pa.array(['{"a": 1}', None, "", '{"s": "' + "[" * 300 + '"}', '{"x": ' + "[" * 130 + "]" * 130 + "}"])
    kineto_mod._check_depth(values.slice(0, 4), 125)  # 300 '[' inside a string: depth 1
    with pytest.raises(kineto_mod._TooDeep):
        kineto_mod._check_depth(values, 125)  # 131 levels
    with pytest.raises(kineto_mod._TooDeep):
        kineto_mod._check_depth(values.slice(4), 125)  # a slice: offsets from the slice, not the buffer start


def test_depth_check_counts_each_value_apart():
    """Values within the limit stay within it however many sit side by side (openers are counted per value)."""
    import pyarrow as pa

    within = '{"x": ' + "[" * 124 + "]" * 124 + "}"  # 125 openers, 125 levels
    deeper = '{"x": ' + "[" * 125 + "]" * 125 + "}"  # 126 levels
    values = pa.array([within, "", None, within, within, deeper, "", within])
    kineto_mod._check_depth(values.slice(0, 5), 125)
    kineto_mod._check_depth(values.slice(6), 125)
    with pytest.raises(kineto_mod._TooDeep):
        kineto_mod._check_depth(values, 125)
    with pytest.raises(kineto_mod._TooDeep):
        kineto_mod._check_depth(values.slice(5, 1), 125)
