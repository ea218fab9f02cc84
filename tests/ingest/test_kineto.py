"""Kineto adapter on tiny hand-built traces: every expected value below was computed by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from taxbreak.ingest import Lake, ingest_file
from taxbreak.schemas import EVENT_SCHEMA

BASE_NS = 1_700_000_000_000_000_000
HOST = 4242


def _decoder_step(R: type) -> list[dict]:
    """One launch of each kind. Origin = the user annotation at 99.999 µs (the earliest timed event)."""
    return [
        {"name": "process_name", "ph": "M", "ts": R("50.500"), "pid": HOST, "tid": 0, "args": {"name": "python3"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": HOST, "tid": HOST,
         "ts": R("99.999"), "dur": R("50"), "args": {"External id": 1}},
        {"ph": "X", "cat": "python_function", "name": "model.py(10): forward", "pid": HOST, "tid": HOST,
         "ts": R("100.000"), "dur": R("40.001")},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": HOST, "tid": HOST, "ts": R("100.125"),
         "dur": R("20.5"), "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": HOST, "tid": HOST,
         "ts": R("101.001"), "dur": R("3.25"), "args": {"External id": 7, "cbid": 211, "correlation": 11}},
        {"ph": "s", "id": 11, "pid": HOST, "tid": HOST, "ts": R("101.001"), "cat": "ac2g", "name": "ac2g"},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": R("110.5"),
         "dur": R("8.007"), "args": {"External id": 7, "device": 0, "stream": 7, "correlation": 11,
                                     "registers per thread": 64, "shared memory": 4096,
                                     "grid": [4, 2, 1], "block": [128, 1, 1]}},
        {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": R("110.5"), "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync_v3020", "pid": HOST, "tid": HOST,
         "ts": R("129.5"), "dur": R("1"), "args": {"correlation": 12}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": R("130"), "dur": R("2"), "args": {"device": 0, "stream": 7, "correlation": 12, "bytes": 1024}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": R("133.25"),
         "dur": R("0.75"), "args": {"device": 0, "stream": 7, "correlation": 13, "bytes": 64}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": HOST, "tid": HOST, "ts": R("135"),
         "dur": R("2"), "args": {"correlation": 14}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": HOST, "tid": HOST, "ts": R("138"),
         "dur": R("4"), "args": {"correlation": 15}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": R("143"), "dur": R("1"),
         "args": {"device": 0, "stream": 7, "correlation": 16}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": R("110.5"),
         "dur": R("30")},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": HOST, "tid": HOST,
         "ts": R("145.000"), "args": {"Bytes": 512}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": R("100"), "dur": R("60")},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": R("160.001")},
        {"ph": "X", "cat": "cpu_op", "name": "aten::lost", "pid": HOST, "tid": HOST, "dur": R("1")},  # no ts
    ]


def _ingest(path: Path, lake: Lake):
    res = ingest_file(path, lake)
    assert res.status == "ingested", res.error
    table = lake.read_events(res.trace_id)
    return res, {(r["kind"], r["name"], r["phase"]): r for r in table.to_pylist()}, table


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_decoder_step_values(write_kineto, raw_number, lake, gz):
    path = write_kineto(
        "step.json.gz" if gz else "step.json", _decoder_step(raw_number),
        meta={"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
              "cupti_version": 22, "cuda_runtime_version": 12040},
        trailer={"traceName": "step.json", "baseTimeNanoseconds": BASE_NS, "host_name": "node-7"}, gz=gz,
    )
    res, ev, table = _ingest(path, lake)
    assert table.schema == EVENT_SCHEMA
    row = res.row
    assert row["source_event_count"] == 19
    assert row["event_count"] == 18
    assert json.loads(row["skipped_counts_json"]) == {"missing_ts": 1}
    assert row["start_epoch_ns"] == BASE_NS + 99_999
    assert row["host_name"] == "node-7"
    assert json.loads(row["gpu_names_json"]) == ["NVIDIA H100 80GB HBM3"]
    assert json.loads(row["tool_versions_json"]) == {
        "cuda_runtime_version": 12040, "cupti_version": 22, "schemaVersion": 1}
    meta = json.loads(row["metadata_json"])
    assert meta["traceName"] == "step.json" and "traceEvents" not in meta
    assert json.loads(row["event_counts_json"]) == {
        "driver_api": 1, "flow": 2, "framework_op": 1, "gpu_annotation": 1, "graph_launch": 1, "instant": 2,
        "kernel": 1, "memcpy": 1, "memset": 1, "metadata": 1, "other": 1, "python_function": 1,
        "runtime_api": 2, "sync": 1, "user_annotation": 1,
    }
    # times: ns since 99.999 µs, exact
    assert ev[("user_annotation", "ProfilerStep#1", "X")]["ts_ns"] == 0
    assert ev[("user_annotation", "ProfilerStep#1", "X")]["dur_ns"] == 50_000
    assert ev[("python_function", "model.py(10): forward", "X")]["ts_ns"] == 1
    assert ev[("python_function", "model.py(10): forward", "X")]["dur_ns"] == 40_001
    op = ev[("framework_op", "aten::mm", "X")]
    assert (op["ts_ns"], op["dur_ns"], op["external_id"], op["pid"], op["tid"]) == (126, 20_500, 7, "4242", "4242")
    assert json.loads(op["args_json"]) == {"External id": 7, "Input Dims": [[2, 3], [3, 4]]}
    assert ev[("metadata", "process_name", "M")]["ts_ns"] == 50_500 - 99_999
    launch = ev[("runtime_api", "cudaLaunchKernel", "X")]
    assert (launch["ts_ns"], launch["dur_ns"], launch["correlation_id"]) == (1_002, 3_250, 11)
    # the kernel: host pid, stream as tid, geometry, source pid kept
    k = ev[("kernel", "gemm_kernel", "X")]
    assert (k["ts_ns"], k["dur_ns"], k["pid"], k["tid"]) == (10_501, 8_007, "4242", "7")
    assert (k["device_id"], k["stream_id"], k["correlation_id"], k["external_id"]) == (0, 7, 11, 7)
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"], k["block_z"]) == (4, 2, 1, 128, 1, 1)
    assert (k["registers_per_thread"], k["shared_memory_bytes"]) == (64, 4096)
    assert json.loads(k["args_json"])["_source_pid"] == "0"
    assert json.loads(k["args_json"])["grid"] == [4, 2, 1]
    # runtime name without version suffix, raw name kept
    mc_call = ev[("runtime_api", "cudaMemcpyAsync", "X")]
    assert mc_call["raw_name"] == "cudaMemcpyAsync_v3020" and launch["raw_name"] is None
    mc = ev[("memcpy", "Memcpy HtoD (Pageable -> Device)", "X")]
    assert (mc["ts_ns"], mc["bytes"], mc["copy_kind"], mc["pid"], mc["tid"]) == (30_001, 1024, "HtoD", "4242", "7")
    ms = ev[("memset", "Memset (Device)", "X")]
    assert (ms["ts_ns"], ms["dur_ns"], ms["bytes"], ms["copy_kind"]) == (33_251, 750, 64, "Device")
    assert ev[("driver_api", "cuLaunchKernel", "X")]["correlation_id"] == 14
    assert ev[("graph_launch", "cudaGraphLaunch", "X")]["ts_ns"] == 38_001
    sync = ev[("sync", "Stream Sync", "X")]
    assert (sync["pid"], sync["tid"]) == ("4242", "7")
    gpu_ann = ev[("gpu_annotation", "ProfilerStep#1", "X")]
    assert (gpu_ann["pid"], gpu_ann["tid"], gpu_ann["dur_ns"]) == ("4242", "7", 30_000)
    assert json.loads(gpu_ann["args_json"]) == {"_source_pid": "0"}
    flows = {r["phase"]: r for r in table.to_pylist() if r["kind"] == "flow"}
    assert flows["s"]["flow_id"] == 11 and flows["f"]["flow_id"] == 11
    assert flows["f"]["pid"] == "0"  # flows keep the source pid
    # mixed pid/tid types: strings stay strings, '' stays ''
    trace = ev[("other", "PyTorch Profiler (0)", "X")]
    assert (trace["pid"], trace["tid"], trace["category"]) == ("Spans", "PyTorch Profiler", "Trace")
    end = ev[("instant", "Record Window End", "i")]
    assert (end["pid"], end["tid"], end["ts_ns"], end["dur_ns"]) == ("", "", 60_002, None)
    # the lake's span runs from the first timed event (the origin, 99.999 µs) to the window end (160.001 µs): the
    # metadata event at 50.5 µs never moves the start or the duration
    assert row["duration_ns"] == 60_002


def test_epoch_microseconds_keep_sub_microsecond_digits(write_kineto, raw_number, lake):
    R = raw_number
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::a", "pid": 1102, "tid": 1262,
         "ts": R("1712195495521131.125"), "dur": R("135.162")},
        {"ph": "X", "cat": "cpu_op", "name": "aten::b", "pid": 1102, "tid": 1262,
         "ts": R("1712195495521133.783"), "dur": R("131.797")},
        {"ph": "X", "cat": "cpu_op", "name": "aten::c", "pid": 1102, "tid": 1262,
         "ts": R("9007199254740993"), "dur": R("1")},  # 2^53 + 1 µs: not representable as a float64
    ]
    res, ev, _ = _ingest(write_kineto("epoch.json", events, meta={"schemaVersion": 1}), lake)
    assert res.row["start_epoch_ns"] == 1712195495521131125
    assert ev[("framework_op", "aten::a", "X")]["ts_ns"] == 0
    assert ev[("framework_op", "aten::a", "X")]["dur_ns"] == 135_162
    assert ev[("framework_op", "aten::b", "X")]["ts_ns"] == 2_658
    assert ev[("framework_op", "aten::c", "X")]["ts_ns"] == 9007199254740993000 - 1712195495521131125
    assert ev[("framework_op", "aten::a", "X")]["pid"] == "1102"


def test_launches_from_two_processes_map_kernels_by_correlation(write_kineto, raw_number, lake):
    R = raw_number
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": R("1"),
         "dur": R("1"), "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 200, "tid": 200, "ts": R("2"),
         "dur": R("1"), "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": R("5"), "dur": R("1"),
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 1, "tid": 9, "ts": R("6"), "dur": R("1"),
         "args": {"device": 1, "stream": 9, "correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k3", "pid": 1, "tid": 9, "ts": R("7"), "dur": R("1"),
         "args": {"device": 1, "stream": 9, "correlation": 99}},  # no launch in the trace: source pid kept
    ]
    _, ev, _ = _ingest(write_kineto("two.json", events, meta={"schemaVersion": 1}), lake)
    assert ev[("kernel", "k1", "X")]["pid"] == "100"
    assert ev[("kernel", "k2", "X")]["pid"] == "200"
    assert json.loads(ev[("kernel", "k2", "X")]["args_json"])["_source_pid"] == "1"
    assert ev[("kernel", "k3", "X")]["pid"] == "1"
    assert "_source_pid" not in json.loads(ev[("kernel", "k3", "X")]["args_json"])


def test_old_format_categories_and_lowercase_external_id(write_kineto, raw_number, lake):
    R = raw_number
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 25738, "tid": "25738",
         "ts": R("1623142623460016"), "dur": R("40"), "args": {"external id": 537}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 25738, "tid": "25738",
         "ts": R("1623142623460020"), "dur": R("9"), "args": {"correlation": 34417, "external id": 537}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": R("1623142623529248"), "dur": R("1940"),
         "args": {"device": 0, "stream": 7, "correlation": 34417, "external id": 537, "bytes": 19267584}},
        {"ph": "s", "id": 34417, "pid": 25738, "tid": 25738, "ts": R("1623142623460020"), "cat": "async",
         "name": "launch"},
    ]
    _, ev, _ = _ingest(write_kineto("old.json", events, meta={"schemaVersion": 1}), lake)
    mc = ev[("memcpy", "Memcpy HtoD (Pageable -> Device)", "X")]
    assert (mc["external_id"], mc["pid"], mc["tid"], mc["bytes"]) == (537, "25738", "7", 19267584)
    assert mc["ts_ns"] == 69_232_000
    assert ev[("framework_op", "aten::conv2d", "X")]["external_id"] == 537
    assert ev[("runtime_api", "cudaMemcpyAsync", "X")]["correlation_id"] == 34417
    assert ev[("flow", "launch", "s")]["flow_id"] == 34417


def test_rocm_names_and_string_args(write_kineto, raw_number, lake):
    R = raw_number
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyWithStream", "pid": 597913, "tid": 597913,
         "ts": R("4203669603438.301"), "dur": R("60.204"),
         "args": {"External id": 8, "stream": "0x0", "correlation": 117, "size": "2560", "kind": "1"}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Host -> Device)", "pid": 2, "tid": 0,
         "ts": R("4203669603454.206"), "dur": R("22.441"),
         "args": {"External id": 8, "device": 2, "stream": 0, "correlation": 117, "kind": "HtoD"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 597913, "tid": 597913,
         "ts": R("4203669603500"), "dur": R("5")},
    ]
    res, ev, _ = _ingest(
        write_kineto("rocm.json", events, meta={"schemaVersion": 1, "roctracer_version": 4.1},
                     trailer={"baseTimeNanoseconds": 1735632360000000000}), lake)
    mc = ev[("memcpy", "Memcpy HtoD (Host -> Device)", "X")]
    assert (mc["ts_ns"], mc["dur_ns"], mc["pid"], mc["tid"], mc["device_id"]) == (15_905, 22_441, "597913", "0", 2)
    assert mc["copy_kind"] == "HtoD"
    assert ev[("graph_launch", "hipGraphLaunch", "X")]["ts_ns"] == 61_699
    assert res.row["start_epoch_ns"] == 1735632360000000000 + 4203669603438301
    assert json.loads(res.row["tool_versions_json"]) == {"roctracer_version": 4.1, "schemaVersion": 1}


def test_unexpected_elements_take_the_streaming_route(write_kineto, raw_number, lake):
    """A non-object element breaks DuckDB's typed read: the ijson route stores the rest, counts the element."""
    R = raw_number
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::a", "pid": 1, "tid": 1, "ts": R("1712195495521131.125"),
         "dur": R("0.001")},
        5,
        {"ph": "X", "cat": "cpu_op", "name": "aten::b", "pid": "1", "tid": 1, "ts": R("1712195495521131.127"),
         "dur": R("2.5"), "args": {"External id": 3, "big": R("123456789012345678")}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::c", "pid": 1, "tid": 1, "ts": "not a number"},
    ]
    res, ev, _ = _ingest(write_kineto("odd.json", events, meta={"schemaVersion": 1}), lake)
    assert res.row["source_event_count"] == 4
    assert json.loads(res.row["skipped_counts_json"]) == {"bad_ts": 1, "not_an_object": 1}
    assert (ev[("framework_op", "aten::a", "X")]["ts_ns"], ev[("framework_op", "aten::a", "X")]["dur_ns"]) == (0, 1)
    b = ev[("framework_op", "aten::b", "X")]
    assert (b["ts_ns"], b["dur_ns"], b["external_id"], b["pid"]) == (2, 2_500, 3, "1")
    assert json.loads(b["args_json"])["big"] == 123456789012345678


