"""Synthetic GPU decode workloads, clearly labelled: Kineto JSON and Nsight-schema SQLite of a simulated run.

SYNTHETIC DATA. Nothing here was measured. The files are named ``synthetic_*``, their metadata says
``"synthetic": true`` (the sidecar ``<file>.meta.json``, the Kineto top-level ``"taxbreak"`` object, and the
SQLite ``META_DATA_EXPORT`` row ``TAXBREAK_META``), and every report that uses them must say so. They exist for
the benchmarks (millions of kernels, streamed: memory does not grow with the size) and for the demo on
machines without a GPU.

The simulated run is one greedy ``generate`` of a LLaMA-style dense or Mixtral-style MoE decoder in HF eager
mode on one GPU: 1 prefill step and ``output_tokens - 1`` decode steps, each step the same op sequence (see
``step_plan``): per layer RMSNorm (6 kernels), q/k/v projections (3 library GEMMs), KV-cache ``cat`` (2),
attention (1), o-projection (1), residual add (1), RMSNorm (6), then the dense MLP (gate/up GEMMs, SiLU, mul, down
GEMM: 5) or the MoE block (router: 7 kernels; ``torch.where`` per expert: 1 kernel each, with a device-to-host
copy and a sync as ``nonzero`` does; 8 kernels per active expert), and a residual add (1); per step the
embedding (1), final RMSNorm (6), LM head (1) and argmax (1, then the token is copied to the host and synced).

    dense kernels per step = 26 * layers + 9
    MoE kernels per step   = (28 + experts + 8 * active_experts) * layers + 9

Every eager kernel has its ``cpu_op`` (with an External id), its launch call (``cudaLaunchKernel``, or
``cuLaunchKernel`` from the driver for cuBLAS GEMMs) with a correlation id, and ``ac2g`` flow events. With
``cuda_graphs`` the decode steps are replayed by one ``cudaGraphLaunch`` feeding all the step's kernels.
Host and device times come from seeded distributions (``Dist``) so a seed reproduces a file byte for byte.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from taxbreak.capture.profile import META_KEY, META_VERSION, sidecar_path, steps_for
from taxbreak.ingest.nsys_schema import EXPORT_DDL_2026


@dataclass(frozen=True)
class Dist:
    """A duration distribution in ns: ``fixed:V``, ``uniform:LO:HI``, ``lognormal:MEDIAN:SIGMA``."""

    kind: str = "lognormal"
    a_ns: float = 1000.0
    b: float = 0.25

    @classmethod
    def parse(cls, text: str) -> Dist:
        parts = text.split(":")
        try:
            if parts[0] == "fixed" and len(parts) == 2:
                return cls("fixed", float(parts[1]), 0.0)
            if parts[0] in ("uniform", "lognormal") and len(parts) == 3:
                return cls(parts[0], float(parts[1]), float(parts[2]))
        except ValueError:
            pass
        raise ValueError(f"bad distribution {text!r}: use fixed:NS, uniform:LO_NS:HI_NS or lognormal:MEDIAN_NS:SIGMA")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return max(0, round(self.a_ns))
        if self.kind == "uniform":
            return max(0, round(rng.uniform(self.a_ns, self.b)))
        return max(0, round(self.a_ns * math.exp(rng.gauss(0.0, self.b))))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.a_ns:g}"
        return f"{self.kind}:{self.a_ns:g}:{self.b:g}"


@dataclass(frozen=True)
class SyntheticConfig:
    model_kind: str = "dense"
    n_layers: int = 16
    batch_size: int = 1
    prompt_len: int = 128
    output_tokens: int = 8
    n_experts: int = 8
    top_k: int = 2
    active_experts: int | None = None  # per decode step; None: min(experts, top_k * batch_size)
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    cpu_name: str = "synthetic host CPU"
    host_name: str = "synthetic-host"
    cuda_graphs: bool = False
    seed: int = 0
    host_speed: float = 1.0  # every host duration / host_speed (same draws): the what-if ground truth (whatif.py)
    python_gap: Dist = field(default_factory=lambda: Dist("lognormal", 2500, 0.3))  # between framework ops
    dispatch: Dist = field(default_factory=lambda: Dist("lognormal", 5500, 0.25))  # op start -> launch call
    library: Dist = field(default_factory=lambda: Dist("lognormal", 4000, 0.3))  # extra cuBLAS front-end time
    launch_api: Dist = field(default_factory=lambda: Dist("lognormal", 3200, 0.2))  # launch call duration
    launch_latency: Dist = field(default_factory=lambda: Dist("lognormal", 4600, 0.15))  # call -> kernel on idle GPU
    kernel_jitter: Dist = field(default_factory=lambda: Dist("lognormal", 1000, 0.1))  # x/1000 multiplies durations

    def __post_init__(self) -> None:
        if self.model_kind not in ("dense", "moe"):
            raise ValueError(f"model_kind must be dense or moe, not {self.model_kind!r}")
        if not self.host_speed > 0:
            raise ValueError(f"host_speed must be > 0, not {self.host_speed!r}")
        if self.output_tokens < 1 or self.n_layers < 1 or self.batch_size < 1 or self.prompt_len < 1:
            raise ValueError("output_tokens, n_layers, batch_size and prompt_len must be at least 1")

    def active(self, phase: str) -> int:
        if phase == "decode" and self.active_experts is not None:
            return min(self.n_experts, self.active_experts)
        tokens = self.batch_size * (self.prompt_len if phase == "prefill" else 1)
        return min(self.n_experts, self.top_k * tokens)

    def label(self) -> str:
        g = "_graphs" if self.cuda_graphs else ""
        g += f"_host{self.host_speed:g}x" if self.host_speed != 1.0 else ""
        shape = f"L{self.n_layers}_bs{self.batch_size}_sl{self.prompt_len}_m{self.output_tokens}"
        return f"synthetic_{self.model_kind}_{shape}{g}"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, dict) and "kind" in v:
                d[k] = str(Dist(**v))
        return d


# --- kernels -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelSpec:
    name: str
    short: str
    base_ns: int
    lib: bool = False
    grid: tuple[int, int, int] = (132, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    regs: int = 32
    smem: int = 0
    token_scale: float = 1 / 1024  # duration grows by this fraction per token processed in the step


_EW = (
    "void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >"
    "(int, {f}, std::array<char*, {n}ul>)"
)


def _ew(functor: str, n: int = 3, base: int = 1900) -> KernelSpec:
    return KernelSpec(_EW.format(f=functor, n=n), "vectorized_elementwise_kernel", base, block=(128, 1, 1), regs=18)


_GEMM = {
    "sm90": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
    "ampere": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
}
_CUTLASS = (
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
    "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"
)


def _kernels(gpu_name: str) -> dict[str, KernelSpec]:
    arch = "sm90" if any(t in gpu_name for t in ("H100", "H200", "H800", "GH200")) else "ampere"
    gemm = _GEMM[arch]
    return {
        "pow": _ew("at::native::pow_tensor_scalar_kernel_impl<c10::BFloat16, float>::{lambda(c10::BFloat16)#2}", 2),
        "mean": KernelSpec(
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
            "float, float>, unsigned int, c10::BFloat16, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, "
            "float, float, float>, unsigned int, c10::BFloat16, 4>)", "reduce_kernel", 3100, block=(32, 16, 1), regs=32
        ),
        "add": _ew("at::native::CUDAFunctor_add<c10::BFloat16>"),
        "rsqrt": _ew("at::native::rsqrt_kernel_cuda::{lambda(c10::BFloat16)#1}", 2),
        "mul": _ew(
            "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
            "at::native::binary_internal::MulFunctor<float> >"
        ),
        "silu": _ew("at::native::silu_kernel::{lambda(c10::BFloat16)#1}", 2),
        "div": _ew(
            "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >"
        ),
        "fill": _ew("at::native::FillFunctor<c10::BFloat16>", 1, 1400),
        "gemm": KernelSpec(gemm, gemm.split("_kernel")[0], 7800, True, (132, 1, 1), (384, 1, 1), 168, 231424, 1 / 64),
        "gemm_small": KernelSpec(_CUTLASS, "Kernel2", 5200, True, (16, 1, 1), (128, 1, 1), 120, 49152, 1 / 64),
        # an expert's GEMM sees only the few tokens routed to it: short, however large the step
        "gemm_expert": KernelSpec(_CUTLASS, "Kernel2", 2400, True, (8, 1, 1), (128, 1, 1), 120, 49152, 1 / 512),
        "cat": KernelSpec(
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::"
            "OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
            "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::"
            "OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned "
            "int, 4u>, int, unsigned int)",
            "CatArrayBatchedCopy", 2600, regs=30,
        ),
        "attn_prefill": KernelSpec(
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
            "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "flash_fwd_kernel", 9500,
            grid=(4, 16, 1), block=(128, 1, 1), regs=255, smem=49152, token_scale=1 / 32,
        ),
        "attn_decode": KernelSpec(
            "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
            "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "flash_fwd_splitkv_kernel", 8200,
            grid=(1, 16, 8), block=(128, 1, 1), regs=255, smem=49152, token_scale=1 / 64,
        ),
        "embedding": KernelSpec(
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, "
            "-2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<"
            "c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, "
            "unsigned int, long)", "indexSelectLargeIndex", 2300, regs=26,
        ),
        "argmax": KernelSpec(
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<"
            "c10::BFloat16>, unsigned int, long, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<"
            "c10::BFloat16>, unsigned int, long, 4>)", "reduce_kernel", 4200, block=(32, 16, 1), regs=40,
        ),
        "softmax": KernelSpec(
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 3, false, false>(float*, float "
            "const*, int, int, int, bool const*, int, bool)", "softmax_warp_forward", 2100, regs=28,
        ),
        "topk": KernelSpec(
            "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, "
            "unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo"
            "<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int)",
            "gatherTopK", 3900, regs=40,
        ),
        "sum": KernelSpec(
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
            "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>,"
            " unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::"
            "sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned "
            "int, float, 4>)", "reduce_kernel", 2900, block=(32, 16, 1), regs=32,
        ),
        "one_hot": KernelSpec(
            "void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_"
            "kernel<true, long>::operator()<at::native::ReduceMultiply>(at::TensorIterator&, long, long, long, "
            "at::native::ReduceMultiply const&)::{lambda(int)#1}>(int, {lambda(int)#1})",
            "_scatter_gather_elementwise_kernel", 2400, regs=30,
        ),
        "nonzero": KernelSpec(
            "void at_cuda_detail::cub::DeviceSelectSweepKernel<at_cuda_detail::cub::DispatchSelectIf<"
            "at_cuda_detail::cub::CountingInputIterator<long, long>, at::native::(anonymous namespace)::NonZeroOp<"
            "long>, long*, int*, at_cuda_detail::cub::NullType, at_cuda_detail::cub::NullType, int, false>::"
            "PtxSelectIfPolicyT>(...)", "DeviceSelectSweepKernel", 2200, regs=40,
        ),
        "index": KernelSpec(
            "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::"
            "index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, "
            "c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>,"
            " c10::ArrayRef<long>, {lambda(char*, char const*, long)#1} const&, bool)::{lambda(int)#1}>(long, "
            "{lambda(int)#1})", "index_elementwise_kernel", 1800, regs=38,
        ),
        "index_add": KernelSpec(
            "void at::native::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true, at::native::"
            "ReduceAdd>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<"
            "c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, "
            "unsigned int, long, long, at::native::ReduceAdd const&, c10::BFloat16)", "indexFuncLargeIndex", 2000,
            regs=32,
        ),
    }


@dataclass(frozen=True)
class Op:
    """One framework op launching one kernel; ``sync``: the op then copies a result to the host and syncs."""

    aten: str
    kernel: str
    sync: bool = False


_RMSNORM = [Op("aten::pow", "pow"), Op("aten::mean", "mean"), Op("aten::add", "add"), Op("aten::rsqrt", "rsqrt"),
            Op("aten::mul", "mul"), Op("aten::mul", "mul")]


def step_plan(cfg: SyntheticConfig, phase: str) -> list[Op]:
    """The op sequence of one step (prefill or decode); one kernel per op."""
    attn = [*_RMSNORM, Op("aten::mm", "gemm"), Op("aten::mm", "gemm_small"), Op("aten::mm", "gemm_small"),
            Op("aten::cat", "cat"), Op("aten::cat", "cat"),
            Op("aten::_scaled_dot_product_flash_attention", "attn_prefill" if phase == "prefill" else "attn_decode"),
            Op("aten::mm", "gemm"), Op("aten::add", "add"), *_RMSNORM]
    if cfg.model_kind == "dense":
        mlp = [Op("aten::mm", "gemm"), Op("aten::mm", "gemm"), Op("aten::silu", "silu"), Op("aten::mul", "mul"),
               Op("aten::mm", "gemm")]
    else:
        mlp = [Op("aten::mm", "gemm_small"), Op("aten::_softmax", "softmax"), Op("aten::topk", "topk"),
               Op("aten::sum", "sum"), Op("aten::div", "div"), Op("aten::zeros_like", "fill"),
               Op("aten::one_hot", "one_hot")]
        active = cfg.active(phase)
        for e in range(cfg.n_experts):
            mlp.append(Op("aten::nonzero", "nonzero", sync=True))
            if e < active:
                mlp += [Op("aten::index", "index"), Op("aten::mm", "gemm_expert"), Op("aten::mm", "gemm_expert"),
                        Op("aten::silu", "silu"), Op("aten::mul", "mul"), Op("aten::mm", "gemm_expert"),
                        Op("aten::mul", "mul"), Op("aten::index_add_", "index_add")]
    layer = [*attn, *mlp, Op("aten::add", "add")]
    head = [Op("aten::mm", "gemm"), Op("aten::argmax", "argmax", sync=True)]
    return [Op("aten::embedding", "embedding"), *(layer * cfg.n_layers), *_RMSNORM, *head]


def kernels_per_step(cfg: SyntheticConfig, phase: str) -> int:
    return len(step_plan(cfg, phase))


def total_kernels(cfg: SyntheticConfig) -> int:
    return kernels_per_step(cfg, "prefill") + (cfg.output_tokens - 1) * kernels_per_step(cfg, "decode")


# --- simulation ----------------------------------------------------------------------------------------------
def _kernel_ns(spec: KernelSpec, tokens: int, cfg: SyntheticConfig, rng: random.Random) -> int:
    """A kernel's duration in a step processing ``tokens`` tokens (one jitter draw)."""
    return round(spec.base_ns * (1 + tokens * spec.token_scale) * cfg.kernel_jitter.sample(rng) / 1000)


