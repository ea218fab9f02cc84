"""The last fidelity rules of issue 24, on hand-built traces (docs/method.md sections 2-4):

- section 3: a range that began inside a Python ``__enter__`` and outlives it is cut at its parent's end for
  nesting; time with exactly one event open belongs to that event, deeper time to the event still open one level
  up: nothing is "unresolved" there.
- section 4: a trace that names no GPU but whose kernel names state the architecture (``sm90_*``) takes that
  architecture's T_sys default (H100's 4.51 µs) and says it was inferred; ``sm80_*`` states nothing (Hopper runs
  sm80 kernels).
- section 2: T_dispatch_base from fewer than 10 samples is flagged as unstable in every reader.

``enter_rows``, thread 1/1 (no outer frame):
  python_function contextlib.py(135): __enter__ [1000, 2000)
  framework_op my_region ext 1 [1500, 5000)       began inside __enter__, outlives it
      cudaLaunchKernel corr 1 [3000, 3200)  -> sm90_xmma_gemm_kernel [3500, 4000)
thread 1/2 (the same under an outer frame model.forward [500, 6000)):
  python_function contextlib.py(135): __enter__ [1000, 2000)
  framework_op my_region ext 2 [1500, 5000)
      cudaLaunchKernel corr 2 [3000, 3200)  -> sm90_xmma_gemm_kernel [4000, 4500)
Thread 1: wall [1000, 5000) = 4000: launch 200, framework 3800 ([1000, 3000) and [3200, 5000)), unresolved 0
(before: [2000, 3000) and [3200, 5000), 2800 ns, were unresolved).  Thread 2: wall [500, 6000) = 5500: launch 200,
framework 5300, unresolved 0.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest.lake import Lake
from taxbreak.read import readmodel

from .scenarios import ev, kernel, write_trace

ENTER_ID = "5" * 64
SM80_ID = "6" * 64
BASE_ID = "7" * 64


def enter_rows(t: str = ENTER_ID, kernel_name: str = "sm90_xmma_gemm_f16f16_f32_nn_n_tilesize128x128x32") -> list:
    P = "1"
    rows = []
    for tid, ext, k_ts in (("1", 1, 3500), ("2", 2, 4000)):
        if tid == "2":
            rows.append(ev(t, "python_function", "model.py(10): forward", 500, 5500, P, tid))
        rows += [
            ev(t, "python_function", "contextlib.py(135): __enter__", 1000, 1000, P, tid),
            ev(t, "framework_op", "my_region", 1500, 3500, P, tid, external_id=ext),
            ev(t, "runtime_api", "cudaLaunchKernel", 3000, 200, P, tid, correlation_id=ext, external_id=ext),
            kernel(t, kernel_name, k_ts, 500, P, ext, ext),
        ]
    return rows


def base_rows(t: str = BASE_ID) -> list:
    """Three framework-native kernels with t_dispatch 1000, 2000, 4000 ns (> 100): T_dispatch_base 2000 from 3
    samples, and one library kernel (cuBLAS) that is charged it."""
    P, T = "1", "1"
    rows = []
    for i, disp in enumerate((1000, 2000, 4000, 3000)):
        op_ts = 10_000 * (i + 1)
        name = "elementwise_kernel" if i < 3 else "cublasLt::gemm_kernel"
        rows += [
            ev(t, "framework_op", "aten::mm" if i == 3 else "aten::add", op_ts, 6000, P, T, external_id=i + 1),
            ev(t, "runtime_api", "cudaLaunchKernel", op_ts + disp, 100, P, T, correlation_id=i + 1,
               external_id=i + 1),
            kernel(t, name, op_ts + 5000, 1000, P, i + 1, i + 1),
        ]
    return rows


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root = tmp_path_factory.mktemp("fidelity_last")
    lake = Lake(root / "lake")
    write_trace(lake, ENTER_ID, enter_rows(), gpu="", file_name="enter_nogpu.json")
    write_trace(lake, SM80_ID, enter_rows(SM80_ID, "sm80_xmma_gemm_f16f16_f32_nn_n"), gpu="",
                file_name="sm80_nogpu.json")
    write_trace(lake, BASE_ID, base_rows(), gpu="NVIDIA H200", file_name="few_samples.json")
    analysis.materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    yield con
    con.close()


def test_range_outliving_its_enter_is_not_unresolved(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("""SELECT tid, wall_ns, launch_host_ns, framework_ns, host_untraced_ns, unresolved_ns
                        FROM host_partition WHERE trace_id = $t AND scope_kind = 'thread' ORDER BY tid""",
                     {"t": ENTER_ID}).fetchall()
    assert got == [("1", 4000, 200, 3800, 0, 0), ("2", 5500, 200, 5300, 0, 0)]


def test_gpu_inferred_from_sm90_kernel_names(wh: duckdb.DuckDBPyConnection) -> None:
    got = dict((r[0], r[1:]) for r in wh.execute(
        """SELECT trace_id, gpu_name, t_sys_ns, t_sys_rule, t_sys_is_default, inferred_gpu_name, inferred_gpu_rule
           FROM trace_launch_floor""").fetchall())
    assert got[ENTER_ID] == (None, 4510, "default_h100", True, "H100", "arch_sm90")
    assert got[SM80_ID] == (None, 4500, "default_other", True, None, None)  # sm80 runs on Hopper too
    assert got[BASE_ID] == ("NVIDIA H200", 4300, "default_h200", True, None, None)
    h = readmodel.trace_headlines(wh, [ENTER_ID])[0]
    text = next(c["text"] for c in readmodel.caveats(h) if c["kind"] == "launch_floor")
    assert text.startswith("T_sys = 4.51 µs is the documented default (default_h100) for GPU H100 (inferred from "
                           "its kernel names, arch_sm90: the trace names no GPU)")


def test_dispatch_base_from_few_samples_is_flagged(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("""SELECT scope_kind, t_dispatch_base_ns, t_dispatch_base_samples, dispatch_base_unstable
                        FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind IN ('trace', 'op')
                        ORDER BY scope_kind, scope_key""", {"t": BASE_ID}).fetchall()
    # the trace's figure on every scope row: the base is the trace's, and so is its sample count
    assert got == [("op", 2000, 3, True), ("op", 2000, 3, True), ("trace", 2000, 3, True)]
    # the library kernel is charged the base as framework translation, the rest of its dispatch as library
    assert wh.execute("""SELECT delta_ft_ns, delta_ct_ns FROM kernel_taxbreak WHERE trace_id = $t AND i_lib = 1""",
                      {"t": BASE_ID}).fetchall() == [(2000, 1000)]
    h = readmodel.trace_headlines(wh, [BASE_ID])[0]
    assert "dispatch_base_unstable" in readmodel.flags(h)
    text = next(c["text"] for c in readmodel.caveats(h) if c["kind"] == "dispatch_base")
    assert text == ("T_dispatch_base 2000 ns is the median of only 3 sample(s): unstable, one mis-ruled kernel "
                    "moves ΔFT/ΔCT")
    # the enter trace's kernels are cuBLAS GEMMs (cublas_arch_gemm) under no dispatcher op: no sample, so no base
    # and no "unstable" flag
    assert wh.execute("""SELECT t_dispatch_base_ns, t_dispatch_base_samples, dispatch_base_unstable
                         FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'""",
                      {"t": ENTER_ID}).fetchall() == [(None, 0, False)]


