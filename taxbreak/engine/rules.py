"""The run settings of the analyses: the kernel-name, step-pattern and launch-floor rules and the scalar settings
(``RunConfig``), and their shape as the run-settings tables the SQL reads (``settings_tables``, ``settings_arrow``).

Definitions are in docs/method.md; the rules marked "ours" are this repository's, not the papers'.  The engine
(``taxbreak.engine.analysis``) loads them per run; Dagster hashes the ones a table reads into its code version.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pyarrow as pa

from taxbreak.config import SETTINGS, setting, workload_key_fields

# Vendor-library kernel name rules (METHOD.md section 2): the first matching rule (lowest priority number)
# decides I_lib when the trace has no library API ranges.  Patterns are case-insensitive regular expressions
# (RE2; `(?-i:...)` makes a part case-sensitive), matched against the kernel's own name (match_on 'own_name':
# return type, template arguments and parameters removed, sql/int_kernel_names.sql) or the whole name with its
# template arguments and parameters (match_on 'signature').
LIB_KERNEL_RULES: list[tuple[int, str, int, str, str]] = [
    (5, r"^fbgemm_gpu::", 0, "fbgemm_native", "own_name"),  # FBGEMM's kernels are not vendor-library kernels (ours)
    (10, r"nvjet", 0, "soda_native_nvjet", "own_name"),
    (11, r"wgmma", 0, "soda_native_wgmma", "own_name"),
    (12, r"s884gemm", 0, "soda_native_s884gemm", "own_name"),
    (20, r"cublas", 1, "cublas_name", "own_name"),
    (21, r"cutlass", 1, "cutlass_name", "own_name"),
    (22, r"cudnn", 1, "cudnn_name", "own_name"),
    (23, r"^(sm\d+_xmma|xmma_)", 1, "cublas_xmma", "own_name"),
    (24, r"^(ampere|volta|turing|hopper|maxwell|sm\d+)_[a-z0-9_]*gemm", 1, "cublas_arch_gemm", "own_name"),
    (25, r"(gemv2[nt]_kernel|gemvx|gemmsn|gemmk1_kernel|splitkreduce_kernel|gemm_kernel\d)", 1, "cublas_family",
     "own_name"),
    (26, r"(implicit_convolve|explicit_convolve|winograd|fft2d_|conv2d_grouped_direct|bn_fw_|bn_bw_)", 1,
     "cudnn_family", "own_name"),
    # ROCm counterparts (ours): rocBLAS/hipBLASLt Tensile GEMMs and Composable Kernel, as cuBLAS and CUTLASS above
    (27, r"^Cijk_", 1, "rocblas_tensile", "own_name"),
    (28, r"ck_tile|(^|[^a-z_])ck::|(^|::)ck_", 1, "composable_kernel", "own_name"),
    # library-internal kernels that show their library nowhere: cuDNN's im2col, filter flip and older convolution
    # engines, cuBLAS's batched-GEMM pointer set-up
    (30, r"(^|::)(im2col4d_kernel|compute_gemm_pointers|flip_filter|wgrad_alg[a-z0-9_]*|dgrad[a-z0-9_]*)$", 1,
     "library_internal_name", "own_name"),
    # a vendor-library API type in the template arguments or parameters (cublasGemvParams, cublasLtEpilogue_t,
    # cudnnKernelDataType_t, cudnnTensorStruct): cuBLASLt's epilogue::impl::globalKernel, older cuDNN's
    # nchwToNhwcKernel.  Numeric and trait types (cutlass::bfloat16_t, flash-attention kernel traits) do not count.
    (40, r"(?-i:(^|[^A-Za-z0-9_])(cublas|cublasLt|cudnn)[A-Z][A-Za-z0-9_]*)", 1, "library_api_type", "signature"),
]

# Step and phase patterns (METHOD.md section 5) over user annotations / NVTX ranges; phase NULL = not decided.
STEP_PATTERNS: list[tuple[int, str, str | None, str]] = [
    (10, r"^ProfilerStep#\d+$", None, "profiler_step"),
    (20, r"^prefill([#_ ]?\d+)?$", "prefill", "prefill_annotation"),
    (21, r"^decode(_step)?([#_ ]?\d+)?$", "decode", "decode_annotation"),
    (22, r"^step\[extend", "prefill", "sglang_extend"),
    (23, r"^step\[decode", "decode", "sglang_decode"),
    # vLLM's execute_<tokens>_context_<C>(...)_generation_<G>(...): C prefill and G decode requests (ours)
    (24, r"^execute_\d+_context_0\(", "decode", "vllm_execute_decode"),
    (25, r"^execute_\d+_context_\d+\(.*\)_generation_0\(", "prefill", "vllm_execute_prefill"),
    (26, r"^execute_\d+_context_\d+\(", "mixed", "vllm_execute_mixed"),
    (27, r"^serve_step#\d+$", None, "taxbreak_serve_step"),  # taxbreak capture serve
    # current vLLM's execute_context_<C>(<tokens>)_generation_<G>(<tokens>) (ours)
    (28, r"^execute_context_0\(", "decode", "vllm_execute_context_decode"),
    (29, r"^execute_context_\d+\(.*\)_generation_0\(", "prefill", "vllm_execute_context_prefill"),
    (31, r"^execute_context_\d+\(", "mixed", "vllm_execute_context_mixed"),
    # PARAM / HTA benchmark iterations, e.g. '[param|pytorch.model.alex_net|0|0|0|warmup|forward]' (ours)
    (30, r"^\[param\|.*\|(warmup|measure)\|[a-z_]+\]$", None, "param_bench_iteration"),
]

# T_sys defaults (METHOD.md section 4, SODA's fallbacks), by GPU name.
T_SYS_DEFAULTS: list[tuple[int, str, int, str]] = [
    (10, r"H100", 4510, "default_h100"),
    (11, r"H200", 4300, "default_h200"),
    (99, r".*", 4500, "default_other"),
]

# A trace whose GPU name is missing but whose kernel names state the architecture takes that architecture's T_sys
# default, and says it was inferred (METHOD.md section 4): the GPU name the defaults above are matched against.
GPU_ARCH_RULES: list[tuple[int, str, str, str]] = [
    # Hopper: H100's default (docs/method.md section 4). Only architectures a kernel cannot run below count:
    # Hopper runs sm80 kernels too (a public 2-GPU H100 export names only sm80_* kernels), so sm80 states nothing.
    (10, r"(^|[^a-z0-9])sm_?90a?_", "H100", "arch_sm90"),
]


@dataclass
class RunConfig:
    fusion_ps_threshold: float = 1.0
    fusion_min_count: int = 2
    fusion_list_pool: int = 500  # the best candidates among which the non-overlapping list is chosen (ours)
    coverage_threshold: float = 0.9
    null_kernel_warmup: int = 20
    # A launch call waited rather than worked when longer than max(min, factor x its thread's median launch call)
    # (METHOD.md section 3, ours).
    launch_blocked_min_ns: int = 50_000
    launch_blocked_median_factor: float = 10.0
    # A scope's blocked dispatch is flagged when t_dispatch_blocked_ns exceeds this share of delta_ft + delta_ct (ours).
    dispatch_blocked_share: float = 0.5
    # A step is an outlier when longer than this factor x the median of the other steps of its level (ours).
    outlier_step_factor: float = 5.0
    # T_dispatch_base from fewer samples than this is flagged as unstable (METHOD.md section 2).
    dispatch_base_min_samples: int = 10
    # A kernel longer than this factor x its scope's launching-thread wall time cannot have run there: a corrupt
    # duration (a 1,000 s kernel in a 2 ms step), flagged (taxbreak_by_scope.impossible_duration_kernels, ours).
    kernel_wall_factor: float = 10.0
    # The verdict (sql/diagnosis.sql, docs/method.md "The verdict", ours): shares of a scope's GPU window.
    verdict_min_kernels: int = 20  # fewer kernels than this: not enough evidence
    verdict_device_busy_share: float = 0.85  # kernels keep the GPU busy at least this share: device-bound
    verdict_host_idle_share: float = 0.3  # the GPU waits for late launches at least this share: host-bound
    verdict_sync_idle_share: float = 0.3  # idle while the host synchronises: sync-bound
    verdict_transfer_share: float = 0.3  # memcpy/memset time and the gaps they end: transfer-bound
    verdict_queued_busy_share: float = 0.6  # with queued launches (below), busy this share is device-bound too
    verdict_queue_wait_factor: float = 10.0  # a launch is queued when its kernel starts later than this x T_sys
    verdict_queued_launch_share: float = 0.5  # at least this share of launches queued: the host runs ahead
    verdict_min_launch_coverage: float = 0.5  # fewer kernels than this share with a launch call: late launches unknown
    verdict_margin: float = 0.05  # a share this close to its threshold lowers the confidence to 'low'
    lib_kernel_rules: list[tuple[int, str, int, str, str]] = field(default_factory=lambda: list(LIB_KERNEL_RULES))
    step_patterns: list[tuple[int, str, str | None, str]] = field(default_factory=lambda: list(STEP_PATTERNS))
    t_sys_defaults: list[tuple[int, str, int, str]] = field(default_factory=lambda: list(T_SYS_DEFAULTS))
    gpu_arch_rules: list[tuple[int, str, str, str]] = field(default_factory=lambda: list(GPU_ARCH_RULES))
    # A launch floor the user set (``analysis.t_sys_ns``: ``--t-sys-ns``, $TAXBREAK_T_SYS_NS or taxbreak.toml):
    # every trace uses it, provenance 'user_setting' (run_config.t_sys_override_ns; sql/trace_launch_floor.sql).
    t_sys_override_ns: int | None = None
    # The run-spec fields of the workload key, comma-separated (``trends.workload_key``; sql/run_spec.sql, ours).
    workload_key_fields: str = field(default_factory=lambda: _setting_default("trends.workload_key"))
    # The change-point rule of workload_changes (``trends.*`` settings; docs/method.md "Trends and regressions").
    trends_window_runs: int = field(default_factory=lambda: int(_setting_default("trends.window_runs")))
    trends_min_runs: int = field(default_factory=lambda: int(_setting_default("trends.min_runs")))
    trends_mad_k: float = field(default_factory=lambda: float(_setting_default("trends.mad_k")))
    trends_min_rel_change: float = field(default_factory=lambda: float(_setting_default("trends.min_rel_change")))
    trends_confirm_runs: int = field(default_factory=lambda: int(_setting_default("trends.confirm_runs")))

    @classmethod
    def from_settings(cls, t_sys_ns: int | None = None) -> RunConfig:
        """The defaults above with the user's settings (``taxbreak.config``) applied; ``t_sys_ns``: an option."""

        return cls(t_sys_override_ns=setting("analysis.t_sys_ns", t_sys_ns).value,
                   workload_key_fields=",".join(workload_key_fields()),
                   trends_window_runs=int(setting("trends.window_runs").value),
                   trends_min_runs=int(setting("trends.min_runs").value),
                   trends_mad_k=float(setting("trends.mad_k").value),
                   trends_min_rel_change=float(setting("trends.min_rel_change").value),
                   trends_confirm_runs=int(setting("trends.confirm_runs").value))