# Records: ("op", name, ts, dur, ext) | ("rt", api, cat, ts, dur, corr, ext) | ("k", spec, ts, dur, corr, ext, graph)
#          ("mc", ts, dur, corr, ext, bytes) | ("ann", name, ts, dur, ext) | ("gann", name, ts, dur, ext)
Record = tuple


def simulate(cfg: SyntheticConfig, start_ns: int = 0) -> Iterator[Record]:
    """Yield the run's records in host order; times are ns from ``start_ns``; deterministic for a seed."""
    rng = random.Random(cfg.seed)
    hs = cfg.host_speed

    def h(ns: float) -> int:  # a host duration at this host speed (GPU-side times and launch latency stay)
        return round(ns / hs)

    kernels = _kernels(cfg.gpu_name)
    host = start_ns + 10_000
    gpu_free = start_ns
    corr = 1000
    run_ext = ext = 101
    run_start = host
    yield_after: list[Record] = []
    for step in steps_for(cfg.output_tokens):
        phase, name = step["phase"], step["name"]
        tokens = cfg.batch_size * (cfg.prompt_len if phase == "prefill" else 1)
        plan = step_plan(cfg, phase)
        ext += 1
        step_ext = ext
        step_start = host
        first_kernel: int | None = None
        graph = cfg.cuda_graphs and phase == "decode"
        if graph:
            corr += 1
            gcorr = corr
            launch_ts = host + h(cfg.dispatch.sample(rng))
            launch_dur = h(cfg.launch_api.sample(rng) * 3)
            yield ("rt", "cudaGraphLaunch", "cuda_runtime", launch_ts, launch_dur, gcorr, step_ext)
            ktime = max(launch_ts + cfg.launch_latency.sample(rng), gpu_free + 400)
            for op in plan:
                spec = kernels[op.kernel]
                dur = _kernel_ns(spec, tokens, cfg, rng)
                yield ("k", spec, ktime, dur, gcorr, step_ext, 1)
                first_kernel = ktime if first_kernel is None else first_kernel
                ktime += dur + 600 + rng.randrange(400)
            gpu_free = ktime
            host = launch_ts + launch_dur + h(cfg.python_gap.sample(rng))
            plan = [Op("aten::argmax", "", sync=True)]  # the token still reaches the host
        for op in plan:
            ext += 1
            op_ts = host
            t = op_ts + h(cfg.dispatch.sample(rng))
            records: list[Record] = []
            if op.kernel:
                spec = kernels[op.kernel]
                if spec.lib:
                    t += h(cfg.library.sample(rng))
                corr += 1
                api, cat = ("cuLaunchKernel", "cuda_driver") if spec.lib else ("cudaLaunchKernel", "cuda_runtime")
                launch_dur = h(cfg.launch_api.sample(rng))
                records.append(("rt", api, cat, t, launch_dur, corr, ext))
                kts = max(t + cfg.launch_latency.sample(rng), gpu_free + 300)
                dur = _kernel_ns(spec, tokens, cfg, rng)
                records.append(("k", spec, kts, dur, corr, ext, 0))
                first_kernel = kts if first_kernel is None else first_kernel
                gpu_free = kts + dur
                t += launch_dur
            if op.sync:
                corr += 1
                call = h(cfg.launch_api.sample(rng))
                records.append(("rt", "cudaMemcpyAsync", "cuda_runtime", t + h(300), call, corr, ext))
                mts = max(t + h(300) + cfg.launch_latency.sample(rng), gpu_free + 300)
                records.append(("mc", mts, 1400, corr, ext, 8 * cfg.batch_size))
                gpu_free = mts + 1400
                t += h(300) + call
                corr += 1
                sync_end = max(t + h(800), gpu_free + h(1500))
                records.append(("rt", "cudaStreamSynchronize", "cuda_runtime", t + h(200), sync_end - t - h(200), corr,
                                ext))
                t = sync_end
            op_end = t + h(400)
            yield ("op", op.aten, op_ts, op_end - op_ts, ext)
            yield from records
            host = op_end + h(cfg.python_gap.sample(rng))
        yield ("ann", name, step_start, host - step_start, step_ext)
        if first_kernel is not None:
            yield_after.append(("gann", name, first_kernel, gpu_free - first_kernel, step_ext))
    yield ("ann", "ProfilerStep#1", run_start, host - run_start, run_ext)
    yield from yield_after


