"""Issue 30 item 5, the analysis side: two launches sharing a correlation id, and a kernel longer than anything its
trace or step could hold, are flagged and counted instead of giving a wrong link or an HDBI of 1.000 in silence.
Times in ns, hand-made traces written straight into a lake (tests/sql/scenarios.py)."""

from __future__ import annotations

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest.lake import Lake
from taxbreak.read import readmodel

from .scenarios import ev, kernel, write_trace

SHARED_ID, LONG_ID = "e" * 64, "f" * 64
P, T = "100", "1"


def shared_rows(t: str = SHARED_ID) -> list[dict]:
    """aten::mm [1000, 3000) launches twice under correlation id 7 ([1100, 1200) and [2000, 2100)), each launch's
    kernel 20 us after it; corr 8 [2200, 2300) -> a kernel at 2400: a normal link beside them."""
    return [
        ev(t, "user_annotation", "ProfilerStep#1", 900, 10_000, P, T),
        ev(t, "framework_op", "aten::mm", 1000, 2000, P, T, external_id=1),
        ev(t, "runtime_api", "cudaLaunchKernel", 1100, 100, P, T, correlation_id=7, external_id=1),
        kernel(t, "gemm_a", 21_100, 500, P, 7, 1),
        ev(t, "runtime_api", "cudaLaunchKernel", 2000, 100, P, T, correlation_id=7, external_id=1),
        kernel(t, "gemm_b", 22_000, 500, P, 7, 1),
        ev(t, "runtime_api", "cudaLaunchKernel", 2200, 100, P, T, correlation_id=8, external_id=1),
        kernel(t, "gemm_c", 23_000, 500, P, 8, 1),
    ]


def long_rows(t: str = LONG_ID) -> list[dict]:
    """A 2 ms step [0, 2 ms) whose thread launches a 1,000 s kernel and a 100 us one."""
    return [
        ev(t, "user_annotation", "ProfilerStep#1", 0, 2_000_000, P, T),
        ev(t, "framework_op", "aten::mm", 1000, 1_000_000, P, T, external_id=1),
        ev(t, "runtime_api", "cudaLaunchKernel", 2000, 1000, P, T, correlation_id=1, external_id=1),
        kernel(t, "corrupt_kernel", 5000, 1_000_000_000_000, P, 1, 1),
        ev(t, "framework_op", "aten::add", 1_100_000, 500_000, P, T, external_id=2),
        ev(t, "runtime_api", "cudaLaunchKernel", 1_200_000, 1000, P, T, correlation_id=2, external_id=2),
        kernel(t, "add_kernel", 1_300_000, 100_000, P, 2, 2),
    ]


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root = tmp_path_factory.mktemp("silent")
    lake = Lake(root / "lake")
    write_trace(lake, SHARED_ID, shared_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="shared.json")
    write_trace(lake, LONG_ID, long_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="long.json")
    analysis.materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    yield con
    con.close()


def test_kernels_of_a_shared_correlation_id_are_unlinked_and_counted(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("""SELECT kernel_name, launch_ts_ns, is_linked, orphan_reason, shared_correlation_launches
                        FROM int_kernel_links WHERE trace_id = $t ORDER BY kernel_seq""", {"t": SHARED_ID}).fetchall()
    # before: gemm_b was tied to the launch at 1100 (queueing 20,900 ns instead of 20,000)
    assert got == [("gemm_a", None, False, "shared_correlation_id", 2),
                   ("gemm_b", None, False, "shared_correlation_id", 2),
                   ("gemm_c", 2200, True, None, 1)]
    trace = wh.execute("""SELECT kernels, linked_kernels, orphan_kernels, shared_correlation_kernels
                          FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'trace'""",
                       {"t": SHARED_ID}).fetchone()
    assert trace == (3, 1, 2, 2)
    (h,) = readmodel.trace_headlines(wh, [SHARED_ID])
    assert "shared_correlation_ids" in readmodel.flags(h)
    assert any(c["kind"] == "shared_correlation" and c["text"].startswith("2 kernel(s) share their correlation id")
               for c in readmodel.caveats(h))


def test_a_kernel_longer_than_its_step_is_flagged(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("""SELECT scope_kind, host_wall_ns, impossible_duration_kernels, max_kernel_dur_ns, hdbi > 0.999
                        FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind IN ('trace', 'step')
                        ORDER BY scope_kind""", {"t": LONG_ID}).fetchall()
    # the thread's wall time: the step window [0, 2 ms); for the trace its traced span [1000, 1,600,000) (the step
    # annotation is no host work); 1e12 ns > 10 x either; the 1e5 ns kernel is not
    assert got == [("step", 2_000_000, 1, 1_000_000_000_000, True), ("trace", 1_599_000, 1, 1_000_000_000_000, True)]
    (h,) = readmodel.trace_headlines(wh, [LONG_ID])
    assert "impossible_kernel_durations" in readmodel.flags(h)
    cav = readmodel.caveats(h)
    assert cav[0] == {"kind": "impossible_durations", "text": (
        "1 kernel(s) last longer than 10x the launching threads' wall time 1.599 ms (the longest 1,000,000.000 ms): "
        "corrupt durations; they are in T_DeviceActive, so HDBI and AKD are not to be read")}
    assert readmodel.main_caveat(None, cav) == cav[0]["text"]


def test_ordinary_traces_have_zero_counts(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("""SELECT trace_id = $s, shared_correlation_kernels, impossible_duration_kernels
                        FROM taxbreak_by_scope WHERE scope_kind = 'trace' ORDER BY 1""", {"s": SHARED_ID}).fetchall()
    assert got == [(False, 0, 1), (True, 2, 0)]
    assert wh.execute("""SELECT count(*) FROM taxbreak_by_scope WHERE scope_kind IN ('op', 'kernel', 'phase')
                         AND (shared_correlation_kernels IS NOT NULL OR impossible_duration_kernels IS NOT NULL)
                      """).fetchone() == (0,)
