"""Write a synthetic decode-like trace of N kernels straight into a lake partition (common event schema v1).

Per kernel i: a framework op ``aten::<op>`` (External id i+1) enclosing a ``cudaLaunchKernel`` (correlation id
i+1), the kernel 6 us after its launch; every two kernels share an outer ``aten::linear``; every ten kernels a
``python_function``; every 1000 kernels a ``decode_step#n`` annotation ending with a ``cudaDeviceSynchronize``.
Kernel names repeat a 20-kernel "layer", so fusion chains are deterministic.  The trace carries taxbreak
metadata (one output token per step).

    python bench/gen_synthetic_lake.py LAKE_DIR [--kernels 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.schemas import EVENT_SCHEMA

LAYER = [
    "sm90_xmma_gemm_bf16bf16_bf16f32", "vectorized_elementwise_kernel", "reduce_kernel", "rms_norm_kernel",
    "nvjet_tst_128x64", "rotary_embedding_kernel", "flash_fwd_kernel", "elementwise_kernel_add",
    "cutlass_80_tensorop_gemm", "silu_and_mul_kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", "reduce_kernel",
    "vectorized_elementwise_kernel", "rms_norm_kernel", "ampere_bf16_s16816gemm", "softmax_warp_forward",
    "index_select_kernel", "cat_kernel", "elementwise_kernel_mul", "copy_kernel",
]
OPS = ["aten::mm", "aten::add", "aten::sum", "_C::rms_norm", "aten::mm", "_C::rotary_embedding",
       "vllm::unified_attention", "aten::add", "aten::mm", "_C::silu_and_mul", "aten::mm", "aten::sum", "aten::mul",
       "_C::rms_norm", "aten::mm", "aten::softmax", "aten::index_select", "aten::cat", "aten::mul", "aten::copy_"]
STEP = 1000
PID = "1000"


def _table(cols: dict[str, object], n: int) -> pa.Table:
    arrays = []
    for f in EVENT_SCHEMA:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(v, (str, int)):
            arrays.append(pa.array(np.full(n, v) if isinstance(v, int) else [v] * n, f.type))
        else:
            arrays.append(pa.array(v, f.type))
    return pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)


def batches(trace_id: str, n: int) -> list[pa.RecordBatch]:
    i = np.arange(n, dtype=np.int64)
    t = 100_000 + i * 5000 + (i // STEP) * 10_000  # launch call starts
    names = np.array(LAYER, dtype=object)[i % len(LAYER)]
    ops = np.array(OPS, dtype=object)[i % len(OPS)]
    base = {"trace_id": trace_id, "source_format": "kineto", "phase": "X", "pid": PID}
    out = []
    # framework ops (inner) and launches and kernels
    out.append(_table({**base, "kind": "framework_op", "category": "cpu_op", "name": ops, "ts_ns": t - 800,
                                 "dur_ns": np.full(n, 2300), "tid": PID, "external_id": i + 1}, n))
    out.append(_table({**base, "kind": "runtime_api", "category": "cuda_runtime", "name": "cudaLaunchKernel",
                                 "ts_ns": t, "dur_ns": np.full(n, 1200), "tid": PID, "correlation_id": i + 1,
                                 "external_id": i + 1}, n))
    jitter = (i * 7919) % 900
    out.append(_table({**base, "kind": "kernel", "category": "kernel", "name": names,
                                 "ts_ns": t + 6000 + jitter,
                                 "dur_ns": np.full(n, 3000) + (i % 5) * 100, "tid": "7", "device_id": 0,
                                 "stream_id": 7, "correlation_id": i + 1, "external_id": i + 1}, n))
    # outer ops every two kernels
    j = np.arange(n // 2, dtype=np.int64)
    t0, t1 = t[2 * j], t[2 * j + 1]
    out.append(_table({**base, "kind": "framework_op", "category": "cpu_op", "name": "aten::linear",
                                 "ts_ns": t0 - 1000, "dur_ns": (t1 + 2000) - (t0 - 1000), "tid": PID,
                                 "external_id": 2 * n + j}, len(j)))
    # python functions every ten kernels (within a step)
    m = np.arange(n // 10, dtype=np.int64)
    a, b = t[10 * m], t[10 * m + 9]
    out.append(_table({**base, "kind": "python_function", "category": "python_function",
                                 "name": "model.py(42): forward", "ts_ns": a - 2000, "dur_ns": (b + 3000) - (a - 2000),
                                 "tid": PID}, len(m)))
    # steps and a synchronize at the end of each
    s = np.arange(n // STEP, dtype=np.int64)
    first, last = t[STEP * s], t[STEP * s + STEP - 1]
    out.append(_table({**base, "kind": "user_annotation", "category": "user_annotation",
                                 "name": np.array([f"decode_step#{k + 1}" for k in s], dtype=object),
                                 "ts_ns": first - 2500, "dur_ns": (last + 3500) - (first - 2500), "tid": PID}, len(s)))
    out.append(_table({**base, "kind": "runtime_api", "category": "cuda_runtime",
                                 "name": "cudaDeviceSynchronize", "ts_ns": last + 3200, "dur_ns": np.full(len(s), 200),
                                 "tid": PID, "correlation_id": 3 * n + s}, len(s)))
    return [b for tb in out for b in tb.to_batches(max_chunksize=1 << 20)]


def write_lake(lake_dir: str | Path, n_kernels: int) -> tuple[str, int]:
    trace_id = hashlib.sha256(f"synthetic-{n_kernels}".encode()).hexdigest()
    steps = n_kernels // STEP
    meta = {"taxbreak_meta_version": 1, "model": "synthetic", "model_kind": "dense", "batch_size": 1,
            "output_tokens": steps, "synthetic": True, "kind": "generation",
            "steps": [{"name": f"decode_step#{k + 1}", "phase": "decode", "tokens": 1} for k in range(steps)]}
    info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA H100 80GB HBM3"], host_name="synthetic",
                     metadata={"taxbreak": meta})
    row = Lake(lake_dir).write_events(trace_id, batches(trace_id, n_kernels), info,
                                      file_name=f"synthetic_{n_kernels}.json", source_path="", file_bytes=0)
    return trace_id, row["event_count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lake", help="lake root to write into")
    ap.add_argument("--kernels", type=int, default=1_000_000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace_id, events = write_lake(args.lake, args.kernels)
    took = time.perf_counter() - t0
    print(f"wrote trace {trace_id[:16]}: {args.kernels:,} kernels, {events:,} events in {took:.1f} s")


if __name__ == "__main__":
    main()