def synthetic_meta(cfg: SyntheticConfig) -> dict[str, Any]:
    """The sidecar object (schema of taxbreak/capture/profile.py) with ``synthetic: true``."""
    return {
        "taxbreak_meta_version": META_VERSION,
        "kind": "generation",
        "model": f"synthetic-{cfg.model_kind}-L{cfg.n_layers}",
        "model_kind": cfg.model_kind,
        "dtype": "bfloat16",
        "device": "cuda:0",
        "gpu_name": cfg.gpu_name,
        "cpu_name": cfg.cpu_name,
        "batch_size": cfg.batch_size,
        "prompt_len": cfg.prompt_len,
        "output_tokens": cfg.output_tokens,
        "steps": steps_for(cfg.output_tokens),
        "torch_version": "synthetic",
        "cuda_version": "12.4",
        "warmup_runs": 0,
        "measured_runs": 1,
        "synthetic": True,
        "host_name": cfg.host_name,
        "sweep": None,
        "synthetic_config": cfg.as_dict(),
    }


# --- Kineto JSON writer -----------------------------------------------------------------------------------------
PID = 4242
STREAM = 7
MONO_START_NS = 3_600_000_000_000  # the simulated host's monotonic clock at the trace start (1 h of uptime)
EPOCH_AT_MONO_ZERO_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z minus nothing: baseTimeNanoseconds


