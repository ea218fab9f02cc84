"""`taxbreak report`: the data it shows, well-formed SVG, the report folder (index + one page per trace, rewritten
only when a trace's data changed), and a render of every page in a real headless browser (chromium): no script
error, every plot drawn, the timeline drawn, nothing sticking out of a plot or the window."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import duckdb
import pytest

from taxbreak.cli import main
from taxbreak.read import plots, readmodel
from taxbreak.read.report import collect, render_html, render_index, render_trace_page, trace_label, write_report

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
def report_dir(wh: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "rep"
    assert main(["report", "--warehouse", str(wh["warehouse"]), "-o", str(out)]) == 0
    return out


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


def _union_ns(spans: list[tuple[int, int]]) -> int:
    spans = sorted(spans)
    busy_ns, run_s, run_e = 0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > run_e:
            busy_ns, run_s = busy_ns + run_e - run_s, s
        run_e = max(run_e, e)
    return busy_ns + run_e - run_s


def test_timeline_holds_every_kernel_and_opens_on_the_first_decode_step(wh: dict, data: dict) -> None:
    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    step = t["timeline_step"]
    assert step["phase"] == "decode" and step["step_name"].startswith("decode")
    tl = t["timeline"]
    n = wh["kernels"]["dense_bs1"]
    assert tl["kernels"] == tl["total_kernels"] == len(tl["k"]) == n and not tl["truncated"]
    assert tl["lanes"] == ["framework ops", "launch calls", "GPU 0 idle gaps", "GPU 0 stream 7"]
    # the windows: the whole trace, then one per step; the first decode step opens
    opening = tl["steps"][tl["initial_step"]]
    assert tl["steps"][0]["label"] == f"whole trace ({n:,} kernels)"
    assert opening["key"] == step["scope_key"] and opening["label"].startswith(f"step {step['scope_key']}: decode")
    assert len(tl["steps"]) == 1 + sum(1 for s in t["steps"] if s["scope_key"] != "outside_steps")
    # each kernel: lane, start, duration, name, launch start, the TaxBreak terms straight from kernel_taxbreak
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        ref = con.execute("SELECT kernel_ts_ns, kernel_dur_ns, launch_ts_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns, "
                          "t_launch_obs_ns, t_dispatch_ns FROM kernel_taxbreak WHERE trace_id = $t ORDER BY kernel_seq",
                          {"t": t["trace_id"]}).fetchall()
        in_step = con.execute("SELECT count(*) FROM kernel_taxbreak WHERE trace_id = $t AND step_id = $s",
                              {"t": t["trace_id"], "s": int(step["scope_key"])}).fetchone()[0]
    finally:
        con.close()
    assert [(k[1], k[2], k[5], k[7], k[8], k[9], k[10], k[11]) for k in tl["k"]] == ref
    assert all(k[0] == 3 for k in tl["k"])  # one stream
    assert in_step == step["kernels"]
    inside = [k for k in tl["k"] if opening["start"] <= k[1] and k[1] + k[2] <= opening["end"]]
    assert len(inside) >= step["kernels"]  # the opening window holds the step's kernels
    assert len(tl["ops"]) == n  # the synthetic eager trace: one op per kernel
    # idle gaps: every gap of the GPU (device_busy's idle time); copies fill some of the time no kernel runs
    kernels = [(k[1], k[1] + k[2]) for k in tl["k"]]
    span = max(e for _, e in kernels) - min(s for s, _ in kernels)
    assert tl["idle_ns"] == sum(g[2] for g in tl["gaps"]) == t["idle"][0]["idle_ns"] > 0
    assert span - _union_ns(kernels) - 5000 <= tl["idle_ns"] <= span - _union_ns(kernels)
    assert {g[3] for g in tl["gaps"]} <= {"launch_late", "sync_drain", "memcpy", "other"}


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
    tl = t["timeline"]
    assert t["timeline_step"] is None and tl["kernels"] == 3442 and not tl["truncated"]
    assert [w["label"] for w in tl["steps"]] == ["whole trace (3,442 kernels)"]
    assert [g["device_id"] for g in t["gpu_breakdown"]] == [0, 1]  # two H100s (SOURCES.md), no rank recorded
    # the export names no GPU model (no TARGET_INFO_GPU): the label counts the GPUs that ran kernels (issue 29: it
    # read 'GPU ?')
    assert t["gpu_name"] is None and t["gpus_with_kernels"] == 2
    assert trace_label(t) == f"2 GPUs, model not recorded · {t['trace_id'][:6]} · h100_2gpu_1s.sqlite"
    assert "GPU ?" not in render_index(data)
    assert all(g["rank"] is None for g in t["gpu_breakdown"])
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
    assert len(svgs) > 10 * len(data["traces"]) // 2
    for s in svgs:
        ET.fromstring(s)
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained: no remote assets
    assert "https://" not in html
    assert "<script src" not in html  # the timeline's script is inlined, never fetched


def test_report_text_fixes(wh: dict, data: dict) -> None:
    """No Python None in headings, µs not us, TKLQT with its per-launch mean, step bars that say they are no wall
    time, the whole listed fusion chain, HDBI_linked and HDBI_wall in the charts."""
    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    page = render_trace_page(t)
    index = render_index(data)
    for html in (page, index):
        assert not re.search(r"[(>,] ?None[)<,]", html)
        assert not re.search(r"\d us\b", html)
    assert "µs" in page
    mean, counted = plots.fmt_value(t["mean_launch_to_start_ns"], "ns"), t["launch_samples"] - t["negative_samples"]
    said = f"mean {mean} per launch over {counted:,} launches"
    assert f"{said}; a sum of overlapping queue waits, so it can exceed the trace&#x27;s length" in page
    assert said in index and "TKLQT: a sum of overlapping queue waits" in index
    assert "summed — not a wall time" in page and "not a wall time" in index
    chain = t["fusion"][0]["chain"]
    assert t["fusion"][0]["rank"] == 1 and len(chain) == t["fusion"][0]["chain_len"] > 1
    assert all(f"<li title='{plots.escape(k, quote=True)}'>" in page for k in chain)  # the whole chain, in order
    assert [f["rank"] for f in t["fusion"]] == list(range(1, len(t["fusion"]) + 1))
    assert "HDBI_linked" in index and "HDBI_wall" in index
    assert "dashed lines at 0.2 and 0.5: reference (ours, not the paper&#x27;s)" in index
    sweep_svg = next(x for x in re.findall(r"<svg .*?</svg>", index, flags=re.S) if "HDBI vs batch size" in x)
    ticks = re.findall(r"text-anchor='end' fill='#555'>([0-9.]+)</text>", sweep_svg)
    assert ticks == ["0.000", "0.250", "0.500", "0.750", "1.000"]  # HDBI's axis ends at 1


def test_labels_and_null_kernel_traces(wh: dict, data: dict) -> None:
    """Two traces of the same file name get different labels; a null-kernel trace stays out of the HDBI chart;
    a low-coverage trace is marked."""
    a, b = (dict(t) for t in data["traces"][:2])
    b["file_name"] = a["file_name"]
    assert trace_label(a) != trace_label(b) and a["trace_id"][:6] in trace_label(a)
    assert trace_label(a).startswith("H100 80GB HBM3 · ")
    null = {**a, "is_null_kernel": True}
    from taxbreak.read.report import hdbi_chart

    svg, calib = hdbi_chart([null, b], "HDBI")
    assert calib == [null] and trace_label(b) in svg and "HDBI_wall" in svg
    assert trace_label(null) not in svg.replace(trace_label(b), "")
    low = {**b, "low_coverage": True, "linked_fraction": 0.014}
    svg, _ = hdbi_chart([low], "HDBI")
    assert "⚠ low coverage: 1.4% linked" in svg and "url(#hatch)" in svg


def test_gpu_sections(wh: dict, data: dict) -> None:
    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    g = t["gpu_breakdown"][0]
    assert g["t_compute_ns"] + g["t_comm_exposed_ns"] + g["t_memory_exposed_ns"] + g["t_idle_ns"] == g["span_ns"]
    assert g["comm_kernels"] == 0 and g["t_idle_ns"] == t["idle"][0]["idle_ns"]
    q = t["queues"]["summary"]
    assert [(r["device_id"], r["stream_id"], r["kernels_queued"]) for r in q] == [(0, 7, wh["kernels"]["dense_bs1"])]
    series = t["queues"]["series"]["GPU 0 stream 7"]
    assert all(v >= 0 for _, v in series) and max(v for _, v in series) <= q[0]["max_queue_length"]
    d = t["durations"]
    assert sum(c for *_, c in d["bins"]) == wh["kernels"]["dense_bs1"]
    assert all(hi == 2 * lo for lo, hi, _ in d["bins"]) and d["p10_ns"] <= d["p50_ns"] <= d["p90_ns"] <= d["max_ns"]
    assert {p["phase"] for p in t["phases"]} == {"prefill", "decode"}
    index = render_index(data)
    assert "GPU time by work class, per rank and device" in index and "GPU idle time by cause" in index
    assert "Prefill vs decode" in index and "Kernel durations per trace" in index


def test_timeline_stops_at_its_kernel_limit(wh: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from taxbreak.read import report

    monkeypatch.setattr(report, "TIMELINE_MAX_KERNELS", 10)
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        tl = report.timeline_data(con, wh["ids"]["dense_bs1"], None)
    finally:
        con.close()
    assert tl["kernels"] == len(tl["k"]) == 10 and tl["truncated"]
    assert tl["total_kernels"] == wh["kernels"]["dense_bs1"]
    t1 = max(k[1] + k[2] for k in tl["k"])
    assert all(g[1] < t1 for g in tl["gaps"])  # only the gaps of the shown kernels' window
    t = {**next(x for x in collect_one(wh) if x["trace_id"] == wh["ids"]["dense_bs1"]), "timeline": tl}
    assert f"(the first 10 of {wh['kernels']['dense_bs1']:,})" in render_trace_page(t)


def collect_one(wh: dict) -> list[dict]:
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        return collect(con, [wh["ids"]["dense_bs1"]])["traces"]
    finally:
        con.close()


def test_report_folder_is_incremental(wh: dict, data: dict, tmp_path: Path) -> None:
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        index = write_report(con, tmp_path / "r", data=data)
        pages = sorted((tmp_path / "r" / "traces").glob("*.html"))
        assert index == tmp_path / "r" / "index.html" and len(pages) == len(data["traces"])
        man = json.loads((tmp_path / "r" / "manifest.json").read_text())
        assert man["pages_written_last_run"] == len(data["traces"])
        for p in pages:
            p.write_text("marker", encoding="utf-8")  # untouched unless rewritten
        write_report(con, tmp_path / "r", data=data)
        assert json.loads((tmp_path / "r" / "manifest.json").read_text())["pages_written_last_run"] == 0
        assert all(p.read_text() == "marker" for p in pages)
        # one trace's rows change: only its page is rewritten; a trace left out of the report loses its page
        changed = {**data, "traces": [dict(t) for t in data["traces"][1:]]}
        changed["traces"][0]["kernels"] += 1
        write_report(con, tmp_path / "r", data=changed)
        after = {p.name: p.read_text() for p in (tmp_path / "r" / "traces").glob("*.html")}
        assert len(after) == len(data["traces"]) - 1 and data["traces"][0]["page"].split("/")[1] not in after
        rewritten = [n for n, text in after.items() if text != "marker"]
        assert rewritten == [changed["traces"][0]["page"].split("/")[1]]
        # a path ending in .html names the index file (the Dagster asset writes reports/index.html)
        assert write_report(con, tmp_path / "x" / "report.html", data=data) == tmp_path / "x" / "report.html"
        assert len(list((tmp_path / "x" / "traces").glob("*.html"))) == len(data["traces"])
    finally:
        con.close()


def test_report_for_some_traces_reads_and_redraws_only_theirs(wh: dict, data: dict, tmp_path: Path) -> None:
    """What the Dagster report step does in a run for one trace: only that trace's page data is read and its page
    redrawn; the index still spans every trace with the same figures; the other pages stay as they were."""
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        write_report(con, tmp_path / "r", data=data)
        pages = sorted((tmp_path / "r" / "traces").glob("*.html"))
        full_pages = {p.name: p.read_text() for p in pages}
        full_index = re.sub(r"generated [^<]*UTC", "", (tmp_path / "r" / "index.html").read_text())
        for p in pages:
            p.write_text("marker", encoding="utf-8")
        one = wh["ids"]["dense_bs1"]
        part = collect(con, details=[one])
        assert [t["trace_id"] for t in part["traces"] if t["details"]] == [one]
        assert all("timeline" not in t for t in part["traces"] if t["trace_id"] != one)
        # the index's own figures are read for every trace in one statement each, and equal a per-trace reading
        def rows(sql: str, tid: str) -> list[dict]:
            cur = con.execute(sql, {"t": tid})
            return [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur.fetchall()]

        for t in part["traces"]:
            tid = t["trace_id"]
            assert t["gpu_breakdown"] == rows("SELECT * FROM gpu_time_breakdown WHERE trace_id = $t "
                                              "ORDER BY rank NULLS LAST, device_id", tid)
            assert t["idle"] == rows("SELECT * FROM device_busy WHERE trace_id = $t ORDER BY device_id", tid)
            assert t["phases"] == rows("SELECT scope_key AS phase, kernels, linked_fraction, low_coverage, "
                                       "t_orchestrate_ns, t_device_active_ns, hdbi, hdbi_linked, hdbi_wall "
                                       "FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'phase' "
                                       "AND scope_key IN ('prefill', 'decode') ORDER BY scope_key DESC", tid)
            (n, p50, top) = con.execute("SELECT count(*), quantile_disc(kernel_dur_ns, 0.5), max(kernel_dur_ns) "
                                        "FROM int_kernel_links WHERE trace_id = $t", {"t": tid}).fetchone()
            assert (sum(b[2] for b in t["durations"]["bins"]), t["durations"]["p50_ns"],
                    t["durations"]["max_ns"]) == (n, p50, top)
        assert any(t["gpu_breakdown"] for t in part["traces"]) and any(t["phases"] for t in part["traces"])
        write_report(con, tmp_path / "r", data=part)
        after = {p.name: p.read_text() for p in (tmp_path / "r" / "traces").glob("*.html")}
        redrawn = [n for n, text in after.items() if text != "marker"]
        page = next(t["page"] for t in part["traces"] if t["trace_id"] == one).split("/")[1]
        # its data did not change, so its page is the one the full run drew, redrawn from the same data
        assert json.loads((tmp_path / "r" / "manifest.json").read_text())["pages_written_last_run"] == 0
        assert redrawn == [] and len(after) == len(full_pages)
        assert re.sub(r"generated [^<]*UTC", "", (tmp_path / "r" / "index.html").read_text()) == full_index
        # a trace without a page yet is read and drawn even when it is not among the details
        (tmp_path / "r" / "traces" / page).unlink()
        write_report(con, tmp_path / "r", data=collect(con, details=[]))
        assert (tmp_path / "r" / "traces" / page).read_text() == full_pages[page]
    finally:
        con.close()


def test_plot_geometry() -> None:
    svg = plots.stacked_hbar([("a", [("x", 30.0), ("y", 10.0)]), ("b", [("x", 40.0), ("y", 0.0)])], unit="")
    root = ET.fromstring(svg)
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.find("{http://www.w3.org/2000/svg}title")
            is not None]
    widths = [float(r.get("width")) for r in bars]
    assert len(bars) == 4 and widths[0] == pytest.approx(widths[2] * 0.75) and widths[1] == pytest.approx(
        widths[0] / 3) and widths[3] == 0


def test_report_labels_kernels_by_the_one_short_name_rule(wh: dict, data: dict) -> None:
    """Top kernels and fusion chains are labelled by taxbreak.read.kernel_names.short_names over every kernel the page
    lists, as `taxbreak summary` labels them; a chain's kernels read apart, the full name on hover (issue 29: chains
    were cut so short that their kernels read the same)."""
    from taxbreak.read.kernel_names import short_names

    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    page = render_trace_page(t)
    every = [k["kernel_name"] for k in t["top_kernels"]] + [n for f in t["fusion"] for n in f["chain"]]
    label = short_names(every)
    assert len(set(label.values())) == len(set(every))
    for f in t["fusion"]:
        cells = "".join(f"<li title='{plots.escape(n, quote=True)}'>{plots.escape(label[n])}</li>" for n in f["chain"])
        assert cells in page
    for k in t["top_kernels"]:
        assert f"<td class='mono'>{plots.escape(label[k['kernel_name']])}</td>" in page


def _run_chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)


def _body_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, dom[-2000:]
    return dict(re.findall(r'([a-z-]+)="([^"]*)"', m.group(1)))


@pytest.mark.parametrize("width", [1280, 900])
def test_renders_in_headless_chromium(chromium: str, report_dir: Path, tmp_path: Path, width: int) -> None:
    """Every page: the page's own layout check ran (data-rendered = its plots), no SVG text sticks out of its plot
    (data-clipped 0), the page is no wider than the window (data-overflow 0), no script error (the title stays),
    and a trace page's timeline drew kernels."""
    pages = [report_dir / "index.html", *sorted((report_dir / "traces").glob("*.html"))]
    assert len(pages) >= 5
    for page in pages:
        dom = _run_chromium(chromium, tmp_path / "p", f"--window-size={width},2000", "--dump-dom", page.as_uri())
        m = re.search(r"<title>(.*?)</title>", dom.stdout)
        assert m and not m.group(1).startswith("JSERROR"), (page, m.group(1) if m else dom.stderr[-2000:])
        attrs = _body_attrs(dom.stdout)
        n_svg = page.read_text(encoding="utf-8").count("<svg ")
        assert attrs["data-rendered"] == str(n_svg) and n_svg > 0, page
        assert attrs["data-clipped"] == "0", (page, attrs["data-clipped-texts"])
        assert attrs["data-overflow"] == "0", page
        if page.parent.name == "traces" and "id=\"timeline\"" in dom.stdout:
            drawn = re.search(r'data-kernels-drawn="(\d+)"', dom.stdout)
            assert drawn and int(drawn.group(1)) > 0, page


