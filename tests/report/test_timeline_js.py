"""The interactive timeline's script (taxbreak/read/report_assets/timeline.js) driven in headless Chromium: a page
with a
hand-made two-kernel trace dispatches wheel, mouse and menu events and writes what it saw onto <body>."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

from taxbreak.read.report import ASSETS, IDLE_CAUSE_COLORS, _json_for_script, _page

# lanes 0 ops, 1 launches, 2 GPU 0 idle gaps, 3 GPU 0 stream 7. k: [lane, start, dur, name, colour, launch start,
# launch dur, ΔFT, ΔCT, ΔKT, t_launch_obs, t_dispatch, op name]; times in ns.
DATA = {
    "lanes": ["framework ops", "launch calls", "GPU 0 idle gaps", "GPU 0 stream 7"],
    "k": [[3, 100, 780, 1, 1, 40, 20, 30, 0, 4510, 60, 25, 3], [3, 930, 10, 2, 2, 910, 5, 11, 0, 4510, 20, 9, 0]],
    "ops": [[10, 60, 3]],
    "gaps": [[2, 900, 30, "launch_late"]],
    "names": ["", "big_gemm_kernel", "tiny_kernel", "aten::mm"],
    "steps": [{"label": "whole trace", "start": 10, "end": 940, "key": None},
              {"label": "step 1: decode", "start": 900, "end": 940, "key": "1"}],
    "initial_step": 0, "cause_colors": IDLE_CAUSE_COLORS, "colors": ["#4e79a7", "#f28e2b", "#e15759"],
}

DRIVER = """
(function(){
  var c = document.querySelector('#timeline canvas'), r = c.getBoundingClientRect(), b = document.body;
  var W = c.clientWidth, L = 170, v0 = 10 - (930 * 0.01 + 1), v1 = 940 + (930 * 0.01 + 1);
  function px(t) { return r.left + L + (t - v0) / (v1 - v0) * (W - L - 8); }
  b.setAttribute('data-drawn-start', c.getAttribute('data-kernels-drawn'));
  var LH = +c.getAttribute('data-lane-h');
  b.setAttribute('data-lane-px', String(r.height / 5));  // 4 lanes + the axis
  c.dispatchEvent(new MouseEvent('mousemove', {clientX: px(500), clientY: r.top + 3 * LH + LH / 2, bubbles: true}));
  var tip = document.querySelector('.tl-tip');
  b.setAttribute('data-tip', tip.style.display + '|' + tip.textContent);
  for (var i = 0; i < 6; i++) {
    c.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: px(500), clientY: r.top + 80, bubbles: true,
                                             cancelable: true}));
  }
  b.setAttribute('data-drawn-zoomed', c.getAttribute('data-kernels-drawn'));
  var sel = document.querySelector('#timeline select');
  sel.value = '1';
  sel.dispatchEvent(new Event('change'));
  b.setAttribute('data-drawn-step', c.getAttribute('data-kernels-drawn'));
  b.setAttribute('data-info', document.querySelector('#timeline .note').textContent);
})();
"""


def test_timeline_script_hover_zoom_and_step_menu(chromium: str, tmp_path: Path) -> None:
    exe = chromium
    script = (ASSETS / "timeline.js").read_text(encoding="utf-8")
    page = tmp_path / "tl.html"
    page.write_text(_page("timeline test", ["<div id='timeline'></div>"],
                          f"<script type='application/json' id='tl-data'>{json.dumps(DATA)}</script>"
                          f"<script>{script}</script><script>{DRIVER}</script>"), encoding="utf-8")
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'p'}", "--window-size=1000,600", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert "<title>timeline test</title>" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    body = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', re.search(r"<body([^>]*)>", proc.stdout).group(1)))
    assert body["data-drawn-start"] == "2"  # both kernels in the whole-trace window
    # lanes of 34 px (issue 29: 22 px lanes read as thin): 4 lanes and a 26 px axis make the canvas 162 px tall
    assert float(body["data-lane-px"]) * 5 == 4 * 34 + 26
    shown, text = body["data-tip"].split("|", 1)
    assert shown == "block"  # hovering the big kernel shows its details
    for part in ("big_gemm_kernel", "kernel 780 ns", "queueing (launch call start → kernel start, t_launch_obs) 60 ns",
                 "t_dispatch 25 ns", "ΔFT 30 ns · ΔCT 0 ns · ΔKT 4.51 µs", "op aten::mm"):
        assert part in text, (part, text)
    assert body["data-drawn-zoomed"] == "1"  # zoomed in on the big kernel: the tiny one left the view
    assert body["data-drawn-step"] == "1"  # the step window [900, 940) holds only the tiny kernel
    assert "1 of 2 kernels in view" in body["data-info"]


HOSTILE = ["x<!--<script>", "</script><script>document.title='owned'</script>", "a\"b'c&amp;d", "line\u2028sep\u2029x",
           "<!-- open", "]]>", "\\u003c"]


def _hostile_page(tmp_path: Path) -> tuple[Path, str]:
    """The page of ``DATA`` with hostile kernel names, its data written as the report writes it."""
    data = {**DATA, "names": ["", HOSTILE[0], HOSTILE[1], " ".join(HOSTILE[2:])]}
    payload = _json_for_script(data)
    script = (ASSETS / "timeline.js").read_text(encoding="utf-8")
    page = tmp_path / "hostile.html"
    page.write_text(_page("timeline test", ["<div id='timeline'></div>"],
                          f"<script type='application/json' id='tl-data'>{payload}</script>"
                          f"<script>{script}</script><script>{DRIVER}</script>"), encoding="utf-8")
    return page, payload


def test_kernel_names_reach_the_page_as_data_never_as_markup(tmp_path: Path) -> None:
    """Issue 30 item 6: a kernel named ``x<!--<script>`` left the timeline undrawn (an HTML comment opened inside
    the data block swallows its ``</script>``).  The block now holds no ``<``, ``>`` or ``&`` and no raw line
    separator at all, and JSON.parse (json.loads) reads back every name exactly."""
    _page_path, payload = _hostile_page(tmp_path)
    assert not set(payload) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(payload)["names"] == ["", HOSTILE[0], HOSTILE[1], " ".join(HOSTILE[2:])]
    assert "\\u003c!--\\u003cscript\\u003e" in payload


def test_the_timeline_draws_whatever_the_kernels_are_named(chromium: str, tmp_path: Path) -> None:
    page, _ = _hostile_page(tmp_path)
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'p'}", "--window-size=1000,600", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=120)
    assert "<title>timeline test</title>" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    body = {k: html.unescape(v) for k, v in re.findall(r'(data-[a-z-]+)="([^"]*)"',
                                                        re.search(r"<body([^>]*)>", proc.stdout).group(1))}
    assert body["data-drawn-start"] == "2"  # both kernels drawn
    shown, text = body["data-tip"].split("|", 1)
    assert shown == "block" and HOSTILE[0] in text  # the name shown as text in the tooltip, no markup run