def _us(ns: int) -> str:
    """Integer ns as Kineto's µs text with 3 decimals, exactly (no binary float on the way)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _q(s: str) -> str:
    return json.dumps(s)


def _kineto_lines(records: Iterator[Record]) -> Iterator[str]:
    pid = PID
    gpu_pid = 0
    for n, pid_, tid, args in (
        ("process_name", pid, 0, {"name": "python3"}), ("process_labels", pid, 0, {"labels": "CPU"}),
        ("process_name", gpu_pid, 0, {"name": "python3"}), ("process_labels", gpu_pid, 0, {"labels": "GPU 0"}),
        ("thread_name", pid, pid, {"name": "thread 4242 (python3)"}),
        ("thread_name", gpu_pid, STREAM, {"name": f"stream {STREAM}"}),
    ):
        yield json.dumps({"name": n, "ph": "M", "ts": _us(MONO_START_NS), "pid": pid_, "tid": tid, "args": args})
    ev_idx = 0
    names: dict[str, str] = {}
    for r in records:
        tag = r[0]
        if tag == "op":
            _, name, ts, dur, ext = r
            yield (f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {pid}, "tid": {pid}, "ts": {_us(ts)}, '
                   f'"dur": {_us(dur)}, "args": {{"External id": {ext}, "Record function id": 0, '
                   f'"Ev Idx": {ev_idx}}}}}')
            ev_idx += 1
        elif tag == "rt":
            _, api, cat, ts, dur, corr, ext = r
            cbid = {"cudaLaunchKernel": 211, "cuLaunchKernel": 307, "cudaGraphLaunch": 311,
                    "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131, "cudaDeviceSynchronize": 165}[api]
            yield (f'{{"ph": "X", "cat": "{cat}", "name": "{api}", "pid": {pid}, "tid": {pid}, "ts": {_us(ts)}, '
                   f'"dur": {_us(dur)}, "args": {{"External id": {ext}, "cbid": {cbid}, "correlation": {corr}}}}}')
            if api in ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync"):
                yield (f'{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {pid}, "ts": {_us(ts)}, '
                       f'"cat": "ac2g", "name": "ac2g"}}')
        elif tag == "k":
            _, spec, ts, dur, corr, ext, graph = r
            qn = names.get(spec.name)
            if qn is None:
                qn = names[spec.name] = _q(spec.name)
            g, b = spec.grid, spec.block
            extra = ', "graph id": 1' if graph else ""
            yield (f'{{"ph": "X", "cat": "kernel", "name": {qn}, "pid": {gpu_pid}, "tid": {STREAM}, "ts": {_us(ts)}, '
                   f'"dur": {_us(dur)}, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, '
                   f'"stream": {STREAM}, "correlation": {corr}, "registers per thread": {spec.regs}, '
                   f'"shared memory": {spec.smem}, "grid": [{g[0]}, {g[1]}, {g[2]}], "block": [{b[0]}, {b[1]}, {b[2]}]'
                   f'{extra}}}}}')
            yield (f'{{"ph": "f", "id": {corr}, "pid": {gpu_pid}, "tid": {STREAM}, "ts": {_us(ts)}, '
                   f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
        elif tag == "mc":
            _, ts, dur, corr, ext, nbytes = r
            yield (f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": {gpu_pid}, '
                   f'"tid": {STREAM}, "ts": {_us(ts)}, "dur": {_us(dur)}, "args": {{"External id": {ext}, '
                   f'"device": 0, "context": 1, "stream": {STREAM}, "correlation": {corr}, "bytes": {nbytes}}}}}')
            yield (f'{{"ph": "f", "id": {corr}, "pid": {gpu_pid}, "tid": {STREAM}, "ts": {_us(ts)}, '
                   f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
        elif tag == "ann":
            _, name, ts, dur, ext = r
            yield (f'{{"ph": "X", "cat": "user_annotation", "name": {_q(name)}, "pid": {pid}, "tid": {pid}, '
                   f'"ts": {_us(ts)}, "dur": {_us(dur)}, "args": {{"External id": {ext}, "Record function id": 0}}}}')
        elif tag == "gann":
            _, name, ts, dur, ext = r
            yield (f'{{"ph": "X", "cat": "gpu_user_annotation", "name": {_q(name)}, "pid": {gpu_pid}, '
                   f'"tid": {STREAM}, "ts": {_us(ts)}, "dur": {_us(dur)}, "args": {{"External id": {ext}}}}}')


@contextlib.contextmanager
def _open_text(path: Path, gz: bool) -> Iterator[TextIO]:
    """A text writer; gzip without a name or mtime in its header, so a seed reproduces the bytes."""
    with open(path, "wb") as raw:
        if not gz:
            with io.TextIOWrapper(raw, encoding="utf-8") as fh:
                yield fh
            return
        with (
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=3, mtime=0) as zf,
            io.TextIOWrapper(zf, encoding="utf-8") as fh,
        ):
            yield fh


def write_kineto(cfg: SyntheticConfig, path: str | os.PathLike[str]) -> Path:
    """Stream the simulated run as Kineto JSON (``.json`` or ``.json.gz``) and write its sidecar."""
    return _write_kineto_file(Path(path), synthetic_meta(cfg), simulate(cfg, MONO_START_NS), cfg.gpu_name, cfg.seed)


def _write_kineto_file(p: Path, meta: dict[str, Any], records: Iterator[Record], gpu_name: str, seed: int) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": gpu_name, "totalGlobalMem": 85018279936, "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12090,
        "record_shapes": 1,
        "with_stack": 0,
        "trace_id": f"SYNTHETIC{seed:023d}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": EPOCH_AT_MONO_ZERO_NS,
        META_KEY: meta,
    }
    tmp = p.with_name(p.name + ".part")
    with _open_text(tmp, p.name.endswith(".gz")) as fh:
        fh.write(json.dumps(header)[:-1] + ',\n"traceEvents": [\n')
        first = True
        buf: list[str] = []
        for line in _kineto_lines(records):
            if first:
                buf.append(line)
                first = False
            else:
                buf.append(",\n" + line)
            if len(buf) >= 4096:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
        fh.write('\n],\n"traceName": ' + _q(p.name) + "\n}\n")
    os.replace(tmp, p)
    sidecar_path(p).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return p


# --- a synthetic null-kernel floor trace --------------------------------------------------------------------------
SPIN_KERNEL = KernelSpec("void at::cuda::(anonymous namespace)::spin_kernel(long)", "spin_kernel", 1200,
                         grid=(1, 1, 1), block=(1, 1, 1), regs=16, token_scale=0.0)


def simulate_null_kernel(
    launch_latency: Dist, warmup: int = 20, measured: int = 50, seed: int = 0, start_ns: int = 0,
) -> Iterator[Record]:
    """Records of METHOD.md section 4's loop: ``spin_kernel<<<1,1>>>`` launches, each followed by a device sync."""
    rng = random.Random(seed)
    host = start_ns + 10_000
    corr = 1000
    for ext, (marker, n) in enumerate((("null_kernel_warmup", warmup), ("null_kernel_measure", measured)), 2):
        begin = host
        for _ in range(n):
            corr += 1
            call = 2500 + rng.randrange(1000)
            yield ("rt", "cudaLaunchKernel", "cuda_runtime", host, call, corr, ext)
            kts = host + launch_latency.sample(rng)
            dur = SPIN_KERNEL.base_ns + rng.randrange(200)
            yield ("k", SPIN_KERNEL, kts, dur, corr, ext, 0)
            corr += 1
            sync_start = host + call + 300
            sync_end = max(sync_start + 1500, kts + dur + 1800)
            yield ("rt", "cudaDeviceSynchronize", "cuda_runtime", sync_start, sync_end - sync_start, corr, ext)
            host = sync_end + 1000 + rng.randrange(500)
        yield ("ann", marker, begin, host - begin, ext)