def test_flag_reaches_every_reader(wh: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """summary (text and --json) and the report's trace page show the unstable base."""
    from taxbreak.read import report

    s = readmodel.summary(None, BASE_ID[:8], con=wh)
    assert "dispatch_base_unstable" in readmodel.format_summary(s)
    assert any(c["kind"] == "dispatch_base" and "unstable" in c["text"] for c in s["caveats"])
    data = report.collect(wh)
    page = report.render_trace_page(next(t for t in data["traces"] if t["trace_id"] == BASE_ID))
    assert "median of only 3 sample(s): unstable" in page


def test_the_range_open_at_depth_one_need_not_be_the_latest_begun(tmp_path: Path) -> None:
    """thread 1/1:  __enter__ [1000, 2000), my_region [1500, 5000), cudaLaunchKernel [1600, 1700) inside it.
    After 2000 one range is open, my_region, though the launch began later (and ended at 1700): the segment
    [2000, 5000) is framework time, found as the range ending last of those begun by 2000 (issue 27: that lookup
    replaced a join of such segments with every range open over them).  Wall [1000, 5000) = 4000: launch 100,
    framework 3900, unresolved 0."""
    t, P, tid = "8" * 64, "1", "1"
    rows = [
        ev(t, "python_function", "contextlib.py(135): __enter__", 1000, 1000, P, tid),
        ev(t, "framework_op", "my_region", 1500, 3500, P, tid, external_id=1),
        ev(t, "runtime_api", "cudaLaunchKernel", 1600, 100, P, tid, correlation_id=1, external_id=1),
        kernel(t, "elementwise_kernel", 3500, 500, P, 1, 1),
    ]
    write_trace(Lake(tmp_path / "lake"), t, rows, gpu="NVIDIA H100 80GB HBM3", file_name="latest_begun.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    with duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True) as con:
        got = con.execute("""SELECT wall_ns, launch_host_ns, framework_ns, host_untraced_ns, unresolved_ns
                             FROM host_partition WHERE trace_id = $t AND scope_kind = 'thread'""", {"t": t}).fetchall()
    assert got == [(4000, 100, 3900, 0, 0)]
