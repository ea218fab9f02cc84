"""The verdict (sql/diagnosis.sql, docs/method.md "The verdict"): one tiny trace per class, built from code, with the
shares computed by hand. Times in ns; GPU H100, so T_sys = 4510 ns (default table)."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest

from taxbreak.engine.analysis import materialize
from taxbreak.engine.plan import sql_files
from taxbreak.ingest.lake import Lake

from .scenarios import ev, kernel, write_trace

N = 30


def _launched(t: str, i: int, op_ts: int, launch_ts: int, k_ts: int, k_dur: int, with_op: bool = True) -> list[dict]:
    rows = [ev(t, "runtime_api", "cudaLaunchKernel", launch_ts, 20, "1", "1", correlation_id=i + 1)]
    if with_op:
        rows.append(ev(t, "framework_op", "aten::op", op_ts, launch_ts + 30 - op_ts, "1", "1", external_id=i + 1))
    rows.append(kernel(t, f"k{i % 3}", k_ts, k_dur, "1", i + 1, ext=i + 1))
    return rows


def device_bound(t: str) -> list[dict]:  # back-to-back kernels, launched early: window [0, 32000), busy 30000
    return [r for i in range(N) for r in _launched(t, i, i * 50, i * 50 + 20, 2000 + i * 1000, 1000)]


def host_bound(t: str) -> list[dict]:  # each kernel launched after the previous one ended
    return [r for i in range(N) for r in _launched(t, i, i * 1000, i * 1000 + 500, i * 1000 + 900, 100)]


def sync_bound(t: str) -> list[dict]:  # a device synchronize after each kernel returns inside the next gap
    rows = []
    for i in range(N):
        rows += _launched(t, i, i * 1000, i * 1000 + 10, i * 1000 + 50, 300)
        rows.append(ev(t, "runtime_api", "cudaDeviceSynchronize", i * 1000 + 40, 320, "1", "1"))
    return rows


def transfer_bound(t: str) -> list[dict]:  # a memcpy of 800 after each 100 ns kernel
    rows = []
    for i in range(N):
        rows += _launched(t, i, i * 1000, i * 1000 + 2, i * 1000 + 10, 100)
        rows.append(ev(t, "memcpy", "Memcpy HtoD", i * 1000 + 110, 800, "1", "7", device_id=0, stream_id=7))
    return rows


def balanced(t: str) -> list[dict]:  # launched in time, started late (cause 'other'), busy half the window
    return [r for i in range(N) for r in _launched(t, i, i * 1000 + 500, i * 1000 + 550, 1000 + i * 1000 + 100, 500)]


def host_bound_hdbi_high(t: str) -> list[dict]:  # long kernels, long late gaps, little dispatch: HDBI >= 0.5
    p = 40_000
    return [r for i in range(N) for r in _launched(t, i, i * p + 30_000, i * p + 30_020, i * p + 30_100, 8000)]


def unlinked(t: str) -> list[dict]:  # the host-bound pattern without framework ops: nothing linked
    return [r for i in range(N) for r in _launched(t, i, 0, i * 1000 + 500, i * 1000 + 900, 100, with_op=False)]


def few(t: str) -> list[dict]:
    return [r for i in range(5) for r in _launched(t, i, i * 1000, i * 1000 + 500, i * 1000 + 900, 100)]


CASES = {"device": device_bound, "host": host_bound, "sync": sync_bound, "transfer": transfer_bound,
         "balanced": balanced, "host_hdbi_high": host_bound_hdbi_high, "unlinked": unlinked, "few": few}


@pytest.fixture(scope="module")
def diag(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root: Path = tmp_path_factory.mktemp("diag")
    lake = Lake(root / "lake")
    ids = {}
    for n, (key, build) in enumerate(CASES.items()):
        tid = f"{n + 1:x}" * 64
        ids[tid[:64]] = key
        write_trace(lake, tid[:64], build(tid[:64]), gpu="NVIDIA H100", file_name=f"{key}.json")
    materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    cur = con.execute("SELECT * FROM diagnosis WHERE scope_kind = 'trace'")
    cols = [d[0] for d in cur.description]
    out = {ids[r[0]]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}
    con.close()
    return out


def test_device_bound_and_hdbi_disagreement(diag: dict) -> None:
    d = diag["device"]
    assert d["bound"] == "device-bound"
    assert d["window_ns"] == 32_000 and d["gpus"] == 1 and d["kernels"] == N
    assert d["kernel_busy_share"] == pytest.approx(30_000 / 32_000)
    assert d["host_idle_share"] == pytest.approx(2_000 / 32_000)  # the wait before the first kernel
    # HDBI = 30000 / (30000 + 30 x (20 dispatch + 4510)) = 0.181: host-leaning, named as a disagreement
    assert d["hdbi"] == pytest.approx(30_000 / (30_000 + N * (20 + 4510)), abs=1e-6)
    assert d["hdbi_disagrees"] and "reads host-leaning" in d["disagreement"]


def test_host_bound(diag: dict) -> None:
    d = diag["host"]
    assert d["bound"] == "host-bound"
    # window [0, 30000): 29 gaps of 900 ns launched late plus 900 ns before the first kernel
    assert d["idle_launch_late_ns"] == 29 * 900 + 900 and d["window_ns"] == 30_000
    assert d["host_idle_share"] == pytest.approx(0.9)
    assert not d["hdbi_disagrees"] and d["disagreement"] is None


def test_sync_bound(diag: dict) -> None:
    d = diag["sync"]
    assert d["bound"] == "sync-bound"
    assert d["idle_sync_drain_ns"] == 29 * 700 and d["window_ns"] == 29 * 1000 + 350
    assert d["sync_idle_share"] == pytest.approx(20_300 / 29_350)


def test_transfer_bound(diag: dict) -> None:
    d = diag["transfer"]
    assert d["bound"] == "transfer-bound"
    # window [0, 29110): kernels 3000, memcpys 29 x 800 inside it (the last one starts at the window's end)
    assert d["window_ns"] == 29_110 and d["kernel_busy_ns"] == 3000 and d["transfer_ns"] == 29 * 800
    assert d["transfer_share"] == pytest.approx(29 * 800 / 29_110)


def test_balanced(diag: dict) -> None:
    d = diag["balanced"]
    assert d["bound"] == "balanced"
    assert d["window_ns"] == 30_100 and d["idle_other_ns"] == 29 * 500
    assert d["busy_share"] == pytest.approx(15_000 / 30_100)


def test_host_bound_while_hdbi_reads_device(diag: dict) -> None:
    d = diag["host_hdbi_high"]
    assert d["bound"] == "host-bound"
    assert d["hdbi"] == pytest.approx(240_000 / (240_000 + N * (20 + 4510)), abs=1e-6)  # 0.638
    assert d["hdbi_disagrees"] and "reads device-leaning" in d["disagreement"]


def test_no_linked_kernel_leads_with_hdbi_wall(diag: dict) -> None:
    d = diag["unlinked"]
    assert d["hdbi"] is None and d["lead_index"] == "hdbi_wall" and "HDBI is undefined" in d["hdbi_note"]
    assert d["bound"] == "host-bound"  # the launches still say the GPU waits for them


def test_not_enough_evidence(diag: dict) -> None:
    d = diag["few"]
    assert d["bound"] == "not enough evidence" and d["confidence"] == "low"
    assert "5 kernel(s)" in d["reason"]


def test_median_launch_wait(diag: dict) -> None:
    """The trace's median launch wait (kernel start - launch call start over its charged launches): an even count
    takes the mean of the two middle samples, a scope without samples has none."""
    # device: waits 1980 + 950 i for i < 30, the middle two i = 14 and 15
    assert diag["device"]["launch_samples"] == N and diag["device"]["median_launch_wait_ns"] == 1980 + 950 * 14.5
    assert diag["host"]["median_launch_wait_ns"] == 400 and diag["few"]["median_launch_wait_ns"] == 400
    assert diag["unlinked"]["launch_samples"] == 0 and diag["unlinked"]["median_launch_wait_ns"] is None


def _wait_median_sql(samples: str) -> str:
    """int_scope_kernels.sql's median by sort (its CTE wait_m, as the file has it) over ``samples``, a query of
    (sid, v)."""
    text = next(f for f in sql_files() if f.name == "int_scope_kernels").text
    start = text.index("\nwait_m AS (") + 1
    depth = 0
    for end in range(text.index("(", start), len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    return f"WITH wait_v AS ({samples}), {text[start:end + 1]} SELECT sid, median_wait FROM wait_m ORDER BY sid"


def test_median_by_sort_is_duckdbs_median() -> None:
    """Bit for bit DuckDB's median(BIGINT) (quantile_cont(v, 0.5), DOUBLE): odd and even counts, one sample,
    duplicates, negatives, values near 2^62 (where lo + (hi - lo) / 2 would differ in the last bit)."""
    groups = [[7], [3, 1], [5, 1, 3], [4, 4, 4, 4], [1, 2, 2, 3], [-7, 4], [-5, -5, -2, 9, 11, 11],
              [301245584965428525, 3999017047563157035], [-2**62, 2**62 - 1, 2**62], [0, 0]]
    rnd = random.Random(27)
    for _ in range(300):
        n = rnd.choice([1, 2, 3, 4, 5, rnd.randint(6, 200)])
        span = rnd.choice([3, 1000, 10**9, 2**62])
        groups.append([rnd.randint(-span, span) for _ in range(n)])
    rows = [(g, v) for g, vals in enumerate(groups) for v in vals]
    con = duckdb.connect()
    con.execute("CREATE TABLE s (sid BIGINT, v BIGINT)")
    con.executemany("INSERT INTO s VALUES (?, ?)", rows)
    want = con.execute("SELECT sid, median(v) FROM s GROUP BY sid ORDER BY sid").fetchall()
    assert con.execute(_wait_median_sql("SELECT sid, v FROM s")).fetchall() == want
    assert [m for _, m in want[:3]] == [7.0, 2.0, 3.0]


def test_median_by_sort_spills_where_median_runs_out_of_memory(tmp_path: Path) -> None:
    """median() holds a group's every value in one vector it cannot spill (10 M kernels in one trace: 128 MiB past
    bench_analysis's 488 MiB limit); the sort in int_scope_kernels.sql spills and gives the same value. Here 3 M
    samples of one scope under a 28 MB memory_limit: median() asks for one 32 MiB vector (2^22 values), the sort needs
    < 20 MB."""
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET temp_directory = $d", {"d": str(tmp_path / "spill")})
    samples = "SELECT 1 AS sid, CAST(hash(i) % 1000003 AS BIGINT) AS v FROM range(3000000) r(i)"
    want = con.execute(f"SELECT 1, median(v) FROM ({samples})").fetchall()
    con.execute("SET memory_limit = '28MB'")
    with pytest.raises(duckdb.OutOfMemoryException):
        con.execute(f"SELECT median(v) FROM ({samples})").fetchall()
    assert con.execute(_wait_median_sql(samples)).fetchall() == want


def _random_steps(t: str, rnd: random.Random) -> list[dict]:
    """Twelve decode steps on two GPUs: kernels on a 100 ns grid (so intervals touch each other and the steps'
    edges), launched before or after the GPU frees up, some running past their step's end, with memcpys and device
    synchronizes between them."""
    rows, corr = [], 0
    for s in range(12):
        start = 5000 + s * 40_000
        rows.append(ev(t, "user_annotation", f"decode_step#{s}", start, rnd.choice([20_000, 30_000, 35_000]), "1", "1"))
        for _ in range(rnd.randint(3, 25)):
            corr += 1
            launch = start + 100 * rnd.randint(0, 300)
            k_ts = launch + 100 * rnd.randint(0, 60)
            rows += [ev(t, "runtime_api", "cudaLaunchKernel", launch, 20, "1", "1", correlation_id=corr),
                     ev(t, "framework_op", "aten::op", launch - 50, 80, "1", "1", external_id=corr),
                     kernel(t, f"k{corr % 4}", k_ts, 100 * rnd.randint(1, 40), "1", corr, ext=corr,
                            device=rnd.choice([0, 0, 1]))]
            if rnd.random() < 0.2:
                rows.append(ev(t, "memcpy", "Memcpy HtoD", k_ts + 100 * rnd.randint(0, 50), 100 * rnd.randint(1, 9),
                               "1", "7", device_id=rnd.choice([0, 1]), stream_id=7))
            if rnd.random() < 0.15:
                rows.append(ev(t, "runtime_api", "cudaDeviceSynchronize", launch + 30, 100 * rnd.randint(1, 30),
                               "1", "1"))
    return rows


def _clipped(ivls: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in ivls)


def test_window_evidence_equals_clipping_every_interval(tmp_path: Path) -> None:
    """Each window's idle time by cause and kernel busy time, which diagnosis.sql takes as differences of running
    sums at the window's two edges, equal the sum over every idle gap (device_idle_gaps) and every merged kernel
    interval of the window's GPUs clipped to the window, plus the waits before a GPU's first work and after its last
    (device_busy); a phase is its steps' sum."""
    lake = Lake(tmp_path / "lake")
    tids = []
    for seed in (1, 2, 3):
        tid = f"{seed:x}" * 64
        write_trace(lake, tid, _random_steps(tid, random.Random(seed)), gpu="NVIDIA H100", file_name=f"r{seed}.json")
        tids.append(tid)
    materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    checked = 0
    for tid in tids:
        gaps: dict[int, list] = {}
        for dev, s, e, cause in con.execute("SELECT device_id, gap_start_ns, gap_end_ns, cause FROM device_idle_gaps "
                                            "WHERE trace_id = $t", {"t": tid}).fetchall():
            gaps.setdefault(dev, []).append((s, e, cause))
        busy: dict[int, list] = {}
        for dev, s, e in con.execute("SELECT device_id, kernel_ts_ns, kernel_end_ns FROM kernel_taxbreak "
                                     "WHERE trace_id = $t ORDER BY kernel_ts_ns", {"t": tid}).fetchall():
            m = busy.setdefault(dev, [])
            if m and s <= m[-1][1]:
                m[-1] = (m[-1][0], max(m[-1][1], e))
            else:
                m.append((s, e))
        edges = {d: (f, last) for d, f, last in con.execute(
            "SELECT device_id, first_start_ns, last_end_ns FROM device_busy WHERE trace_id = $t AND kernels > 0",
            {"t": tid}).fetchall()}
        step_gpus: dict[str, set] = {}
        for step, dev in con.execute("SELECT DISTINCT CAST(step_id AS VARCHAR), device_id FROM kernel_taxbreak "
                                     "WHERE trace_id = $t AND step_id IS NOT NULL", {"t": tid}).fetchall():
            step_gpus.setdefault(step, set()).add(dev)
        rows = con.execute("SELECT scope_kind, scope_key, window_start_ns, window_end_ns, gpus, idle_launch_late_ns, "
                           "idle_sync_drain_ns, idle_memcpy_ns, idle_other_ns, kernel_busy_ns FROM diagnosis "
                           "WHERE trace_id = $t", {"t": tid}).fetchall()
        steps = []
        for kind, key, ws, we, ngpus, late, sync, memcpy, other, kbusy in rows:
            if kind == "phase":
                continue
            devs = sorted(edges) if kind == "trace" else sorted(step_gpus.get(key, ()))
            want = {"launch_late": 0, "sync_drain": 0, "memcpy": 0, "other": 0, "busy": 0}
            for d in devs:
                for c in ("launch_late", "sync_drain", "memcpy", "other"):
                    want[c] += _clipped([(s, e) for s, e, cause in gaps.get(d, []) if cause == c], ws, we)
                want["busy"] += _clipped(busy[d], ws, we)
                want["launch_late"] += max(0, min(edges[d][0], we) - ws)
                want["other"] += max(0, we - max(edges[d][1], ws))
            assert ngpus == len(devs), (tid, kind, key)
            assert (late, sync, memcpy, other, kbusy) == tuple(want.values()), (tid, kind, key)
            checked += 1
            if kind == "step":
                steps.append((late, sync, memcpy, other, kbusy))
        phase = [r[5:] for r in rows if r[0] == "phase"]
        assert phase == [tuple(sum(v) for v in zip(*steps, strict=True))]
        assert sum(1 for r in rows if r[0] == "step") == 12
        assert min(v for r in steps for v in r[:4] if v) > 0 and all(r[4] > 0 for r in steps)
    con.close()
    assert checked == 3 * 13