def test_screenshot_and_console(chromium: str, report_dir: Path, tmp_path: Path) -> None:
    page = sorted((report_dir / "traces").glob("*.html"))[0]
    for target in (report_dir / "index.html", page):
        shot = tmp_path / "shot.png"
        proc = _run_chromium(chromium, tmp_path / "p1", f"--screenshot={shot}", "--window-size=1280,2000",
                             "--enable-logging=stderr", "--v=0", target.as_uri())
        assert shot.exists() and shot.stat().st_size > 30_000, proc.stderr[-2000:]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        bad = [line for line in proc.stderr.splitlines() if "Uncaught" in line or "CONSOLE" in line]
        assert not bad, bad
        shot.unlink()


def test_markdown_summary_for_dagster_metadata(wh: dict, data: dict) -> None:
    from taxbreak.read.report import markdown_summary

    lines = markdown_summary(data).splitlines()
    assert len(lines) == 2 + len(wh["ids"])
    row = next(line for line in lines if line.startswith("| synthetic_moe"))
    t = _by_file(data)[wh["ids"]["moe"]]
    assert (f"| {t['t_orchestrate_ns']} | {t['host_wall_ns']} | {t['delta_ft_ns']} | {t['delta_ct_ns']} | "
            f"{t['delta_kt_ns']} |") in row
    hdbi = f"{t['hdbi']:.3f}"  # the verdict and top lever, then HDBI, HDBI_linked, coverage, HDBI_wall, the flags
    cells = [c.strip() for c in row.split("|")[1:-1]]
    v = t["verdict"]
    assert v is not None and cells[:2] == [t["file_name"], f"{v['bound']} ({v['confidence']})"]
    assert cells[3] == hdbi and cells[6] == f"{t['hdbi_wall']:.3f}"