def write_null_kernel(
    path: str | os.PathLike[str], *, gpu_name: str = "NVIDIA H100 80GB HBM3", host_name: str = "synthetic-host",
    launch_latency: Dist | None = None, warmup: int = 20, measured: int = 50, seed: int = 0,
) -> Path:
    """A SYNTHETIC null-kernel floor trace (Kineto JSON + sidecar, ``kind: null_kernel``, ``synthetic: true``)."""
    lat = launch_latency or Dist("lognormal", 4600, 0.05)
    meta = {
        "taxbreak_meta_version": META_VERSION, "kind": "null_kernel", "model": "null_kernel", "model_kind": None,
        "dtype": None, "device": "cuda:0", "gpu_name": gpu_name, "cpu_name": "synthetic host CPU",
        "batch_size": None, "prompt_len": None, "output_tokens": None, "steps": [], "torch_version": "synthetic",
        "cuda_version": "12.4", "warmup_runs": warmup, "measured_runs": measured, "synthetic": True,
        "host_name": host_name, "sweep": None,
        "null_kernel": {"kernel": "synthetic spin_kernel<<<1,1>>>", "warmup_launches": warmup,
                        "measured_launches": measured, "warmup_marker": "null_kernel_warmup",
                        "measure_marker": "null_kernel_measure", "launch_latency": str(lat)},
    }
    records = simulate_null_kernel(lat, warmup, measured, seed, MONO_START_NS)
    return _write_kineto_file(Path(path), meta, records, gpu_name, seed)


