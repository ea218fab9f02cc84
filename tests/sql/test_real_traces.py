"""Invariants of every analysis table on the public real traces (ingested once per module)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest import Lake, ingest_file

# kernel events per file, from SOURCES.md (Kineto 'kernel'/'Kernel' cat counts, Nsight CUPTI_ACTIVITY_KIND_KERNEL rows)
KERNELS = {
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": 79,
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz": 4,
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": 0,
    "hta/triton_example/triton_example.json.gz": 1,
    "hta/nccl_parser_config/nccl_data.json.gz": 2700,
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 4350,
    "hta/negative_queue_length_values_check/rank0.json.gz": 6080,
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": 14,
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 1465,
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz": 60,
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 1516,
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": 555,
    "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz": 527,
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz": 413,
    "kineto/worker0.1623143089861.pt.trace.json.gz": 8772,
    "nsys-ai/h100_2gpu_1s.sqlite": 3442,
    "nsys-ai/mfu_2gpu_before.sqlite": 4010,
    "nsys-ai/mock.sqlite": 2,
    "nvfuser/ee4fcf30/report1.sqlite": 18,
}


real_lake: list[Lake] = []


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory,
         public_traces: Path) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    root = tmp_path_factory.mktemp("real")
    lake = Lake(root / "lake")
    real_lake.append(lake)
    ids: dict[str, str] = {}
    failed = []
    for rel in KERNELS:
        if not (public_traces / rel).is_file():
            continue  # the full collection is not beside the checkout: the vendored subset (tests/data/SOURCES.md)
        res = ingest_file(public_traces / rel, lake)
        if res.status == "failed":
            failed.append(f"{rel}: {res.error}")
        else:
            ids[rel] = res.trace_id
    assert not failed, failed  # every public trace with kernels ingests
    analysis.materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    yield con, ids
    con.close()


def test_kernel_counts_match_the_raw_files(real) -> None:
    con, ids = real
    got = dict(con.execute("SELECT trace_id, count(*) FROM int_kernel_links GROUP BY 1").fetchall())
    for rel, tid in ids.items():
        assert got.get(tid, 0) == KERNELS[rel], rel
        kpt = con.execute("SELECT kernels + kernels_outside_steps FROM kernels_per_token WHERE trace_id = $t",
                          {"t": tid}).fetchall()
        assert kpt == [(KERNELS[rel],)], rel


def test_decomposition_identity_per_kernel(real) -> None:
    con, _ = real
    bad = con.execute("""
        SELECT trace_id, kernel_seq FROM kernel_taxbreak
        WHERE is_charged AND delta_ft_ns + delta_ct_ns + delta_kt_ns <> t_py_ns + t_sys_ns + CASE
              WHEN i_lib = 1 THEN greatest(t_dispatch_ns, coalesce(t_dispatch_base_ns, t_dispatch_ns))
              ELSE t_dispatch_ns END
           OR (is_linked AND NOT is_charged AND delta_ft_ns + delta_ct_ns + delta_kt_ns <> 0)
           OR (NOT is_linked AND delta_ft_ns IS NOT NULL)
           OR (is_linked AND (t_dispatch_ns < 0 OR t_py_ns < 0))
    """).fetchall()
    assert bad == []
    assert con.execute("SELECT count(*) FROM kernel_taxbreak WHERE is_charged").fetchone()[0] > 1000


def test_scope_totals_are_consistent(real) -> None:
    con, _ = real
    bad = con.execute("""
        SELECT trace_id, scope_kind, scope_key FROM taxbreak_by_scope
        WHERE linked_kernels + orphan_kernels <> kernels
           OR t_orchestrate_ns <> delta_ft_ns + delta_ct_ns + delta_kt_ns
           OR delta_kt_ns <> linked_launches * t_sys_ns
           OR NOT (hdbi IS NULL OR hdbi BETWEEN 0 AND 1)
           OR NOT (hdbi_linked IS NULL OR hdbi_linked BETWEEN 0 AND 1)
           OR (hdbi IS NULL AND t_device_active_ns + t_orchestrate_ns <> 0)
    """).fetchall()
    assert bad == []
    per_trace = con.execute("""
        SELECT s.trace_id FROM taxbreak_by_scope s
        JOIN (SELECT trace_id, count(*) AS n, sum(kernel_dur_ns) AS d FROM int_kernel_links GROUP BY 1) k
          USING (trace_id)
        WHERE s.scope_kind = 'trace' AND (s.kernels <> k.n OR s.t_device_active_ns <> k.d)
    """).fetchall()
    assert per_trace == []
    for kind in ("step", "phase", "op", "kernel"):
        mismatch = con.execute("""
            SELECT t.trace_id FROM taxbreak_by_scope t
            JOIN (SELECT trace_id, sum(kernels) AS k, sum(t_orchestrate_ns) AS o FROM taxbreak_by_scope
                  WHERE scope_kind = $kind GROUP BY 1) s USING (trace_id)
            WHERE t.scope_kind = 'trace' AND (t.kernels <> s.k OR t.t_orchestrate_ns <> s.o)
        """, {"kind": kind}).fetchall()
        assert mismatch == [], kind


def test_linked_plus_orphan_is_all(real) -> None:
    con, _ = real
    assert con.execute("SELECT count(*) FROM int_kernel_links WHERE is_linked = is_orphan").fetchone()[0] == 0
    assert con.execute(
        "SELECT count(*) FROM int_kernel_links WHERE is_orphan <> (orphan_reason IS NOT NULL)").fetchone()[0] == 0


def test_host_partition_sums_to_wall_time(real) -> None:
    con, _ = real
    bad = con.execute("""
        SELECT trace_id, pid, tid FROM host_partition
        WHERE launch_host_ns + launch_blocked_ns + library_ns + framework_ns + sync_ns + other_runtime_ns
              + host_untraced_ns + unresolved_ns <> wall_ns OR least(launch_host_ns, launch_blocked_ns, library_ns,
              framework_ns, sync_ns, other_runtime_ns, host_untraced_ns, unresolved_ns) < 0
    """).fetchall()
    assert bad == []
    assert con.execute("SELECT count(*) FROM host_partition WHERE scope_kind = 'thread'").fetchone()[0] > 10
    # the trace row sums the kernel-launching threads, 'other_threads' the rest; together every thread
    split = con.execute("""
        SELECT t.trace_id FROM host_partition t
        JOIN (SELECT trace_id, sum(wall_ns) AS w, sum(wall_ns) FILTER (WHERE launches_kernels) AS wl
              FROM host_partition WHERE scope_kind = 'thread' GROUP BY trace_id) th USING (trace_id)
        LEFT JOIN host_partition o ON o.trace_id = t.trace_id AND o.scope_kind = 'other_threads'
        WHERE t.scope_kind = 'trace' AND (t.wall_ns + coalesce(o.wall_ns, 0) <> th.w
              OR (th.wl IS NOT NULL AND t.wall_ns <> th.wl))
    """).fetchall()
    assert split == []
    assert con.execute("SELECT count(*) FROM host_partition WHERE scope_kind = 'other_threads'").fetchone()[0] > 0


def test_host_partition_per_step(real) -> None:
    """One row per step, over the threads that launch its kernels: its wall is the step's duration times those
    threads, and its traced parts never exceed what the trace's threads hold."""
    con, _ = real
    steps = con.execute("SELECT count(*) FROM int_steps").fetchone()[0]
    assert steps > 0
    assert con.execute("""
        SELECT count(*) FROM int_steps s JOIN host_partition h ON h.trace_id = s.trace_id AND h.scope_kind = 'step'
         AND h.step_id = s.step_id AND h.wall_ns = s.step_dur_ns * h.threads AND h.threads >= 1
    """).fetchone()[0] == steps
    assert con.execute("SELECT count(*) FROM host_partition WHERE scope_kind = 'step'").fetchone()[0] == steps
    over = con.execute("""
        SELECT s.trace_id, s.step_id FROM host_partition s
        JOIN (SELECT trace_id, sum(launch_host_ns + launch_blocked_ns) AS launch_ns, sum(library_ns) AS library_ns,
                     sum(framework_ns) AS framework_ns, sum(sync_ns) AS sync_ns,
                     sum(other_runtime_ns) AS other_runtime_ns
              FROM host_partition WHERE scope_kind = 'thread' GROUP BY trace_id) t USING (trace_id)
        WHERE s.scope_kind = 'step' AND (s.launch_host_ns + s.launch_blocked_ns > t.launch_ns
              OR s.library_ns > t.library_ns OR s.framework_ns > t.framework_ns OR s.sync_ns > t.sync_ns
              OR s.other_runtime_ns > t.other_runtime_ns)
    """).fetchall()
    assert over == []
    # a trace without its outlier steps holds less of every part than the whole trace, and nothing negative
    excl = con.execute("""
        SELECT x.trace_id FROM host_partition x JOIN host_partition t ON t.trace_id = x.trace_id
         AND t.scope_kind = 'trace'
        WHERE x.scope_kind = 'trace_excl_outliers' AND (x.wall_ns > t.wall_ns OR least(x.wall_ns, x.launch_host_ns,
              x.launch_blocked_ns, x.library_ns, x.framework_ns, x.sync_ns, x.other_runtime_ns, x.host_untraced_ns) < 0
              OR x.launch_host_ns + x.launch_blocked_ns + x.library_ns + x.framework_ns + x.sync_ns
                 + x.other_runtime_ns + x.host_untraced_ns + x.unresolved_ns <> x.wall_ns)
    """).fetchall()
    assert excl == []