def test_host_partition_per_step_adds_up(wh: dict, data: dict) -> None:
    """The host-time partition shown per trace: one trace row and one row per step, parts summing to wall time."""
    from taxbreak.read.report import HOST_PARTS

    t = _by_file(data)[wh["ids"]["dense_bs1"]]
    rows = t["host_partition"]
    assert rows[0]["scope_kind"] == "trace" and [r["scope_kind"] for r in rows[1:]] == ["step"] * (len(rows) - 1)
    assert {r["step_name"] for r in rows[1:]} >= {"prefill", "decode_step#1"}
    for r in rows:
        assert sum(r[c] for c, _ in HOST_PARTS) == r["wall_ns"], r
        assert r["framework_ns"] > 0 and r["launch_host_ns"] > 0  # the synthetic trace has ops and launches
    assert "Host time partition (self time; parts add up to wall time)" in render_html(data)


def test_index_table_shows_hdbi_and_flags_first_and_scrolls_in_its_box(data: dict) -> None:
    """The verdict, HDBI and the flags come right after the trace, so they show at 1400 px without scrolling; the
    rest scrolls inside the table's own box, the trace column sticky (issue 29: cut after T_DeviceActive)."""
    index = render_index(data)
    box = index[index.index("<div class='tw index'>"):]
    heads = re.findall(r"<th>([^<]*)</th>", box[:box.index("</tr>")])
    assert heads[:6] == ["trace (GPU · id · file)", "verdict (top lever)", "HDBI", "HDBI_linked", "HDBI_wall",
                         "flags"]
    assert heads.index("T_DeviceActive") > heads.index("flags")
    assert ".tw.index{max-height:70vh;overflow:auto" in index and ".tw.index td:first-child" in index
    assert "position:sticky;left:0" in index


def test_caveat_banner_is_a_list(wh: dict, data: dict) -> None:
    """The banner under the cards: the HDBI reading, then one item per caveat (issue 29: one dense paragraph)."""
    t = next(t for t in data["traces"] if any(c["kind"] in ("coverage", "launch_floor") for c in readmodel.caveats(t)))
    page = render_trace_page(t)
    banner = page[page.index("banner'>"):]
    banner = banner[:banner.index("</div>")]
    items = re.findall(r"<li><b>([a-z_]+)</b>: ", banner)
    assert items and banner.startswith("banner'><p>HDBI") and "<ul>" in banner
    assert "reference lines are our reading aids" in banner