VENDORED = Path(__file__).resolve().parents[1] / "data" / "public"


def test_vendored_public_traces_invariants(tmp_path: Path) -> None:
    """Over every vendored public trace: never host-bound with the GPU busy >= 85% of the window, never
    device-bound when late launches idle it more than half the window; the H100 Qwen trace, whose HDBI 0.302 reads
    host-leaning while its GPU is busy 91%, is device-bound with the disagreement named."""
    from taxbreak.ingest import ingest_file

    lake = Lake(tmp_path / "lake")
    files = sorted(p for p in VENDORED.rglob("*") if p.suffix in (".gz", ".sqlite"))
    assert len(files) >= 10
    for p in files:
        ingest_file(p, lake)
    materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    rows = con.execute("SELECT m.file_name, d.scope_kind, d.bound, d.busy_share, d.host_idle_share, d.hdbi_disagrees "
                       "FROM diagnosis d JOIN trace_meta m USING (trace_id)").fetchall()
    assert len({r[0] for r in rows if r[1] == "trace"}) >= 10
    for name, kind, bound, busy, host_idle, _ in rows:
        if busy is not None and busy >= 0.85:
            assert bound != "host-bound", (name, kind)
        if host_idle is not None and host_idle > 0.5:
            assert bound != "device-bound", (name, kind)
    qwen = [r for r in rows if r[0].startswith("Qwen_Qwen1.5") and r[1] == "trace"]
    assert qwen and qwen[0][2] == "device-bound" and qwen[0][5]
    con.close()
