"""Write a realistic synthetic Kineto trace (decoder-style greedy generation on one GPU), streaming.

Per decoder op: a ``python_function`` frame, a ``cpu_op`` (aten::linear / aten::mul / ...) with the shape
arguments torch.profiler records, a ``cuda_runtime`` launch, the ``ac2g`` flow pair and the ``kernel`` with
its launch geometry; one ``cuda_runtime`` sync per step.  Timestamps are µs with 3 decimals (ns resolution),
relative to ``baseTimeNanoseconds`` as current torch writes them.  Nothing is built in memory: the file is
written event by event until it reaches the requested size.

    python bench/gen_kineto.py OUT.json --size-mib 512
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HOST_PID = 41207
HOST_TID = 41207
STREAM = 7

_HEAD = """{
  "schemaVersion": 1,
  "deviceProperties": [
    {
      "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929347584,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132
    }
  ],
  "cupti_version": 22,
  "cuda_runtime_version": 12040,
  "cuda_driver_version": 12090,
  "traceEvents": [
  {
    "name": "process_name", "ph": "M", "ts": 1000.000, "pid": %(pid)d, "tid": 0,
    "args": {
      "name": "python3"
    }
  },
  {
    "name": "process_name", "ph": "M", "ts": 1000.000, "pid": 0, "tid": 0,
    "args": {
      "name": "python3"
    }
  },
  {
    "name": "thread_name", "ph": "M", "ts": 1000.000, "pid": %(pid)d, "tid": %(tid)d,
    "args": {
      "name": "thread %(tid)d (python3)"
    }
  }"""

_TAIL = """
  ],
  "traceName": "synthetic_decoder.pt.trace.json",
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1751410836000000000
}
"""

_PY = """,
  {
    "ph": "X", "cat": "python_function", "name": "%(py)s", "pid": %(pid)d, "tid": %(tid)d,
    "ts": %(ts).3f, "dur": %(dur).3f,
    "args": {
      "Python parent id": %(ppid)d, "Python id": %(pyid)d, "Ev Idx": %(ev)d
    }
  }"""

_OP = (
    """,
  {
    "ph": "X", "cat": "cpu_op", "name": "%(op)s", "pid": %(pid)d, "tid": %(tid)d,
    "ts": %(ts).3f, "dur": %(dur).3f,
    "args": {
      "External id": %(ext)d,"Record function id": 0, "Concrete Inputs": ["", "", ""], """
    """"Input type": ["c10::BFloat16", "c10::BFloat16", ""], "Input Strides": [[%(k)d, 1], [%(k)d, 1], []], """
    """"Input Dims": [[%(m)d, %(k)d], [%(n)d, %(k)d], []], "Ev Idx": %(ev)d
    }
  }"""
)

_LAUNCH = """,
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": %(pid)d, "tid": %(tid)d,
    "ts": %(ts).3f, "dur": %(dur).3f,
    "args": {
      "External id": %(ext)d, "cbid": 211, "correlation": %(corr)d
    }
  },
  {
    "ph": "s", "id": %(corr)d, "pid": %(pid)d, "tid": %(tid)d, "ts": %(ts).3f,
    "cat": "ac2g", "name": "ac2g"
  }"""

_KERNEL = (
    """,
  {
    "ph": "X", "cat": "kernel", "name": "%(kname)s", "pid": 0, "tid": %(stream)d,
    "ts": %(ts).3f, "dur": %(dur).3f,
    "args": {
      "External id": %(ext)d, "queued": 0, "device": 0, "context": 1, "stream": %(stream)d, """
    """"correlation": %(corr)d, "registers per thread": %(regs)d, "shared memory": %(smem)d, """
    """"blocks per SM": %(bpsm).6f, "warps per SM": %(wpsm).6f, "grid": [%(gx)d, %(gy)d, 1], """
    """"block": [%(bx)d, 1, 1], "est. achieved occupancy %%": %(occ)d
    }
  },
  {
    "ph": "f", "id": %(corr)d, "pid": 0, "tid": %(stream)d, "ts": %(ts).3f,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }"""
)

_SYNC = """,
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": %(pid)d, "tid": %(tid)d,
    "ts": %(ts).3f, "dur": %(dur).3f,
    "args": {
      "cbid": 165, "correlation": %(corr)d
    }
  }"""

_OPS = [
    ("aten::linear", "torch/nn/modules/linear.py(125): forward",
     "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"),
    ("aten::mul", "transformers/models/qwen2/modeling_qwen2.py(61): forward",
     "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >"
     "(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
     "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
     "at::native::gpu_kernel_impl_nocast<>::{lambda(int)#1})"),
    ("aten::_scaled_dot_product_flash_attention", "torch/nn/functional.py(5412): scaled_dot_product_attention",
     "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
     "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"),
    ("aten::add", "transformers/models/qwen2/modeling_qwen2.py(262): forward",
     "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<c10::BFloat16>, "
     "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<c10::BFloat16>, std::array<char*, 2ul>)"),
]


def generate(path: Path, size_bytes: int, seed: int = 7) -> int:
    """Write the trace to ``path``; return the number of traceEvents elements written."""
    rng = random.Random(seed)
    t_us = 1428625731456.483  # µs since baseTimeNanoseconds, like current torch exports
    gpu_us = t_us
    ext = corr = 1
    ev = 0
    events = 3
    written = 0
    with open(path, "w", encoding="ascii", buffering=1 << 22) as out:
        head = _HEAD % {"pid": HOST_PID, "tid": HOST_TID}
        out.write(head)
        written += len(head)
        step = 0
        while written < size_bytes:
            for i in range(64):  # one decode step: 64 ops, then a sync
                op, py, kname = _OPS[i % len(_OPS)]
                m, n, k = 1, 896 * (1 + i % 4), 896
                base = {"pid": HOST_PID, "tid": HOST_TID, "ev": ev}
                t_op = t_us + rng.randint(1000, 9000) / 1000
                launch_ts = t_op + rng.randint(3000, 25000) / 1000
                launch_dur = rng.randint(2500, 9000) / 1000
                op_dur = launch_ts + launch_dur - t_op + rng.randint(500, 3000) / 1000
                py_dur = op_dur + rng.randint(2000, 6000) / 1000
                gpu_us = max(gpu_us, launch_ts + launch_dur) + rng.randint(500, 4000) / 1000
                k_dur = rng.randint(1500, 60000) / 1000
                chunk = (
                    _PY % {**base, "py": py, "ts": t_us, "dur": py_dur, "ppid": ev, "pyid": ev + 1}
                    + _OP % {**base, "op": op, "ts": t_op, "dur": op_dur, "ext": ext, "m": m, "n": n, "k": k}
                    + _LAUNCH % {**base, "ts": launch_ts, "dur": launch_dur, "ext": ext, "corr": corr}
                    + _KERNEL % {
                        "kname": kname, "stream": STREAM, "ts": gpu_us, "dur": k_dur, "ext": ext, "corr": corr,
                        "regs": 32 + 8 * (i % 8), "smem": 1024 * (i % 48), "bpsm": rng.random() * 8,
                        "wpsm": rng.random() * 64, "gx": 1 + i * 7, "gy": 1 + i % 3, "bx": 128 * (1 + i % 4),
                        "occ": rng.randint(10, 100),
                    }
                )
                gpu_us += k_dur
                out.write(chunk)
                written += len(chunk)
                events += 6
                ext += 1
                corr += 1
                ev += 2
                t_us += py_dur + rng.randint(1000, 4000) / 1000
            sync = _SYNC % {"pid": HOST_PID, "tid": HOST_TID, "ts": t_us, "dur": max(1.0, gpu_us - t_us),
                            "corr": corr}
            out.write(sync)
            written += len(sync)
            events += 1
            corr += 1
            t_us = max(t_us, gpu_us) + 5.125
            step += 1
        out.write(_TAIL)
    return events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output .json file")
    ap.add_argument("--size-mib", type=float, default=512, help="approximate size of the JSON (MiB)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = generate(args.out, int(args.size_mib * (1 << 20)))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:,.1f} MB, {n:,} events)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
