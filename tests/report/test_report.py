"""`taxbreak report`: the data it shows, well-formed SVG, and a render in a real headless browser (chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import duckdb
import pytest

from taxbreak import plots
from taxbreak.cli import main
from taxbreak.report import collect, render_html

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def data(wh: dict) -> dict:
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        return collect(con)
    finally:
        con.close()


@pytest.fixture(scope="module")
def report_file(wh: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", "--warehouse", str(wh["warehouse"]), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None and shutil.which("apt-get"):
        subprocess.run("apt-get update && apt-get install -y --no-install-recommends chromium", shell=True,
                       capture_output=True, timeout=600, check=False)
        exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium is not installed and `apt-get install chromium` failed (no root or no network)")
    return exe


def _by_file(data: dict) -> dict:
    return {t["trace_id"]: t for t in data["traces"]}


def test_collect_traces_and_sweep(wh: dict, data: dict) -> None:
    traces = _by_file(data)
    assert set(traces) == set(wh["ids"].values())
    dense1 = traces[wh["ids"]["dense_bs1"]]
    assert dense1["kernels"] == wh["kernels"]["dense_bs1"] and dense1["kpt"] == wh["kernels"]["dense_bs1"] / 4
    assert dense1["t_sys_ns"] == 4510 and dense1["t_sys_is_default"]
    sweep = data["sweeps"]["synthetic-dense-L2 sl128"]  # no sweep name: model + sequence length
    assert [p["batch_size"] for p in sweep["points"]] == [1, 4, 16]
    hd = [p["hdbi"] for p in sweep["points"]]
    assert hd[0] < hd[1] < 0.5 < hd[2]  # bigger batches: more device work per launch
    # HDBI crosses 0.5 between bs 4 and 16, interpolated linearly in log2(batch size) (sql/sweep_transition.sql)
    assert sweep["transition_bs"] == pytest.approx(2 ** (2 + 2 * (0.5 - hd[1]) / (hd[2] - hd[1])), rel=1e-12)
    assert 4 < sweep["transition_bs"] < 16
    assert not any(k.startswith("synthetic-moe-L2") for k in data["sweeps"])  # one batch size is no sweep


def test_timeline_is_the_first_decode_step(wh: dict, data: dict) -> None:
    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    step = t["timeline_step"]
    assert step["phase"] == "decode" and step["step_name"].startswith("decode")
    tl = t["timeline"]
    assert tl["kernels"] == step["kernels"]
    lanes = dict(tl["lanes"])
    assert len(lanes["launch calls"]) == step["kernels"]  # one launch call per kernel, no graphs
    assert len(lanes["framework ops"]) == step["kernels"]  # the synthetic eager step: one op per kernel
    assert sum(len(b) for name, b in tl["lanes"] if name.startswith("GPU")) == step["kernels"]
    assert 0 < tl["idle_ns"] < tl["window_ns"]
    # the window runs from the first launch call or kernel to the last kernel's end; the device is idle in it
    # wherever none of these kernels runs (one stream, no copies in a synthetic decode step)
    kernels = sorted((s, e) for name, boxes in tl["lanes"] if name.startswith("GPU") for s, e, *_ in boxes)
    t0 = min(s for s, *_ in [*kernels, *lanes["launch calls"]])
    t1 = max(e for _s, e in kernels)
    assert tl["window_ns"] == t1 - t0
    busy_ns, run_s, run_e = 0, kernels[0][0], kernels[0][1]
    for s, e in kernels[1:]:
        if s > run_e:
            busy_ns, run_s = busy_ns + run_e - run_s, s
        run_e = max(run_e, e)
    busy_ns += run_e - run_s
    assert tl["idle_ns"] == t1 - t0 - busy_ns


def test_assumptions_name_defaults_tokens_and_orphans(wh: dict, data: dict) -> None:
    # grouped by kind: one line per kind names its traces (the per-trace wording is in data["caveats"])
    floor = [a for a in data["assumptions"] if a.startswith("launch_floor (")]
    assert len(floor) == 1 and floor[0].startswith(f"launch_floor ({len(wh['ids'])} trace(s): ")
    # synthetic Nsight exports: tokens known and every kernel linked (no kpt or orphan line), but an nsys decode
    # has no Python-level ops
    for key in ("dense_bs1", "dense_bs4", "dense_bs16", "moe"):
        name = _by_file(data)[wh["ids"][key]]["file_name"]
        notes = data["caveats"][name]
        assert notes[0] == ("T_sys = 4.51 µs is the documented default (default_h100) for GPU NVIDIA H100 80GB HBM3, "
                            "not measured: run `taxbreak capture null-kernel` on this GPU and host")
        assert f"{wh['kernels'][key]:,} linked kernels have no Python-level op: t_py = 0 for them" in notes
        assert not any("linked (< 90%)" in n or "kernels per token unknown" in n for n in notes)


def test_assumptions_name_the_mock_trace(wh: dict, data: dict) -> None:
    if "mock" not in wh["ids"]:
        pytest.skip("the public traces (../shared/traces/public) are absent")
    notes = data["caveats"]["mock.sqlite"]
    assert any(n.startswith("kernels per token unknown") for n in notes)
    assert "only 0.0% of kernels are linked (< 90%): orphans add device time but no T_Orchestrate, so HDBI is " \
           "inflated; read HDBI_linked" in notes


def test_real_trace_without_steps(wh: dict, data: dict) -> None:
    if "h100" not in wh["ids"]:
        pytest.skip("the public traces (../shared/traces/public) are absent")
    t = _by_file(data)[wh["ids"]["h100"]]
    assert t["kernels"] == 3442  # SOURCES.md: CUPTI_ACTIVITY_KIND_KERNEL 3442
    assert t["timeline_step"] is None and t["timeline"]["kernels"] == 150 and t["timeline"]["truncated"]
    assert t["low_coverage"] and t["kpt"] is None
    notes = data["caveats"]["h100_2gpu_1s.sqlite"]
    assert f"only {t['linked_fraction']:.1%} of kernels are linked (< 90%): orphans add device time but no " \
           "T_Orchestrate, so HDBI is inflated; read HDBI_linked" in notes
    assert any(n.startswith("T_sys = 4.50 µs is the documented default (default_other)") for n in notes)
    # its 90 launch calls of several ms each waited: the dispatch terms are mostly blocked time
    launch_ns = t["host_launch_ns"] + t["host_launch_blocked_ns"]
    assert t["dispatch_blocked_flag"] and t["host_launch_blocked_ns"] > 0.9 * launch_ns


def test_every_plot_is_well_formed_svg(data: dict) -> None:
    html = render_html(data)
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    per_trace = sum(1 + bool(t["top_kernels"]) + any(x["scope_key"] != "outside_steps" for x in t["steps"])
                    + bool(t["host_partition"]) for t in data["traces"])
    assert len(svgs) == 3 + 2 * len(data["sweeps"]) + per_trace  # split, HDBI, kpt; HDBI+TKLQT per sweep
    for s in svgs:
        ET.fromstring(s)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained: no remote assets
    assert "https://" not in html


def test_plot_geometry() -> None:
    svg = plots.stacked_hbar([("a", [("x", 30.0), ("y", 10.0)]), ("b", [("x", 40.0), ("y", 0.0)])], unit="")
    root = ET.fromstring(svg)
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.find("{http://www.w3.org/2000/svg}title")
            is not None]
    widths = [float(r.get("width")) for r in bars]
    assert len(bars) == 4 and widths[0] == pytest.approx(widths[2] * 0.75) and widths[1] == pytest.approx(
        widths[0] / 3) and widths[3] == 0


@pytest.mark.parametrize(("name", "short"), [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "vectorized_elementwise_kernel<CUDAFunctor_add>"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
     "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, int)", "indexSelectLargeIndex<BFloat16>"),
    ("gemv2N_kernel", "gemv2N_kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel::{lambda(c10::BFloat16)#1}, "
     "std::array<char*, 2ul> >(int)", "vectorized_elementwise_kernel<silu_kernel>"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
     "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tile..."),
])
def test_short_kernel_name(name: str, short: str) -> None:
    assert plots.short_kernel_name(name) == short


def _run_chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=90)


def test_renders_in_headless_chromium(chromium: str, report_file: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = _run_chromium(chromium, tmp_path / "p1", f"--screenshot={shot}", "--window-size=1280,2000",
                         "--enable-logging=stderr", "--v=0", report_file.as_uri())
    assert shot.exists() and shot.stat().st_size > 30_000, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = [line for line in proc.stderr.splitlines() if "Uncaught" in line or "CONSOLE" in line]
    assert not bad, bad
    dom = _run_chromium(chromium, tmp_path / "p2", "--dump-dom", report_file.as_uri())
    m = re.search(r"<title>(.*?)</title>", dom.stdout)
    assert m and m.group(1) == "TaxBreak report", m.group(1) if m else dom.stderr[-2000:]
    n_svg = report_file.read_text(encoding="utf-8").count("<svg ")
    assert f'data-rendered="{n_svg}"' in dom.stdout  # the page's own script ran and saw every plot


def test_markdown_summary_for_dagster_metadata(wh: dict, data: dict) -> None:
    from taxbreak.report import markdown_summary

    lines = markdown_summary(data).splitlines()
    assert len(lines) == 2 + len(wh["ids"])
    row = next(line for line in lines if line.startswith("| synthetic_moe"))
    t = _by_file(data)[wh["ids"]["moe"]]
    assert (f"| {t['t_orchestrate_ns']} | {t['host_wall_ns']} | {t['delta_ft_ns']} | {t['delta_ct_ns']} | "
            f"{t['delta_kt_ns']} |") in row
    hdbi = f"{t['hdbi']:.3f}"  # HDBI, HDBI_linked, coverage and HDBI_wall side by side, then the flags
    assert row.startswith(f"| {t['file_name']} | {hdbi} | ") and f"{t['hdbi_wall']:.3f}" in row


def test_host_partition_per_step_adds_up(wh: dict, data: dict) -> None:
    """The host-time partition shown per trace: one trace row and one row per step, parts summing to wall time."""
    from taxbreak.report import HOST_PARTS

    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    rows = t["host_partition"]
    assert rows[0]["scope_kind"] == "trace" and [r["scope_kind"] for r in rows[1:]] == ["step"] * (len(rows) - 1)
    assert {r["step_name"] for r in rows[1:]} >= {"prefill", "decode_step#1"}
    for r in rows:
        assert sum(r[c] for c, _ in HOST_PARTS) == r["wall_ns"], r
        assert r["framework_ns"] > 0 and r["launch_host_ns"] > 0  # the synthetic trace has ops and launches
    assert "Host time partition (self time; parts add up to wall time)" in render_html(data)