def _setting_default(key: str) -> str:
    return str(SETTINGS[key].default)


# The run settings reach SQL as run-local tables: each rule list of RunConfig is a table of its own (columns below),
# every scalar field is a column of the one-row table run_config.  Derived here only: the Dagster code versions
# (settings_tables) and prepare() both read it.
RULE_TABLES: dict[str, tuple[str, ...]] = {
    "lib_kernel_rules": ("priority", "pattern", "i_lib", "rule", "match_on"),
    "step_patterns": ("priority", "pattern", "phase", "rule"),
    "t_sys_defaults": ("priority", "gpu_pattern", "t_sys_ns", "rule"),
    "gpu_arch_rules": ("priority", "kernel_pattern", "gpu_name", "rule"),
}
_SCALAR_TYPES = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string(),
                 "int | None": pa.int64(), "float | None": pa.float64()}


def settings_tables() -> dict[str, tuple[str, ...]]:
    """Run-settings table -> the RunConfig fields it holds."""
    scalars = tuple(f.name for f in fields(RunConfig) if f.name not in RULE_TABLES)
    return {**{t: (t,) for t in RULE_TABLES}, "run_config": scalars}


def settings_arrow(cfg: RunConfig) -> dict[str, pa.Table]:
    """The run-settings tables of ``cfg`` as Arrow tables (see RULE_TABLES)."""
    out = {t: pa.Table.from_pylist([dict(zip(cols, row, strict=True)) for row in getattr(cfg, t)])
           for t, cols in RULE_TABLES.items()}
    scalars = [f for f in fields(RunConfig) if f.name not in RULE_TABLES]
    out["run_config"] = pa.Table.from_pylist(
        [{f.name: getattr(cfg, f.name) for f in scalars}],
        schema=pa.schema([(f.name, _SCALAR_TYPES[str(f.type)]) for f in scalars]))
    return out