def test_metadata_after_events_with_brackets(write_kineto, raw_number, lake):
    """Top-level keys after traceEvents (as TraceLens traces have), with ']' and '}' inside their strings."""
    R = raw_number
    events = [{"ph": "X", "cat": "kernel", "name": "k]}", "pid": 0, "tid": 7, "ts": R("10"), "dur": R("1"),
               "args": {"grid": [1, 1, 1], "block": [32, 1, 1]}}]
    trailer = {"deviceProperties": [{"id": 0, "name": "GPU ]}, x"}], "INFO": ["a], \"b\": 1}", "]"],
               "displayTimeUnit": "ms"}
    res, ev, _ = _ingest(write_kineto("trail.json", events, meta={"schemaVersion": 1}, trailer=trailer), lake)
    assert res.row["source_event_count"] == 1
    assert json.loads(res.row["gpu_names_json"]) == ["GPU ]}, x"]
    assert json.loads(res.row["metadata_json"])["INFO"] == ["a], \"b\": 1}", "]"]
    assert ev[("kernel", "k]}", "X")]["block_x"] == 32


def test_empty_event_list(write_kineto, lake):
    res = ingest_file(write_kineto("none.json", [], meta={"schemaVersion": 1}), lake)
    assert res.status == "ingested", res.error
    assert (res.row["event_count"], res.row["source_event_count"]) == (0, 0)


