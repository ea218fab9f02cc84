"""Kineto adapter on the real public traces in ../shared/traces/public (counts from SOURCES.md)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pytest
from public_data import available

from taxbreak.ingest import Lake, ingest_file

QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
OLD_2021 = "kineto/worker0.1623143089861.pt.trace.json.gz"
MI250 = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CUPTI_PROFILER = "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz"
NS_RESOLUTION = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
TRITON = "hta/triton_example/triton_example.json.gz"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, public_traces) -> tuple[Lake, dict[str, object]]:
    """Every public Kineto file ingested once into one lake (module scope: the suite stays fast)."""
    lake = Lake(tmp_path_factory.mktemp("public") / "lake")
    results = {}
    for path in sorted(public_traces.rglob("*.json*")):
        if path.name.endswith((".json", ".json.gz")):
            results[path.relative_to(public_traces).as_posix()] = ingest_file(path, lake)
    return lake, results


def _load_source(public: Path, rel: str) -> dict:
    with gzip.open(public / rel, "rb") as fh:
        return json.loads(fh.read(), parse_float=Decimal)


def _counts(lake: Lake, res, column: str) -> Counter:
    table = lake.read_events(res.trace_id)
    return Counter(pc.fill_null(table.column(column), "<null>").to_pylist())


def test_every_public_kineto_file_ingests_and_accounts_for_every_event(ingested, public_traces):
    lake, results = ingested
    # every Kineto file of the folder (15 in the full collection, 10 vendored in tests/data/public)
    assert len(results) == sum(1 for p in public_traces.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    assert len(results) >= 10
    for rel, res in results.items():
        assert res.status == "ingested", f"{rel}: {res.error}"
        doc = _load_source(public_traces, rel)
        skipped = json.loads(res.row["skipped_counts_json"])
        assert res.row["event_count"] + sum(skipped.values()) == len(doc["traceEvents"]) == res.row[
            "source_event_count"], rel
        assert res.row["source_format"] == "kineto"
        assert json.loads(res.row["gpu_names_json"]) == [d["name"] for d in doc["deviceProperties"]], rel
        assert lake.read_events(res.trace_id).num_rows == res.row["event_count"]
        # kernels recounted from the raw JSON: every 'kernel' (or 2021 'Kernel') event is stored as a kernel
        raw_kernels = sum(1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "Kernel"))
        assert json.loads(res.row["event_counts_json"]).get("kernel", 0) == raw_kernels, rel


def test_qwen_h100_counts(ingested):
    lake, results = ingested
    res = results[QWEN_H100]
    cats = _counts(lake, res, "category")
    assert (cats["kernel"], cats["cuda_runtime"], cats["cuda_driver"]) == (1465, 1921, 1)
    assert (cats["python_function"], cats["cpu_op"], cats["ac2g"], cats["gpu_memset"]) == (4262, 4186, 3629, 241)
    kinds = json.loads(res.row["event_counts_json"])
    assert (kinds["kernel"], kinds["runtime_api"], kinds["driver_api"]) == (1465, 1921, 1)
    assert (kinds["python_function"], kinds["framework_op"], kinds["flow"]) == (4262, 4186, 3629)
    assert kinds["instant"] == 2450 + 2  # cpu_instant_event + the two trace-window instants
    table = lake.read_events(res.trace_id)
    kernels = table.filter(pc.equal(table.column("kind"), "kernel"))
    # device-side events carry the host process that launched them, and their stream as tid
    assert set(kernels.column("pid").to_pylist()) == {"25286"}
    assert set(kernels.column("tid").to_pylist()) == {"7"}
    assert {json.loads(a)["_source_pid"] for a in kernels.column("args_json").to_pylist()} == {"0"}
    assert res.row["start_epoch_ns"] == 1751410836000000000 + 1428625731456483
    assert json.loads(res.row["tool_versions_json"]) == {
        "cuda_driver_version": 12090, "cuda_runtime_version": 12040, "cupti_version": 22, "schemaVersion": 1}


def test_alexnet_counts(ingested):
    lake, results = ingested
    cats = _counts(lake, results[ALEXNET], "category")
    assert (cats["kernel"], cats["cuda_runtime"], cats["cpu_op"], cats["ac2g"]) == (79, 361, 359, 500)
    assert (cats["cuda_sync"], cats["gpu_memcpy"], cats["gpu_memset"]) == (41, 16, 3)


def test_old_2021_format(ingested):
    lake, results = ingested
    res = results[OLD_2021]
    cats = _counts(lake, res, "category")
    assert (cats["Kernel"], cats["Runtime"], cats["Operator"], cats["async"]) == (8772, 11923, 23646, 18192)
    kinds = json.loads(res.row["event_counts_json"])
    assert (kinds["kernel"], kinds["runtime_api"], kinds["framework_op"], kinds["flow"]) == (8772, 11923, 23646, 18192)
    assert (kinds["memset"], kinds["memcpy"]) == (312, 12)
    table = lake.read_events(res.trace_id)
    memcpy = table.filter(pc.equal(table.column("kind"), "memcpy")).to_pylist()
    assert {r["tid"] for r in memcpy} == {"7"}  # 'stream 7' in the source
    assert all(r["external_id"] is not None for r in memcpy)  # lower-case 'external id' in 2021 traces
    assert res.row["start_epoch_ns"] == 1623142623460016000  # epoch µs, no baseTimeNanoseconds


def test_mi250_rocm(ingested):
    lake, results = ingested
    res = results[MI250]
    kinds = json.loads(res.row["event_counts_json"])
    assert (kinds["kernel"], kinds["runtime_api"], kinds["framework_op"], kinds["memcpy"]) == (14, 21, 70, 2)
    table = lake.read_events(res.trace_id)
    runtime = table.filter(pc.equal(table.column("kind"), "runtime_api"))
    assert Counter(runtime.column("name").to_pylist())["hipLaunchKernel"] == 12
    kernels = table.filter(pc.equal(table.column("kind"), "kernel"))
    assert set(kernels.column("pid").to_pylist()) == {"597913"}
    assert json.loads(res.row["gpu_names_json"]) == ["AMD Radeon Graphics"] * 4


def test_cupti_range_profiler_trace_has_ranges_and_no_kernels(ingested):
    _, results = ingested
    kinds = json.loads(results[CUPTI_PROFILER].row["event_counts_json"])
    assert kinds["profiler_range"] == 77
    assert "kernel" not in kinds
    assert kinds["runtime_api"] == 1862


def test_triton_driver_launch(ingested):
    lake, results = ingested
    table = lake.read_events(results[TRITON].trace_id)
    rows = table.to_pylist()
    (driver,) = [r for r in rows if r["kind"] == "driver_api"]
    (kernel,) = [r for r in rows if r["kind"] == "kernel"]
    assert driver["name"] == "cuLaunchKernel"
    assert (kernel["pid"], kernel["correlation_id"]) == (driver["pid"], driver["correlation_id"])


# A trace built here in the ns-resolution file's form (the real one, 1.1 MB, is not vendored: tests/data/SOURCES.md):
# Kineto JSON whose timestamps are epoch microseconds with three decimals, where float64 keeps only quarter
# microseconds.  It carries the real file's origin and ConvolutionBackward0 times, so the hand arithmetic below holds
# for both, and one of each event form the real file has (metadata, instant, flow start/end, X of every category).
NS_GENERATED = "generated/ns_resolution.pt.trace.json.gz"
NS_GENERATED_TEXT = """{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34079637504,
                        "computeMajor": 7, "computeMinor": 0, "numSms": 80}],
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "traceEvents": [
  {"name": "process_name", "ph": "M", "ts": 1712195495501688.612, "pid": 1102, "tid": 0, "args": {"name": "python"}},
  {"name": "thread_name", "ph": "M", "ts": 1712195495501688.612, "pid": 1102, "tid": 1262,
   "args": {"name": "thread 1262 (pt_autograd_0)"}},
  {"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1102, "tid": 1262,
   "ts": 1712195495520882.922, "dur": 22.545, "args": {"External id": 2100}},
  {"ph": "s", "id": 13, "pid": 1102, "tid": 1102, "ts": 1712195495507783.055, "cat": "fwdbwd", "name": "fwdbwd"},
  {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: ConvolutionBackward0", "pid": 1102,
   "tid": 1262, "ts": 1712195495521130.028, "dur": 141.489, "args": {"External id": 2136}},
  {"ph": "X", "cat": "cpu_op", "name": "ConvolutionBackward0", "pid": 1102, "tid": 1262,
   "ts": 1712195495521131.125, "dur": 135.162, "args": {"External id": 2137}},
  {"ph": "f", "id": 13, "pid": 1102, "tid": 1262, "ts": 1712195495521131.125, "cat": "fwdbwd", "name": "fwdbwd",
   "bp": "e"},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1102, "tid": 1262,
   "ts": 1712195495521140.140, "dur": 41.768, "args": {"External id": 2137, "cbid": 211, "correlation": 135071}},
  {"ph": "s", "id": 135071, "pid": 1102, "tid": 1262, "ts": 1712195495521140.140, "cat": "ac2g", "name": "ac2g"},
  {"ph": "X", "cat": "kernel", "name": "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6>(int, int, int)",
   "pid": 0, "tid": 7, "ts": 1712195495521182.988, "dur": 4.928,
   "args": {"External id": 2137, "device": 0, "context": 1, "stream": 7, "correlation": 135071,
            "grid": [4, 106, 1], "block": [128, 1, 1]}},
  {"ph": "f", "id": 135071, "pid": 0, "tid": 7, "ts": 1712195495521182.988, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
   "ts": 1712195495521190.288, "dur": 1.280, "args": {"device": 0, "stream": 7, "correlation": 135139, "bytes": 256}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1712195495533164.141,
   "dur": 15.776, "args": {"device": 0, "stream": 7, "correlation": 139861, "bytes": 12845056}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "Optimizer.step#SGD.step", "pid": 0, "tid": 7,
   "ts": 1712195495521182.001, "dur": 1111.035, "args": {"External id": 21222}},
  {"ph": "X", "cat": "Trace", "ts": 1712195495406752.797, "dur": 578888.534, "pid": "Spans",
   "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
  {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
   "tid": "Trace PyTorch Profiler", "ts": 1712195495406752.797}
  ],
  "traceName": "rank-0.pt.trace.json",
  "displayTimeUnit": "ns"
}
"""


@pytest.mark.parametrize("rel", available([NS_RESOLUTION]) + [NS_GENERATED])
def test_ns_resolution_trace_is_exact(rel, public_traces, tmp_path, request):
    if rel == NS_GENERATED:
        folder = tmp_path / "in"
        (folder / rel).parent.mkdir(parents=True)
        (folder / rel).write_bytes(gzip.compress(NS_GENERATED_TEXT.encode()))
        lake = Lake(tmp_path / "lake")
        res = ingest_file(folder / rel, lake)
        assert res.status == "ingested", res.error
        # the file needs the exact reading: float64 would put the origin 47 ns early (.797 us -> .75 us)
        assert float("1712195495406752.797") == 1712195495406752.75
        # the cuDNN kernel: 521182.988 - 406752.797 = 114430.191 us after the origin, 4.928 us long
        (kernel,) = [r for r in lake.read_events(res.trace_id).to_pylist() if r["kind"] == "kernel"]
        assert (kernel["ts_ns"], kernel["dur_ns"], kernel["correlation_id"]) == (114_430_191, 4_928, 135071)
    else:
        lake, results = request.getfixturevalue("ingested")
        folder, res = public_traces, results[rel]
    table = lake.read_events(res.trace_id)
    # by hand: origin = the earliest timed event, 1712195495406752.797 µs; ConvolutionBackward0 starts at
    # 1712195495521131.125 µs -> 521131125 - 406752797 = 114378328 ns after it, and lasts 135.162 µs.
    assert res.row["start_epoch_ns"] == 1712195495406752797
    conv = [r for r in table.to_pylist() if r["name"] == "ConvolutionBackward0" and r["ts_ns"] == 114_378_328]
    assert len(conv) == 1 and conv[0]["dur_ns"] == 135_162
    # and every timestamp of the file, computed from its decimal text
    doc = _load_source(folder, rel)
    origin = min(Decimal(e["ts"]) for e in doc["traceEvents"] if "ts" in e and e.get("ph") != "M")
    expected = sorted(int((Decimal(e["ts"]) - origin) * 1000) for e in doc["traceEvents"] if "ts" in e)
    assert sorted(table.column("ts_ns").to_pylist()) == expected
    expected_dur = sorted(int(Decimal(e["dur"]) * 1000) for e in doc["traceEvents"] if "dur" in e)
    assert sorted(d for d in table.column("dur_ns").to_pylist() if d is not None) == expected_dur