def test_device_busy_plus_idle_is_span(real) -> None:
    con, _ = real
    bad = con.execute("""
        SELECT trace_id, device_id FROM device_busy
        WHERE busy_ns + idle_ns <> span_ns OR busy_ns < 0 OR busy_ns > span_ns
           OR idle_launch_late_ns + idle_sync_drain_ns + idle_memcpy_ns + idle_other_ns <> idle_ns
    """).fetchall()
    assert bad == []


def test_skip_and_fusion_sanity(real) -> None:
    con, _ = real
    bad = con.execute("""
        SELECT trace_id FROM skip_by_trace
        WHERE tklqt_ns < 0 OR negative_sum_ns > 0 OR kernel_busy_merged_ns > kernel_sum_ns
           OR gpu_idle_merged_ns < gpu_idle_sum_ns OR gpu_idle_merged_ns < 0 OR busy_in_il_ns > il_ns
           OR busy_in_il_ns > kernel_busy_merged_ns
    """).fetchall()
    assert bad == []
    # occurrences of a chain never exceed those of its first kernel, and the default threshold is 1.0
    assert con.execute("SELECT count(*) FROM fusion_candidates WHERE proximity_score <> 1.0").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM fusion_candidates").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM fusion_candidates WHERE len(chain) <> chain_len").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM fusion_candidates WHERE occurrences > first_kernel_count "
                       "OR occurrences < 1").fetchone()[0] == 0