# --- Nsight Systems SQLite writer -------------------------------------------------------------------------------
def nsys_ddl() -> dict[str, str]:
    """CREATE TABLE statements of the tables written: the real export schema the adapter documents
    (``taxbreak.ingest.nsys_schema.EXPORT_DDL_2026``, read from public exports)."""
    return {t: EXPORT_DDL_2026[t] for t in SYNTHETIC_TABLES}


SYNTHETIC_TABLES = (
    "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "TARGET_INFO_GPU", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "PROCESSES", "ThreadNames", "NVTX_EVENTS",
)
GLOBAL_PID = (1 << 48) | (PID << 24)
GLOBAL_TID = GLOBAL_PID | PID
NVTX_PUSHPOP = 59
SESSION_OFFSET_NS = 1_000_000_000  # nsys times count from the session start; the app starts ~1 s in


def write_nsys_sqlite(cfg: SyntheticConfig, path: str | os.PathLike[str]) -> Path:
    """Write the simulated run as an Nsight Systems SQLite export (real table schema) plus its sidecar."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    ddl = nsys_ddl()
    tmp = p.with_name(p.name + ".part")
    tmp.unlink(missing_ok=True)
    meta = synthetic_meta(cfg)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        for sql in ddl.values():
            con.execute(sql)
        strings: dict[str, int] = {}

        def sid(s: str) -> int:
            i = strings.get(s)
            if i is None:
                i = strings[s] = len(strings)
            return i

        kernels: list[tuple] = []
        runtime: list[tuple] = []
        memcpy: list[tuple] = []
        nvtx: list[tuple] = []
        grid_id = 0
        node_id = 0
        api_names = {"cudaLaunchKernel": "cudaLaunchKernel_v7000", "cuLaunchKernel": "cuLaunchKernel",
                     "cudaGraphLaunch": "cudaGraphLaunch_v10000", "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
                     "cudaStreamSynchronize": "cudaStreamSynchronize_v3020"}

        def flush() -> None:
            # 2026.2 schema: the 39 columns of 2026.1 plus tensorSizeMinusOneElements ('[]' as in real exports)
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * 40)})",
                            ((*k, '[]') for k in kernels))
            con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runtime)
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * 21)})", memcpy)
            con.executemany(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", nvtx)
            for lst in (kernels, runtime, memcpy, nvtx):
                lst.clear()

        for r in simulate(cfg, SESSION_OFFSET_NS):
            tag = r[0]
            if tag == "k":
                _, spec, ts, dur, corr, _ext, graph = r
                grid_id += 1
                gnode = None
                if graph:
                    node_id += 1
                    gnode = node_id
                g, b = spec.grid, spec.block
                kernels.append((
                    ts, ts + dur, 0, 1, None, STREAM, corr, GLOBAL_PID, sid(spec.name), sid(spec.short), None, 1, 0,
                    spec.regs, g[0], g[1], g[2], b[0], b[1], b[2], min(spec.smem, 49152), max(0, spec.smem - 49152),
                    0, 0, grid_id, spec.smem or 16384, gnode, 0, None, None, None, 1 if graph else None,
                    0, 0, 0, 0, 0, 0, None,
                ))
            elif tag == "rt":
                _, api, cat, ts, dur, corr, _ext = r
                runtime.append((ts, ts + dur, 1 if cat == "cuda_driver" else 0, GLOBAL_TID, corr,
                                sid(api_names[api]), 0, None))
            elif tag == "mc":
                _, ts, dur, corr, _ext, nbytes = r
                memcpy.append((ts, ts + dur, 0, 1, None, STREAM, corr, GLOBAL_PID, nbytes, 2, None, 2, 0, 0, 1,
                               None, None, None, None, None, 1))
            elif tag == "op":
                _, name, ts, dur, ext = r
                nvtx.append((ts, ts + dur, NVTX_PUSHPOP, f"{name}, op_id = {ext}", GLOBAL_TID, GLOBAL_TID, 0))
            elif tag == "ann":
                _, name, ts, dur, _ext = r
                nvtx.append((ts, ts + dur, NVTX_PUSHPOP, name, GLOBAL_TID, GLOBAL_TID, 0))
            if len(kernels) + len(runtime) + len(nvtx) >= 50_000:
                flush()
        flush()
        con.execute("INSERT INTO ThreadNames VALUES (?, ?, ?)", (sid("python3"), 20, GLOBAL_TID))
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", ((i, s) for s, i in strings.items()))
        gpu_row: dict[str, Any] = {"vmId": 1 << 48, "id": 0, "name": cfg.gpu_name, "busLocation": "0000:18:00.0",
                                   "isDiscrete": 1, "smCount": 132, "totalMemory": 85018279936, "cuDevice": 0,
                                   "computeMajor": 9, "computeMinor": 0, "chipName": "GH100"}
        cols = ", ".join(gpu_row)
        con.execute(f"INSERT INTO TARGET_INFO_GPU ({cols}) VALUES ({', '.join('?' * len(gpu_row))})",
                    tuple(gpu_row.values()))
        epoch = EPOCH_AT_MONO_ZERO_NS + MONO_START_NS
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?, ?)",
                    (epoch, "2026-01-01T01:00:00", "2026-01-01T01:00:00", MONO_START_NS))
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems (taxbreak synthetic generator)"),
            ("EXPORT_PRODUCT_VERSION", "2026.1.1.204"),
            ("EXPORT_SCHEMA_VERSION", "3.24.14"),
            ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
            ("EXPORT_SCHEMA_VERSION_MINOR", "24"),
            ("EXPORT_SCHEMA_VERSION_MICRO", "14"),
            ("EXPORT_HOST", cfg.host_name),
            ("TAXBREAK_SYNTHETIC", "true"),
            ("TAXBREAK_META", json.dumps(meta)),
        ])
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GLOBAL_PID, PID, "python3"))
        con.commit()
    finally:
        con.close()
    os.replace(tmp, p)
    sidecar_path(p).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return p


def generate_synthetic(
    out_dir: str | os.PathLike[str], cfg: SyntheticConfig, formats: tuple[str, ...] = ("kineto",),
    gzip_json: bool = True,
) -> list[Path]:
    """Write the workload in each of ``formats`` (``kineto``, ``sqlite``) under ``out_dir``; returns the files."""
    out = Path(out_dir)
    written: list[Path] = []
    for fmt in formats:
        if fmt == "kineto":
            written.append(write_kineto(cfg, out / (cfg.label() + (".json.gz" if gzip_json else ".json"))))
        elif fmt == "sqlite":
            written.append(write_nsys_sqlite(cfg, out / (cfg.label() + ".sqlite")))
        else:
            raise ValueError(f"unknown format {fmt!r}: use kineto or sqlite")
    return written


def with_overrides(cfg: SyntheticConfig, **changes: Any) -> SyntheticConfig:
    return replace(cfg, **{k: v for k, v in changes.items() if v is not None})
