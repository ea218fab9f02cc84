"""Hand-computed scenario for the METHOD.md section 1-3 rules (docs/method.md): the one dispatcher-op rule on
every route and for IL, library rules on the kernel's own name, the true median T_dispatch_base,
t_dispatch_blocked, blocked launches, HDBI_wall over the launching threads, steps of another process by time and
outlier steps.

``rules_rows`` (Kineto-like, GPU H100: T_sys 4510 ns), thread 1/1 unless noted, times in ns:
  TorchDynamo Cache Lookup cpu_op [500, 600)                          (not a dispatcher op: IL starts at 1000)
  c10d::allreduce_ ext 5 [1000, 9000) > record_param_comms ext 6 [2000, 8000) > launch corr 1 [3000, 3500)
      -> K1 ncclKernel ext 6 [4000, 6000)        External id 6 is record_param_comms: linked by containment
  triton_poi_fused_add_0 cpu_op ext 7 [10000, 12000) > cuLaunchKernel corr 2 [10500, 11000)
      -> K2 triton_poi_fused_add_0 [11500, 12500)  orphan: no dispatcher op
  autograd::engine::evaluate_function: MmBackward0 [13000, 20000) > aten::mm ext 9 [14000, 18000)
      launch corr 3 [15000, 15400) -> K3 cutlass::Kernel2<...> [16000, 17000)               I_lib 1 (cutlass_name)
      launch corr 4 [16000, 16300) -> K4 moe::dev::finalize::...<..., cutlass::bfloat16_t> [17000, 17500)  I_lib 0
  torch::autograd::CppNode<MyFn> [21000, 23000) > launch corr 5 [21500, 21700) -> K5 fbgemm_gpu:: [22000, 22100)
  aten::add ext 11 [24000, 30000) > launch corr 6 [27000, 27200) -> K6 elementwise_add [27500, 28000)
  _C::rms_norm ext 12 [31000, 40000) > launch corr 7 [38000, 38100) -> K7 rms_norm_kernel [38500, 39000)
  aten::convolution ext 13 [41000, 120000)
      launch corr 8 [42000, 102000) (60 us: waited) -> K8 explicit_convolve_sgemm [102500, 103500)  I_lib 1
      launch corr 9 [110000, 110500)               -> K9 implicit_convolve_sgemm [111000, 112000)  I_lib 1
  thread 1/2: python_function threading.py(324): wait [0, 130000)   (launches nothing: reported apart)
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest.lake import Lake

from .scenarios import ev, kernel, write_trace

RULES_ID = "1" * 64
STEPS_ID = "2" * 64


def rules_rows(t: str = RULES_ID) -> list[dict]:
    P, T = "1", "1"

    def launch(ts: int, dur: int, corr: int, ext: int | None, kind: str = "runtime_api",
               name: str = "cudaLaunchKernel") -> dict:
        return ev(t, kind, name, ts, dur, P, T, correlation_id=corr, external_id=ext)

    return [
        ev(t, "framework_op", "TorchDynamo Cache Lookup", 500, 100, P, T, external_id=1),
        ev(t, "framework_op", "c10d::allreduce_", 1000, 8000, P, T, external_id=5),
        ev(t, "framework_op", "record_param_comms", 2000, 6000, P, T, external_id=6),
        launch(3000, 500, 1, 6),
        kernel(t, "ncclKernel_AllReduce_RING_LL_Sum_float", 4000, 2000, P, 1, 6),
        ev(t, "framework_op", "triton_poi_fused_add_0", 10000, 2000, P, T, external_id=7),
        launch(10500, 500, 2, 7, kind="driver_api", name="cuLaunchKernel"),
        kernel(t, "triton_poi_fused_add_0", 11500, 1000, P, 2, 7),
        ev(t, "framework_op", "autograd::engine::evaluate_function: MmBackward0", 13000, 7000, P, T, external_id=8),
        ev(t, "framework_op", "aten::mm", 14000, 4000, P, T, external_id=9),
        launch(15000, 400, 3, 9),
        kernel(t, "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", 16000, 1000,
               P, 3, 9),
        launch(16000, 300, 4, 9),
        kernel(t, "void moe::dev::finalize::finalizeKernelVecLoad<float, cutlass::bfloat16_t>(Params)", 17000, 500,
               P, 4, 9),
        ev(t, "framework_op", "torch::autograd::CppNode<MyFn>", 21000, 2000, P, T, external_id=10),
        launch(21500, 200, 5, 10),
        kernel(t, "void fbgemm_gpu::jagged_kernel<cutlass::half_t>(int)", 22000, 100, P, 5, 10),
        ev(t, "framework_op", "aten::add", 24000, 6000, P, T, external_id=11),
        launch(27000, 200, 6, 11),
        kernel(t, "elementwise_add", 27500, 500, P, 6, 11),
        ev(t, "framework_op", "_C::rms_norm", 31000, 9000, P, T, external_id=12),
        launch(38000, 100, 7, 12),
        kernel(t, "rms_norm_kernel", 38500, 500, P, 7, 12),
        ev(t, "framework_op", "aten::convolution", 41000, 79000, P, T, external_id=13),
        launch(42000, 60000, 8, 13),
        kernel(t, "void explicit_convolve_sgemm<float, int>(int)", 102500, 1000, P, 8, 13),
        launch(110000, 500, 9, 13),
        kernel(t, "void implicit_convolve_sgemm<float, float>(int)", 111000, 1000, P, 9, 13),
        ev(t, "python_function", "threading.py(324): wait", 0, 130000, P, "2"),
    ]


def steps_rows(t: str = STEPS_ID) -> list[dict]:
    """Steps annotated by process 9, kernels launched by process 1 (HTA's Triton example has this shape): three
    ProfilerSteps of 10000, 10000 and 100000 ns, the last an outlier (> 5 x 10000).  One aten::mm per step:
    launch 1000 ns after the op start, kernel of 1000 ns."""
    rows = []
    starts = [0, 20000, 40000]
    durs = [10000, 10000, 100000]
    for i, (s, d) in enumerate(zip(starts, durs, strict=True)):
        rows.append(ev(t, "user_annotation", f"ProfilerStep#{i + 1}", s, d, "9", "9"))
        rows.append(ev(t, "framework_op", "aten::mm", s + 1000, 3000, "1", "1", external_id=i + 1))
        rows.append(ev(t, "runtime_api", "cudaLaunchKernel", s + 2000, 500, "1", "1", correlation_id=i + 1,
                       external_id=i + 1))
        rows.append(kernel(t, "my_kernel", s + 3000, 1000, "1", i + 1, i + 1))
    return rows


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root = tmp_path_factory.mktemp("rules")
    lake = Lake(root / "lake")
    write_trace(lake, RULES_ID, rules_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="rules.json")
    write_trace(lake, STEPS_ID, steps_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="steps.json")
    analysis.materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    yield con
    con.close()


def q(con: duckdb.DuckDBPyConnection, sql: str, **params) -> list[tuple]:
    return con.execute(sql, params).fetchall()


def test_dispatcher_op_rule_on_every_route(wh: duckdb.DuckDBPyConnection) -> None:
    got = q(wh, """SELECT l.kernel_seq, l.op_name, l.op_link_method, l.orphan_reason, t.i_lib, t.i_lib_rule,
                   t.t_dispatch_ns, t.t_dispatch_blocked_ns, t.delta_ft_ns, t.delta_ct_ns
                   FROM int_kernel_links l JOIN kernel_taxbreak t USING (trace_id, kernel_seq)
                   WHERE trace_id = $t ORDER BY kernel_seq""", t=RULES_ID)
    assert got == [
        # record_param_comms carries the kernel's External id but is no dispatcher op: the collective links
        (1, "c10d::allreduce_", "containment", None, 0, "no_rule_matched", 2000, 0, 2000, 0),
        # an Inductor cpu_op named like its kernel is no framework op
        (2, None, None, "no_framework_op", 0, "no_rule_matched", None, None, None, None),
        # CUTLASS by its own name; the base is the median (2000 + 3000) / 2 of K1, K4, K6, K7
        (3, "aten::mm", "external_id", None, 1, "cutlass_name", 1000, 0, 2500, 0),
        # cutlass only in the template arguments: not a library kernel; the first launch (400 ns) is blocked time
        (4, "aten::mm", "external_id", None, 0, "no_rule_matched", 2000, 400, 2000, 0),
        # torch::autograd::CppNode<...> is no dispatcher op; fbgemm_gpu:: is not a vendor library
        (5, None, None, "no_framework_op", 0, "fbgemm_native", None, None, None, None),
        (6, "aten::add", "external_id", None, 0, "no_rule_matched", 3000, 0, 3000, 0),
        (7, "_C::rms_norm", "external_id", None, 0, "no_rule_matched", 7000, 0, 7000, 0),
        (8, "aten::convolution", "external_id", None, 1, "cudnn_family", 1000, 0, 2500, 0),
        # its t_dispatch holds the first launch's 60 us wait: dCT 69000 - 2500, of which 60000 blocked
        (9, "aten::convolution", "external_id", None, 1, "cudnn_family", 69000, 60000, 2500, 66500),
    ]
    assert q(wh, "SELECT DISTINCT t_dispatch_base_ns FROM kernel_taxbreak WHERE trace_id = $t", t=RULES_ID) == [
        (2500,)]


def test_il_starts_at_first_dispatcher_op(wh: duckdb.DuckDBPyConnection) -> None:
    got = q(wh, "SELECT il_start_ns, il_start_basis, il_end_ns, il_ns FROM skip_by_trace WHERE trace_id = $t",
            t=RULES_ID)
    assert got == [(1000, "framework_op", 112000, 111000)]


def test_host_partition_launching_threads_and_blocked_launches(wh: duckdb.DuckDBPyConnection) -> None:
    # thread 1/1: span [500, 120000); launches 500+500+400+300+200+200+100+500 = 2700 (median 400: the 60 us launch
    # is over max(50 us, 4 us) and waited); framework ranges cover 113100 ns less 62700 in launches; gaps 6400.
    got = q(wh, """SELECT scope_kind, pid, tid, threads, launches_kernels, wall_ns, launch_host_ns, launch_blocked_ns,
                   library_ns, framework_ns, sync_ns, other_runtime_ns, host_untraced_ns FROM host_partition
                   WHERE trace_id = $t ORDER BY scope_kind, tid""", t=RULES_ID)
    assert got == [
        ("other_threads", None, None, 1, False, 130000, 0, 0, 0, 130000, 0, 0, 0),
        ("thread", "1", "1", 1, True, 119500, 2700, 60000, 0, 50400, 0, 0, 6400),
        ("thread", "1", "2", 1, False, 130000, 0, 0, 0, 130000, 0, 0, 0),
        ("trace", None, None, 1, True, 119500, 2700, 60000, 0, 50400, 0, 0, 6400),
    ]


def test_hdbi_wall_and_flags(wh: duckdb.DuckDBPyConnection) -> None:
    got = q(wh, """SELECT kernels, linked_kernels, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_orchestrate_ns,
                   t_device_active_ns, t_device_active_linked_ns, hdbi, hdbi_linked, hdbi_wall, host_wall_ns,
                   host_threads, t_dispatch_blocked_ns, dispatch_blocked_flag, orchestrate_exceeds_wall
                   FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'""", t=RULES_ID)
    # dFT 2000+2500+2000+3000+7000+2500+2500, dCT 66500, 7 launches x 4510; the background thread is not in the wall
    assert got == [(9, 7, 21500, 66500, 7 * 4510, 119570, 7600, 6500, 7600 / 127170, 6500 / 126070,
                    7600 / (7600 + 2700 + 50400), 119500, 1, 60400, True, True)]
    top = q(wh, """SELECT [x.kernel_seq FOR x IN top_orchestrate_kernels], [x.orchestrate_ns FOR x IN
                   top_orchestrate_kernels] FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'""",
            t=RULES_ID)
    assert top == [([9, 7, 6], [69000, 7000, 3000])]


def test_steps_of_another_process_and_outlier_steps(wh: duckdb.DuckDBPyConnection) -> None:
    steps = q(wh, """SELECT step_id, is_leaf_step, is_outlier_step, in_outlier_step FROM int_steps WHERE trace_id = $t
                     ORDER BY step_id""", t=STEPS_ID)
    assert steps == [(1, True, False, False), (2, True, False, False), (3, True, True, True)]
    # the kernels (process 1) fall in the steps of process 9 by time
    assert q(wh, "SELECT kernel_seq, step_id FROM kernel_taxbreak WHERE trace_id = $t ORDER BY 1", t=STEPS_ID) == [
        (1, 1), (2, 2), (3, 3)]
    got = q(wh, """SELECT scope_kind, scope_key, kernels, t_orchestrate_ns, t_device_active_ns, host_wall_ns,
                   host_launch_ns, host_framework_ns, is_outlier_step FROM taxbreak_by_scope
                   WHERE trace_id = $t AND scope_kind IN ('trace', 'trace_excl_outliers', 'step')
                   ORDER BY scope_kind, scope_key""", t=STEPS_ID)
    # t_dispatch 1000 each: T_Orchestrate 1000 + 4510 per kernel.  Thread 1/1 spans [1000, 44000): 3 x 500 launch,
    # 3 x 2500 framework; each step window holds one op (3000 ns of the thread's events).  Without the outlier
    # step: the trace less step 3's window on the launching thread ([40000, 140000): 500 launch, 2500 framework).
    assert got == [
        ("step", "1", 1, 5510, 1000, 10000, 500, 2500, False),
        ("step", "2", 1, 5510, 1000, 10000, 500, 2500, False),
        ("step", "3", 1, 5510, 1000, 100000, 500, 2500, True),
        ("trace", STEPS_ID, 3, 3 * 5510, 3000, 43000, 1500, 7500, True),
        ("trace_excl_outliers", STEPS_ID, 2, 2 * 5510, 2000, 43000 - 4000, 1000, 5000, None),
    ]


def test_no_kernel_trace_keeps_trace_rows(tmp_path: Path) -> None:
    t = "3" * 64
    lake = Lake(tmp_path / "lake")
    write_trace(lake, t, [ev(t, "framework_op", "aten::add", 0, 1000, "1", "1")], gpu="", file_name="cpu.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        got = q(con, """SELECT kernels, t_orchestrate_ns, hdbi, hdbi_wall, no_kernels_reason FROM taxbreak_by_scope
                        WHERE scope_kind = 'trace'""")
        assert got == [(0, 0, None, None, "no GPU kernels in the trace (host-only capture)")]
        assert q(con, "SELECT kernels, il_ns, no_kernels_reason FROM skip_by_trace") == [
            (0, None, "no GPU kernels in the trace (host-only capture)")]
    finally:
        con.close()


def test_serving_engine_step_annotations(tmp_path: Path) -> None:
    """vLLM's execute_<n>_context_<C>(...)_generation_<G>(...) ranges are steps, their phase from C and G (ours);
    taxbreak capture serve's serve_step#N too."""
    t = "4" * 64
    names = ["execute_8_context_0()_generation_8(sq8sk90)", "execute_90_context_1(sq90sk90)_generation_0()",
             "execute_98_context_1(sq90sk90)_generation_8(sq8sk90)", "serve_step#3"]
    rows = [ev(t, "user_annotation", n, i * 1000, 500, "1", "1") for i, n in enumerate(names)]
    write_trace(Lake(tmp_path / "lake"), t, rows, gpu="", file_name="vllm.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake", tables=["int_steps"])
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        assert q(con, "SELECT step_rule, phase FROM int_steps ORDER BY step_id") == [
            ("vllm_execute_decode", "decode"), ("vllm_execute_prefill", "prefill"), ("vllm_execute_mixed", "mixed"),
            ("taxbreak_serve_step", None)]
    finally:
        con.close()