def _merged_busy_python(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def test_device_busy_matches_an_independent_merge(real) -> None:
    con, ids = real
    lake = real_lake[0]
    checked = 0
    for tid in ids.values():
        ev = lake.read_events(tid).select(["kind", "device_id", "ts_ns", "dur_ns"]).to_pylist()
        per_dev: dict[int, list[tuple[int, int]]] = {}
        for e in ev:
            if e["kind"] in ("kernel", "memcpy", "memset") and e["device_id"] is not None:
                per_dev.setdefault(e["device_id"], []).append((e["ts_ns"], e["ts_ns"] + (e["dur_ns"] or 0)))
        got = dict(con.execute("SELECT device_id, busy_ns FROM device_busy WHERE trace_id = $t", {"t": tid}).fetchall())
        assert got == {d: _merged_busy_python(iv) for d, iv in per_dev.items()}, tid
        all_kernels = [(e["ts_ns"], e["ts_ns"] + e["dur_ns"]) for e in ev if e["kind"] == "kernel"]
        if all_kernels:
            merged = con.execute("SELECT kernel_busy_merged_ns FROM skip_by_trace WHERE trace_id = $t",
                                 {"t": tid}).fetchone()[0]
            assert merged == _merged_busy_python(all_kernels), tid
            checked += 1
    assert checked > 5


def test_warm_up_leftovers_lie_outside_the_step(real) -> None:
    """METHOD.md section 2: the public H100 Qwen trace holds 436 kernels launched before the profiled step
    (no launch in the trace, correlation ids below its first launch); the step's figures exclude them."""
    con, ids = real
    tid = ids["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]
    got = con.execute("SELECT scope_key, kernels, linked_kernels FROM taxbreak_by_scope WHERE trace_id = $t "
                      "AND scope_kind = 'step' ORDER BY scope_key", {"t": tid}).fetchall()
    assert got == [("1", 1029, 1029), ("outside_steps", 436, 0)]


def test_gpu_idle_counts_only_the_il_window(real) -> None:
    """The H100 Qwen trace's 436 warm-up leftovers run before its first framework op: they are clipped out of the
    IL window, so GPU idle is not negative (it read -10.4 ms before the clipping)."""
    con, ids = real
    tid = ids["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]
    il, busy_all, busy_in, idle = con.execute(
        "SELECT il_ns, kernel_busy_merged_ns, busy_in_il_ns, gpu_idle_merged_ns FROM skip_by_trace "
        "WHERE trace_id = $t", {"t": tid}).fetchone()
    assert busy_all > il > busy_in > 0 and idle == il - busy_in


def test_issue_11_figures_on_the_public_traces(real) -> None:
    """The figures issue 11 named, on the traces it named (docs/method.md 'What changed in 2026-12')."""
    con, ids = real

    def one(sql: str, rel: str) -> tuple:
        return con.execute(sql, {"t": ids[rel]}).fetchone()

    trace = "SELECT {} FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'"
    # NCCL kernels link to the collective, never to record_param_comms inside it
    nccl = "hta/nccl_parser_config/nccl_data.json.gz"
    assert one("SELECT count(*) FILTER (WHERE op_name = 'record_param_comms'), count(*) FILTER (WHERE op_name "
               "LIKE 'c10d::%') FROM int_kernel_links WHERE trace_id = $t AND kernel_name ILIKE '%nccl%'",
               nccl)[0] == 0
    assert one("SELECT count(*) FROM int_kernel_links WHERE trace_id = $t AND kernel_name ILIKE '%nccl%' AND "
               "op_name LIKE 'c10d::%'", nccl)[0] > 0
    # HTA's Triton example: the triton_poi_fused cpu_op is no framework op: HDBI 1.0 with 0 % coverage, flagged
    assert one(trace.format("hdbi, linked_fraction, low_coverage"), "hta/triton_example/triton_example.json.gz") == (
        1.0, 0.0, True)
    # the public H100 Qwen trace: T_Orchestrate 104.8 ms over a 49.7 ms launching thread: flagged; HDBI_wall apart;
    # the background thread's ~49.8 ms of "framework" is reported apart
    qwen = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    orch, wall, flag, hw, top = one(trace.format("t_orchestrate_ns, host_wall_ns, orchestrate_exceeds_wall, "
                                                 "hdbi_wall, len(top_orchestrate_kernels)"), qwen)
    assert orch > 2 * wall and flag and 0.5 < hw < 0.7 and top == 3
    assert one("SELECT threads, wall_ns FROM host_partition WHERE trace_id = $t AND scope_kind = 'other_threads'",
               qwen)[1] > 45_000_000
    # the 2-GPU Nsight export: its launch calls mostly waited; the dispatch terms are mostly that wait
    h100 = "nsys-ai/h100_2gpu_1s.sqlite"
    lh, lb, blocked_flag = one(trace.format("host_launch_ns, host_launch_blocked_ns, dispatch_blocked_flag"), h100)
    assert lb > 0.9 * (lh + lb) and blocked_flag
    assert real_lake[-1].catalogue_row(ids[h100])["kernel_gpu_count"] == 2  # the host lists no GPU at all
    # AlexNet: the first iteration (cuDNN autotuning) is an outlier step, and the trace is shown without it
    alex = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    assert one(trace.format("is_outlier_step"), alex) == (True,)
    excl = one("SELECT kernels, hdbi FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = "
               "'trace_excl_outliers'", alex)
    assert excl[0] == 40 and excl[1] > 0.05
    # SGLang decode: T_dispatch_base is the median (mean of the two middle samples), 7,311 ns
    assert one(trace.format("t_dispatch_base_ns"), "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
               ) == (7311,)
    # the 2021 ResNet sample's explicit_convolve kernels are cuDNN library kernels
    resnet = "kineto/worker0.1623143089861.pt.trace.json.gz"
    assert one("SELECT count(*), min(i_lib) FROM kernel_taxbreak WHERE trace_id = $t AND kernel_name LIKE "
               "'%explicit_convolve%'", resnet) == (6, 1)


def test_each_public_trace_is_its_own_workload(real) -> None:
    # issue 28: the public traces (several models, GPUs, GPU counts, tools) never share a workload key, not even
    # the same model on two GPUs (Qwen1.5-0.5B on H100 and on MI300X) or one program at two GPU counts
    con, ids = real
    runs, workloads = con.execute("SELECT count(*), count(DISTINCT workload_id) FROM run_spec").fetchone()
    assert runs == len(ids) >= 5 and workloads == runs
    assert con.execute("SELECT count(*) FROM workload_trends WHERE run_seq <> 1 OR runs_in_workload <> 1"
                       ).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM workload_changes").fetchone()[0] == 0  # one run each: no baseline
