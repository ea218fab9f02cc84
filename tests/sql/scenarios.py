"""Tiny named scenario traces written straight into a lake partition, for hand-computed expected values.

``mixed_trace`` (one Kineto-like trace, GPU H100, so T_sys = 4510 ns by default), times in ns:

pid 100, thread 1 (all host events):
  prefill            user_annotation [1000, 20000)      decode_step#1 user_annotation [20000, 40000)
  model.forward      python_function [1100, 19000)
  aten::mm  ext 10   framework_op    [2000, 6000)   cublasSgemm library_api [2500, 5000)
      cudaLaunchKernel corr 1 [4000, 4500)  -> ampere_sgemm_128x64  ext 10  [8000, 13000)  dev 0
  aten::add ext 11   framework_op    [7000, 12000)
      cudaLaunchKernel corr 2 [7500, 7800)  -> elementwise_add   ext 999 (rewritten id) [13000, 14000)
      cudaLaunchKernel corr 3 [9000, 9300)  -> elementwise_add2  ext 11  [14000, 14500)
  aten::relu ext 12  framework_op    [15000, 17000)
      cudaLaunchKernel corr 4 [16000, 16200) -> relu_kernel ext 12 [15900, 16000)  (negative launch-to-start)
  cudaDeviceSynchronize runtime_api  [19000, 19500)
  vllm::decode_graph ext 20 framework_op [21000, 26000)
      cudaGraphLaunch corr 5 [22000, 23000) -> graph_k1 [24000, 25000), graph_k2 [25000, 26000), graph_k3 [26000, 27500)
  orphan_kernel corr 99 (no launch) [30000, 30500)
pid 200, thread 5 (correlation id 1 clashes with pid 100's):
  aten::copy_ ext 50 framework_op [4000, 4800)
      cudaLaunchKernel corr 1 [4100, 4400) -> copy_kernel ext 50 [5000, 5200) dev 1
Metadata (key 'taxbreak'): batch_size 1, output_tokens 2, steps prefill (1 token) and decode_step#1 (1 token).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.schemas import EVENT_SCHEMA

MIXED_ID = "a" * 64
NULL_ID = "b" * 64


def ev(trace_id: str, kind: str, name: str, ts: int, dur: int | None, pid: str, tid: str, **kw) -> dict:
    row = {f.name: None for f in EVENT_SCHEMA}
    row.update(trace_id=trace_id, source_format="kineto", kind=kind, name=name, ts_ns=ts, dur_ns=dur, pid=pid,
               tid=tid, phase="X")
    row.update(kw)
    return row


def kernel(trace_id: str, name: str, ts: int, dur: int, pid: str, corr: int | None, ext: int | None = None,
           device: int = 0, stream: int = 7) -> dict:
    return ev(trace_id, "kernel", name, ts, dur, pid, str(stream), device_id=device, stream_id=stream,
              correlation_id=corr, external_id=ext)


def write_trace(lake: Lake, trace_id: str, rows: list[dict], *, gpu: str, file_name: str, metadata: dict | None = None,
                host: str | None = "hostA") -> None:
    batch = pa.RecordBatch.from_pylist(rows, schema=EVENT_SCHEMA)
    info = TraceInfo(source_format="kineto", gpu_names=[gpu], host_name=host, metadata=metadata or {})
    lake.write_events(trace_id, [batch], info, file_name=file_name, source_path=f"/nonexistent/{file_name}",
                      file_bytes=1)


def mixed_rows(t: str = MIXED_ID) -> list[dict]:
    P, T = "100", "1"
    return [
        ev(t, "user_annotation", "prefill", 1000, 19000, P, T),
        ev(t, "user_annotation", "decode_step#1", 20000, 20000, P, T),
        ev(t, "python_function", "model.forward", 1100, 17900, P, T),
        ev(t, "framework_op", "aten::mm", 2000, 4000, P, T, external_id=10),
        ev(t, "library_api", "cublasSgemm", 2500, 2500, P, T),
        ev(t, "runtime_api", "cudaLaunchKernel", 4000, 500, P, T, correlation_id=1, external_id=10),
        kernel(t, "ampere_sgemm_128x64", 8000, 5000, P, 1, 10),
        ev(t, "framework_op", "aten::add", 7000, 5000, P, T, external_id=11),
        ev(t, "runtime_api", "cudaLaunchKernel", 7500, 300, P, T, correlation_id=2, external_id=11),
        kernel(t, "elementwise_add", 13000, 1000, P, 2, 999),
        ev(t, "runtime_api", "cudaLaunchKernel", 9000, 300, P, T, correlation_id=3, external_id=11),
        kernel(t, "elementwise_add2", 14000, 500, P, 3, 11),
        ev(t, "framework_op", "aten::relu", 15000, 2000, P, T, external_id=12),
        ev(t, "runtime_api", "cudaLaunchKernel", 16000, 200, P, T, correlation_id=4, external_id=12),
        kernel(t, "relu_kernel", 15900, 100, P, 4, 12),
        ev(t, "runtime_api", "cudaDeviceSynchronize", 19000, 500, P, T, correlation_id=50),
        ev(t, "framework_op", "vllm::decode_graph", 21000, 5000, P, T, external_id=20),
        ev(t, "graph_launch", "cudaGraphLaunch", 22000, 1000, P, T, correlation_id=5, external_id=20),
        kernel(t, "graph_k1", 24000, 1000, P, 5, 20),
        kernel(t, "graph_k2", 25000, 1000, P, 5, 20),
        kernel(t, "graph_k3", 26000, 1500, P, 5, 20),
        kernel(t, "orphan_kernel", 30000, 500, P, 99),
        ev(t, "framework_op", "aten::copy_", 4000, 800, "200", "5", external_id=50),
        ev(t, "runtime_api", "cudaLaunchKernel", 4100, 300, "200", "5", correlation_id=1, external_id=50),
        kernel(t, "copy_kernel", 5000, 200, "200", 1, 50, device=1),
    ]


MIXED_META = {
    "taxbreak_meta_version": 1, "model": "toy", "model_kind": "dense", "batch_size": 1, "prompt_len": 4,
    "output_tokens": 2, "kind": "generation", "synthetic": True,
    "steps": [{"name": "prefill", "phase": "prefill", "tokens": 1},
              {"name": "decode_step#1", "phase": "decode", "tokens": 1}],
}


def build_mixed(root: Path) -> Lake:
    lake = Lake(root)
    write_trace(lake, MIXED_ID, mixed_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="mixed.json",
                metadata={"taxbreak": MIXED_META})
    return lake


NSYS_ID = "c" * 64
FUSION_ID = "d" * 64


def nsys_rows(t: str = NSYS_ID) -> list[dict]:
    """Nsight-like: NVTX op ranges (``aten::mm, op_id = 4``), no library ranges, so I_lib comes from names.

    pid 300 thread 301: NVTX 'aten::linear, op_id = 3' [1000, 9000) > NVTX 'aten::mm, op_id = 4' [2000, 5000)
      cudaLaunchKernel corr 7 [3000, 3400) -> sm90_xmma_gemm_bf16 [6000, 7000)   (cublas_xmma: I_lib 1)
      cudaLaunchKernel corr 8 [6000, 6300) -> nvjet_tst_128 [8000, 8500)         (nvjet: I_lib 0; op aten::linear)
    cudaLaunchKernel corr 9 [9500, 9600) outside every op -> my_triton_kernel [9700, 9800)   (orphan: no op)
    GPU NVIDIA H200: T_sys 4300 ns by default."""
    P, T = "300", "301"
    rows = [
        ev(t, "nvtx_range", "aten::linear, op_id = 3", 1000, 8000, P, T),
        ev(t, "nvtx_range", "aten::mm, op_id = 4", 2000, 3000, P, T),
        ev(t, "runtime_api", "cudaLaunchKernel", 3000, 400, P, T, correlation_id=7),
        kernel(t, "sm90_xmma_gemm_bf16", 6000, 1000, P, 7),
        ev(t, "runtime_api", "cudaLaunchKernel", 6000, 300, P, T, correlation_id=8),
        kernel(t, "nvjet_tst_128", 8000, 500, P, 8),
        ev(t, "runtime_api", "cudaLaunchKernel", 9500, 100, P, T, correlation_id=9),
        kernel(t, "my_triton_kernel", 9700, 100, P, 9),
    ]
    for r in rows:
        r["source_format"] = "nsys-sqlite"
    return rows


def null_kernel_rows(t: str = NULL_ID) -> list[dict]:
    """25 launches of an empty kernel, 20 warm-up (9000 ns launch-to-start) then 4000, 4100, 4200, 4300, 4400."""
    rows = [ev(t, "framework_op", "taxbreak::null_kernel_loop", 0, 300_000, "9", "9")]
    deltas = [9000] * 20 + [4000, 4100, 4200, 4300, 4400]
    for i, d in enumerate(deltas):
        ts = 1000 + i * 10_000
        rows.append(ev(t, "runtime_api", "cudaLaunchKernel", ts, 500, "9", "9", correlation_id=i + 1))
        rows.append(kernel(t, "null_kernel", ts + d, 1000, "9", i + 1))
        rows.append(ev(t, "runtime_api", "cudaDeviceSynchronize", ts + 600, 6000, "9", "9", correlation_id=1000 + i))
    return rows


def fusion_rows(t: str = FUSION_ID) -> list[dict]:
    """Kernels A B C A B C, a cudaDeviceSynchronize, then A B C D (one process, launch order = kernel order)."""
    names = ["A", "B", "C", "A", "B", "C", "A", "B", "C", "D"]
    rows = [ev(t, "runtime_api", "cudaDeviceSynchronize", 6 * 1000 + 50, 100, "1", "1", correlation_id=500)]
    for i, name in enumerate(names):
        ts = i * 1000 + (500 if i >= 6 else 0)
        rows.append(ev(t, "runtime_api", "cudaLaunchKernel", ts, 100, "1", "1", correlation_id=i + 1))
        rows.append(kernel(t, name, ts + 200, 100, "1", i + 1))
    return rows


# A batch-size sweep of three traces (GPU H100: T_sys 4510 ns by default), one op, one launch, one kernel each:
#   aten::mm ext 10 framework_op [1000, 2000)
#       cudaLaunchKernel corr 1 [1490, 1690)  -> my_kernel [1490 + q, 1490 + q + K)
# t_dispatch 490, no Python op, I_lib 0: T_Orchestrate = 490 + 4510 = 5000, T_DeviceActive = K, TKLQT = q.
#   batch 1: K 1000, q 2000 -> HDBI 1000 / 6000
#   batch 2: K 3000, q 2200 -> HDBI 3000 / 8000 = 0.375
#   batch 4: K 7000, q 6000 -> HDBI 7000 / 12000 = 0.5833
# Baseline TKLQT = median(2000, 2200) = 2100, threshold 1.25 x 2100 = 2625: batch 4 (6000 > 2625) is the TKLQT
# transition, and the first batch with HDBI >= 0.5 too.  HDBI crosses 0.5 between 2 and 4 at fraction
# (0.5 - 0.375) / (7/12 - 0.375) = 0.6 of the way in log2: batch 2 ** 1.6.
SWEEP_IDS = {1: "e1" * 32, 2: "e2" * 32, 4: "e4" * 32}
SWEEP_POINTS = {1: (1000, 2000), 2: (3000, 2200), 4: (7000, 6000)}  # batch: (kernel duration K, TKLQT q)
LONE_ID = "f" * 64  # the same model at another sequence length and one batch size only: no sweep


def sweep_point_rows(t: str, kernel_ns: int, tklqt_ns: int) -> list[dict]:
    P, T = "100", "1"
    return [
        ev(t, "framework_op", "aten::mm", 1000, 1000, P, T, external_id=10),
        ev(t, "runtime_api", "cudaLaunchKernel", 1490, 200, P, T, correlation_id=1, external_id=10),
        kernel(t, "my_kernel", 1490 + tklqt_ns, kernel_ns, P, 1, 10),
    ]


def sweep_meta(batch: int) -> dict:
    return {"taxbreak_meta_version": 1, "model": "toy", "model_kind": "dense", "output_tokens": 1,
            "kind": "sweep_point", "sweep": {"name": "toy_sweep", "batch_size": batch, "seq_len": 4, "phase": "decode"}}


def build_sweep(root: Path) -> Lake:
    lake = Lake(root)
    for batch, t in SWEEP_IDS.items():
        k_ns, q_ns = SWEEP_POINTS[batch]
        write_trace(lake, t, sweep_point_rows(t, k_ns, q_ns), gpu="NVIDIA H100 80GB HBM3",
                    file_name=f"toy_bs{batch}.json", metadata={"taxbreak": sweep_meta(batch)})
    write_trace(lake, LONE_ID, sweep_point_rows(LONE_ID, 1000, 2000), gpu="NVIDIA H100 80GB HBM3",
                file_name="toy_lone.json", metadata={"taxbreak": {
                    "taxbreak_meta_version": 1, "model": "toy", "batch_size": 8, "prompt_len": 16, "output_tokens": 1}})
    return lake