def test_reingest_identical_content_is_a_no_op(write_kineto, raw_number, lake):
    path = write_kineto("step.json", _decoder_step(raw_number), meta={"schemaVersion": 1})
    first = ingest_file(path, lake)
    copy = path.with_name("copy-of-step.json")
    copy.write_bytes(path.read_bytes())
    second = ingest_file(copy, lake)
    assert (first.status, second.status) == ("ingested", "unchanged")
    assert second.trace_id == first.trace_id
    parts = list((lake.root / "events").iterdir())
    assert parts == [lake.events_dir(first.trace_id)]
    assert [p.name for p in parts[0].iterdir()] == ["part-0.parquet"]


def _good_text() -> bytes:
    return (b'{"schemaVersion": 1, "traceEvents": [\n{"ph": "X", "cat": "cpu_op", "name": "aten::a", "pid": 1, '
            b'"tid": 1, "ts": 1.5, "dur": 2}], "traceName": "x"}')


BAD_INPUTS = {
    "not_json.json": (b"this is not json at all", "not JSON"),
    "not_json_brace.json": (b"{ this is not json }", "not valid JSON"),
    "truncated.json": (_good_text()[:70], "truncated JSON"),
    "truncated_inner.json.gz": (gzip.compress(_good_text()[:70]), "truncated JSON"),
    "truncated_gzip.json.gz": (gzip.compress(_good_text())[:-12], "truncated gzip"),
    "corrupt.json.gz": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage that is not deflate", "corrupt gzip"),
    "no_events.json": (b'{"schemaVersion": 1, "deviceProperties": []}', "without traceEvents"),
    "events_not_array.json": (b'{"schemaVersion": 1, "traceEvents": {"ph": "X"}}', "traceEvents is not an array"),
    "top_level_array.json": (b'[{"ph": "X", "ts": 1}]', "top level is an array"),
    "empty.json": (b"", "empty"),
    "empty_inside.json.gz": (gzip.compress(b"  \n"), "empty after decompression"),
}
# no trace at all: recorded as 'not_a_trace' (never analysed, not offered for retry); the others are broken traces
NOT_TRACES = {"not_json.json", "no_events.json", "top_level_array.json", "empty.json", "empty_inside.json.gz"}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_fails_with_a_clear_reason(write_kineto, lake, name):
    raw, phrase = BAD_INPUTS[name]
    path = write_kineto(name, raw=raw)
    res = ingest_file(path, lake)
    expected = "not_a_trace" if name in NOT_TRACES else "failed"
    assert res.status == expected
    assert str(path) in res.error
    assert phrase in res.error, res.error
    row = lake.catalogue_row(res.trace_id)
    assert row["status"] == expected and row["error"] == res.error and row["event_count"] == 0
    assert not (lake.root / "events").exists() or not any((lake.root / "events").iterdir())
    assert not (lake.root / "_staging").exists() or not any((lake.root / "_staging").iterdir())


