"""The null-kernel floor T_sys (METHOD.md §4): empty ``<<<1,1>>>`` launches, each followed by a device sync.

The kernel is ``torch.cuda._sleep(0)``: PyTorch's ``spin_kernel<<<1, 1, 0, stream>>>(0)`` (at::cuda::sleep), one
``cudaLaunchKernel`` with no tensor allocation, no dispatcher op and no argument set-up beyond one int64; with
0 cycles it returns at once, so it is the cheapest single-kernel launch torch exposes. The trace carries 20
warm-up launches inside ``record_function("null_kernel_warmup")`` and 50 measured ones inside
``record_function("null_kernel_measure")``; the pipeline computes ``T_sys = mean(k.ts - l.ts)`` over the measured
ones and recognises the trace by its sidecar (``kind: "null_kernel"``) and the file name prefix ``null_kernel``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from taxbreak.capture.profile import CaptureError, base_meta, require_torch, write_meta

WARMUP_LAUNCHES = 20
MEASURED_LAUNCHES = 50
KERNEL_DESCRIPTION = "torch.cuda._sleep(0): spin_kernel<<<1,1>>>, one cudaLaunchKernel, then torch.cuda.synchronize()"


def default_name(gpu_name: str, host: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in f"{gpu_name}_{host}").strip("-")
    return f"null_kernel_{safe}.json.gz"


def capture_null_kernel(
    out: str | os.PathLike[str] | None = None,
    *,
    out_dir: str | os.PathLike[str] = ".",
    warmup: int = WARMUP_LAUNCHES,
    measured: int = MEASURED_LAUNCHES,
    device_index: int = 0,
) -> Path:
    """Profile the null-kernel launches on GPU ``device_index``; raises CaptureError without CUDA."""
    torch = require_torch()
    if not torch.cuda.is_available():
        raise CaptureError(
            "the null-kernel floor needs a CUDA GPU and torch sees none; without a measured floor the "
            "pipeline uses its documented default table (H100 4.51 us, H200 4.30 us, other 4.50 us)"
        )
    from torch.profiler import ProfilerActivity, profile, record_function

    dev = torch.device("cuda", device_index)
    torch.cuda.set_device(dev)
    gpu_name = torch.cuda.get_device_name(dev)
    meta = base_meta("null_kernel", device=str(dev), gpu_name=gpu_name)
    path = Path(out) if out is not None else Path(out_dir) / default_name(gpu_name, meta["host_name"])
    path.parent.mkdir(parents=True, exist_ok=True)

    def launches(n: int) -> None:
        for _ in range(n):
            torch.cuda._sleep(0)
            torch.cuda.synchronize()

    launches(5)  # CUDA context and module loading happen here, outside the profiler
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        with record_function("null_kernel_warmup"):
            launches(warmup)
        with record_function("null_kernel_measure"):
            launches(measured)
    prof.export_chrome_trace(str(path))
    null_kernel: dict[str, Any] = {
        "kernel": KERNEL_DESCRIPTION,
        "warmup_launches": warmup,
        "measured_launches": measured,
        "warmup_marker": "null_kernel_warmup",
        "measure_marker": "null_kernel_measure",
    }
    meta.update(model="null_kernel", warmup_runs=warmup, measured_runs=measured, null_kernel=null_kernel)
    write_meta(path, meta)
    return path