def test_large_metadata_after_the_events(write_kineto, raw_number, lake):
    """More than the first tail window (64 KiB) of metadata after the array: the cut must still be exact."""
    R = raw_number
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": R(f"{10 + i}.001"),
               "dur": R("1"), "args": {"stream": 7, "grid": [1, 1, 1]}} for i in range(3000)]
    devices = [{"id": i, "name": f"GPU {i}", "props": [{"a": [i]}]} for i in range(4000)]  # ~150 KB
    res, ev, _ = _ingest(write_kineto("bigtail.json", events, meta={"schemaVersion": 1},
                                      trailer={"deviceProperties": devices, "traceName": "x"}), lake)
    assert res.row["source_event_count"] == 3000 and res.row["event_count"] == 3000
    assert json.loads(res.row["gpu_names_json"])[-1] == "GPU 3999"
    assert ev[("kernel", "k2999", "X")]["ts_ns"] == 2_999_000


def test_progress_reports_bytes_of_the_source_file(write_kineto, raw_number, lake):
    path = write_kineto("p.json.gz", _decoder_step(raw_number), meta={"schemaVersion": 1}, gz=True)
    calls: list[tuple[int, int]] = []
    res = ingest_file(path, lake, progress=lambda done, total: calls.append((done, total)))
    assert res.status == "ingested"
    size = path.stat().st_size
    assert calls[-1] == (size, size)
    assert all(total == size for _, total in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_source_pid_kept_for_every_shape_of_device_args(write_kineto, raw_number, lake):
    """The launching process replaces the source pid; ``_source_pid`` is added to args whatever their shape."""
    R = raw_number
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": HOST, "tid": HOST, "ts": R("1"),
         "dur": R("1"), "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "quoted_pid", "pid": 'GPU "0"', "tid": 7, "ts": R("2"), "dur": R("1"),
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "has_key", "pid": 0, "tid": 7, "ts": R("3"), "dur": R("1"),
         "args": {"_source_pid": "old", "device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "empty_args", "pid": 0, "tid": 7, "ts": R("4"), "dur": R("1"),
         "args": {}},
        {"ph": "X", "cat": "kernel", "name": "text_args", "pid": 0, "tid": 7, "ts": R("5"), "dur": R("1"),
         "args": {"note": "é \"q\" \\ }", "stream": 8}},
    ]
    _, ev, _ = _ingest(write_kineto("shapes.json", events, meta={"schemaVersion": 1}), lake)
    rows = {name: ev[("kernel", name, "X")] for name in ("quoted_pid", "has_key", "empty_args", "text_args")}
    assert {r["pid"] for r in rows.values()} == {str(HOST)}
    assert json.loads(rows["quoted_pid"]["args_json"]) == {
        "device": 0, "stream": 7, "correlation": 1, "_source_pid": 'GPU "0"'}
    assert json.loads(rows["has_key"]["args_json"]) == {"_source_pid": "0", "device": 0, "stream": 7}
    assert json.loads(rows["empty_args"]["args_json"]) == {"_source_pid": "0"}
    assert json.loads(rows["text_args"]["args_json"]) == {"note": 'é "q" \\ }', "stream": 8, "_source_pid": "0"}
    assert (rows["text_args"]["tid"], rows["empty_args"]["tid"]) == ("8", "7")


@pytest.mark.parametrize(("tail", "message"), [
    (b"xx", "corrupt gzip data (Not a gzipped file (b'xx'))"),  # igzip alone would call this a truncation
    (b"", None),
])
def test_gzip_faults_are_said_in_zlibs_words(write_kineto, lake, tail, message):
    """The gzip data is inflated by igzip (issue 27); a fault it finds is said as zlib says it, naming the file."""
    path = write_kineto("g.json.gz", raw=gzip.compress(_good_text()) + tail)
    res = ingest_file(path, lake)
    if message is None:
        assert res.status == "ingested" and res.row["event_count"] > 0
    else:
        assert res.status == "failed" and res.error == f"{path}: {message}"
