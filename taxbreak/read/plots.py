"""Plots as inline SVG strings (no plotting library: the report stays one self-contained file).

Every function takes plain data (numbers in the unit its argument name says) and returns an ``<svg>`` element.
Hovering a mark shows its exact value through an SVG ``<title>``.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]
FONT = "font-family='system-ui, -apple-system, Segoe UI, sans-serif'"


def _fmt_ns(value_ns: float) -> str:
    """A duration for humans: 1.23 ms, 45.6 µs, 789 ns."""
    a = abs(value_ns)
    if a >= 1e9:
        return f"{value_ns / 1e9:.3g} s"
    if a >= 1e6:
        return f"{value_ns / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{value_ns / 1e3:.3g} µs"
    return f"{value_ns:.0f} ns"


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ns":
        return _fmt_ns(value)
    if unit == "fraction":
        return f"{value:.3f}"
    return f"{value:,.4g}" + (f" {unit}" if unit else "")


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"role='img' aria-label='{escape(label)}' {FONT} font-size='12'>" + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, s: str, anchor: str = "start", extra: str = "") -> str:
    return f"<text x='{x:.1f}' y='{y:.1f}' text-anchor='{anchor}' {extra}>{escape(s)}</text>"


def _nice_ticks(vmax: float, n: int = 5) -> list[float]:
    if vmax <= 0:
        return [0.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(vmax / step) + 2) if i * step <= vmax * 1.0001 + step]


CHAR_W = 7.3  # generous width of one character at font-size 12 (px), for laying out labels without clipping


def text_w(s: str) -> float:
    return len(s) * CHAR_W


def title_w(title: str) -> int:
    """Width a plot needs for its title (bold, font-size 14) starting at x = 8."""
    return int(text_w(title) * 1.3) + 16


def fit_label(label: str, max_chars: int) -> str:
    """The label, or its start and end around a middle ellipsis when longer than max_chars (full text on hover)."""
    if len(label) <= max_chars:
        return label
    head = (max_chars - 1) * 2 // 3
    return label[:head] + "…" + label[-(max_chars - 1 - head):]


def _legend(names: list[str], color: dict[str, str], x0: float, y: float, width: float,
            opacity: dict[str, str] | None = None) -> tuple[list[str], float]:
    """Legend swatches that wrap onto new lines; returns the elements and the y below the last line."""
    body, lx, ly = [], x0, y
    for n in names:
        w = 24 + text_w(n)
        if lx + w > width and lx > x0:
            lx, ly = x0, ly + 18
        op = (opacity or {}).get(n, "")
        body.append(f"<rect x='{lx:.0f}' y='{ly - 10}' width='12' height='12' fill='{color[n]}'{op}/>")
        body.append(_text(lx + 16, ly, n))
        lx += w
    return body, ly + 8


def _log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0 ** k for k in range(a, b + 1)]


def stacked_hbar(
    rows: list[tuple[str, list[tuple[str, float]]]], unit: str = "ns", title: str = "", width: int = 900,
    colors: dict[str, str] | None = None, legend: bool = True, label_w: int | None = None, label_chars: int = 90,
    normalize: bool = False, log: bool = False, notes: dict[str, str] | None = None,
) -> str:
    """Horizontal stacked bars: one bar per (label, [(segment, value)]) row, a shared legend and axis.

    ``normalize``: each bar is its segments' shares of the row total (0..100%), the total printed beside it, so rows
    that differ by orders of magnitude stay readable. ``log``: a log10 axis (single-segment rows). Labels are never
    cut at the edge: the label column is as wide as the longest label (up to ``label_chars`` characters, longer ones
    shortened in the middle, the full text on hover); the values printed beside the bars have their own margin.
    ``notes``: label -> a short mark printed after the value (e.g. a caveat)."""
    seg_names: list[str] = []
    for _, segs in rows:
        for name, _ in segs:
            if name not in seg_names:
                seg_names.append(name)
    colors = colors or {}
    color = {n: colors.get(n, PALETTE[i % len(PALETTE)]) for i, n in enumerate(seg_names)}
    notes = notes or {}
    shown = [fit_label(label, label_chars) for label, _ in rows]
    label_w = label_w or int(min(max([text_w(x) for x in shown] + [40]) + 14, label_chars * CHAR_W + 14))
    value_w = int(max([text_w(fmt_value(sum(max(v, 0) for _, v in segs), unit) + (" = " if normalize else "")
                            + (" " + notes[label] if label in notes else "")) for label, segs in rows] + [40]) + 12)
    width = max(width, label_w + value_w + 420, title_w(title))
    plot_w = width - label_w - value_w - 10
    bar_h, gap = 22, 10
    body: list[str] = []
    y = 8.0
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
        y = 26.0
    if legend:
        lg, y = _legend(seg_names, color, 8, y + 14, width - 8)
        body += lg
    top = int(y + 6)
    totals = [sum(max(v, 0) for _, v in segs) for _, segs in rows]
    if log:
        pos = [t for t in totals if t > 0] or [1.0]
        ticks = _log_ticks(min(pos), max(pos))
        lo, hi = math.log10(ticks[0]), math.log10(ticks[-1]) if ticks[-1] > ticks[0] else math.log10(ticks[0]) + 1

        def xw(v: float) -> float:
            return 0.0 if v <= 0 else max(0.0, (math.log10(v) - lo) / (hi - lo) * plot_w)
    else:
        vmax = 1.0 if normalize else max(totals + [0])
        ticks = [0, 0.25, 0.5, 0.75, 1.0] if normalize else _nice_ticks(vmax)
        scale_max = 1.0 if normalize else (max(ticks[-1], vmax) or 1.0)

        def xw(v: float) -> float:
            return max(v, 0) / scale_max * plot_w
    for i, (label, segs) in enumerate(rows):
        yy = top + i * (bar_h + gap)
        body.append(f"<text x='{label_w - 6}' y='{yy + bar_h * 0.7:.1f}' text-anchor='end'><title>{escape(label)}"
                    f"</title>{escape(shown[i])}</text>")
        x = float(label_w)
        total = totals[i]
        for name, v in segs:
            if log:
                w = xw(total)
            else:
                w = xw(max(v, 0) / total if normalize and total > 0 else v)
            share = f" ({max(v, 0) / total:.1%})" if normalize and total > 0 else ""
            body.append(
                f"<rect x='{x:.1f}' y='{yy}' width='{w:.1f}' height='{bar_h}' fill='{color[name]}'>"
                f"<title>{escape(label + ': ' + (name + ' = ' if legend else '') + fmt_value(v, unit) + share)}"
                "</title></rect>")
            x += w
        end_x = label_w + (plot_w if normalize else x - label_w)
        txt = ("= " if normalize else "") + fmt_value(total, unit) + (" " + notes[label] if label in notes else "")
        body.append(_text(end_x + 4, yy + bar_h * 0.7, txt, extra="fill='#555'"))
    ay = top + len(rows) * (bar_h + gap)
    body.append(f"<line x1='{label_w}' y1='{ay}' x2='{label_w + plot_w}' y2='{ay}' stroke='#999'/>")
    last_end = -1e9
    for t in ticks:
        tx = label_w + (xw(t) if not log else (math.log10(t) - lo) / (hi - lo) * plot_w)
        if tx <= label_w + plot_w + 0.5:
            body.append(f"<line x1='{tx:.1f}' y1='{ay}' x2='{tx:.1f}' y2='{ay + 4}' stroke='#999'/>")
            lab = f"{t:.0%}" if normalize else fmt_value(t, unit)
            anchor = "start" if tx <= label_w + 1 else "middle"
            left = tx if anchor == "start" else tx - text_w(lab) / 2
            if left > last_end + 6:  # a tick label that would touch the previous one is left out
                body.append(_text(tx, ay + 16, lab, anchor=anchor, extra="fill='#555'"))
                last_end = left + text_w(lab)
    scale = " (log scale)" if log else " (share of each row's total)" if normalize else ""
    if scale:
        body.append(_text(label_w + plot_w, ay + 32, scale.strip(" ()"), anchor="end", extra="fill='#777'"))
    return _svg(width, ay + 42, body, title or "stacked bars")


def hbar(
    items: list[tuple[str, float]], unit: str = "ns", title: str = "", width: int = 900, label_w: int | None = None,
    label_chars: int = 90, log: bool = False, notes: dict[str, str] | None = None,
) -> str:
    """Simple horizontal bars, in the order given (``log``: a log10 axis)."""
    return stacked_hbar([(label, [("value", v)]) for label, v in items], unit=unit, title=title, width=width,
                        colors={"value": PALETTE[0]}, legend=False, label_w=label_w, label_chars=label_chars, log=log,
                        notes=notes)


HDBI_COLORS = {"HDBI": "#4e79a7", "HDBI_linked": "#f28e2b", "HDBI_wall": "#59a14f"}


def hdbi_bars(
    rows: list[tuple[str, dict[str, float | None], str | None]], ref_lines: tuple[float, ...], ref_note: str,
    title: str = "", width: int = 900, label_chars: int = 90,
) -> str:
    """HDBI, HDBI_linked and HDBI_wall per row on a fixed 0..1 axis with dashed reference lines (``ref_note`` says
    whose they are); a row whose third element is a mark text (low coverage) gets its HDBI bar hatched and the mark
    printed beside it."""
    metrics = list(HDBI_COLORS)
    shown = [fit_label(label, label_chars) for label, _, _ in rows]
    label_w = int(min(max([text_w(x) for x in shown] + [40]) + 14, label_chars * CHAR_W + 14))
    value_w = int(max([text_w("0.000 " + (m or "")) for _, _, m in rows] + [60]) + 12)
    width = max(width, label_w + value_w + 420, title_w(title))
    plot_w = width - label_w - value_w - 10
    bar_h, gap = 9, 10
    body = ["<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
            "patternTransform='rotate(45)'><rect width='6' height='6' fill='#fff'/><line x1='0' y1='0' x2='0' y2='6' "
            "stroke='#4e79a7' stroke-width='3'/></pattern></defs>"]
    y = 8.0
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
        y = 26.0
    lg, y = _legend([*metrics, "low coverage (hatched)"], {**HDBI_COLORS, "low coverage (hatched)": "url(#hatch)"},
                    8, y + 14, width - 8)
    body += lg
    top = int(y + 8)
    row_h = len(metrics) * bar_h + gap

    def px(v: float) -> float:
        return label_w + min(max(v, 0.0), 1.0) * plot_w

    for i, (label, vals, mark) in enumerate(rows):
        yy = top + i * row_h
        body.append(f"<text x='{label_w - 6}' y='{yy + 1.5 * bar_h + 4:.1f}' text-anchor='end'><title>"
                    f"{escape(label)}</title>{escape(shown[i])}</text>")
        for j, m in enumerate(metrics):
            v = vals.get(m)
            by = yy + j * bar_h
            if v is None:
                body.append(_text(label_w + 4, by + bar_h - 1, f"{m} n/a", extra="fill='#999' font-size='9'"))
                continue
            fill = "url(#hatch)" if (mark and m == "HDBI") else HDBI_COLORS[m]
            body.append(f"<rect x='{label_w}' y='{by}' width='{px(v) - label_w:.1f}' height='{bar_h - 1}' "
                        f"fill='{fill}' stroke='{HDBI_COLORS[m]}' stroke-width='0.5'><title>"
                        f"{escape(f'{label}: {m} = {v:.3f}' + (f' ({mark})' if mark and m == 'HDBI' else ''))}"
                        "</title></rect>")
            if j == 0:
                body.append(_text(label_w + plot_w + 6, by + bar_h, f"{v:.3f}" + (f" {mark}" if mark else ""),
                                  extra="fill='#a33'" if mark else "fill='#555'"))
    ay = top + len(rows) * row_h
    for r in ref_lines:
        body.append(f"<line x1='{px(r):.1f}' y1='{top - 4}' x2='{px(r):.1f}' y2='{ay}' stroke='#777' "
                    "stroke-dasharray='4 3'/>")
    if ref_lines:
        body.append(_text(label_w, ay + 32, f"dashed lines at {' and '.join(f'{r:g}' for r in ref_lines)}: "
                          f"{ref_note}", extra="fill='#777' font-size='11'"))
    body.append(f"<line x1='{label_w}' y1='{ay}' x2='{label_w + plot_w}' y2='{ay}' stroke='#999'/>")
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(_text(px(t), ay + 14, f"{t:g}", anchor="start" if t == 0 else "middle", extra="fill='#555'"))
    return _svg(width, ay + 40, body, title or "HDBI")


def log_histogram(counts: list[tuple[int, int, int]], title: str = "", width: int = 640, height: int = 240,
                  x_label: str = "kernel duration (log scale)") -> str:
    """Vertical bars of counts in log-spaced bins: ``counts`` = [(bin_lo_ns, bin_hi_ns, count)] in bin order."""
    if not counts:
        return _svg(width, 60, [_text(8, 30, f"{title}: no data")], title or "histogram")
    left, right, top, bottom = 56, 16, 34 if title else 14, 44
    pw, ph = width - left - right, height - top - bottom
    cmax = max(c for *_, c in counts) or 1
    bw = pw / len(counts)
    body: list[str] = []
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    for t in _nice_ticks(cmax, 4):
        if t <= cmax:
            yy = top + ph - t / cmax * ph
            body.append(f"<line x1='{left}' y1='{yy:.1f}' x2='{left + pw}' y2='{yy:.1f}' stroke='#eee'/>")
            body.append(_text(left - 6, yy + 4, f"{t:,.0f}", anchor="end", extra="fill='#555'"))
    for i, (lo, hi, c) in enumerate(counts):
        h = c / cmax * ph
        x = left + i * bw
        body.append(f"<rect x='{x + 1:.1f}' y='{top + ph - h:.1f}' width='{max(bw - 2, 1):.1f}' height='{h:.1f}' "
                    f"fill='{PALETTE[0]}'><title>{escape(f'{_fmt_ns(lo)} – {_fmt_ns(hi)}: {c:,} kernels')}</title>"
                    "</rect>")
        if i % max(1, len(counts) // 8) == 0:
            body.append(_text(x, top + ph + 14, _fmt_ns(lo), extra="fill='#555' font-size='10'"))
    body.append(f"<line x1='{left}' y1='{top + ph}' x2='{left + pw}' y2='{top + ph}' stroke='#999'/>")
    body.append(_text(left + pw / 2, height - 6, x_label, anchor="middle"))
    return _svg(width, height, body, title or "histogram")


def range_hbar(rows: list[tuple[str, float, float, float, float]], unit: str = "ns", title: str = "",
               width: int = 900, label_chars: int = 90) -> str:
    """Per row a p10–p90 bar, a p50 tick and a max dot on a shared log10 axis: (label, p10, p50, p90, max)."""
    vals = [v for _, *vs in rows for v in vs if v and v > 0]
    if not vals:
        return _svg(width, 60, [_text(8, 30, f"{title}: no data")], title or "ranges")
    shown = [fit_label(r[0], label_chars) for r in rows]
    label_w = int(min(max([text_w(x) for x in shown] + [40]) + 14, label_chars * CHAR_W + 14))
    width = max(width, label_w + 520, title_w(title))
    plot_w = width - label_w - 90
    ticks = _log_ticks(min(vals), max(vals))
    lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])
    hi = hi if hi > lo else lo + 1

    def px(v: float) -> float:
        return label_w + (math.log10(max(v, ticks[0])) - lo) / (hi - lo) * plot_w

    body: list[str] = []
    top = 34 if title else 10
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    for i, (label, p10, p50, p90, mx) in enumerate(rows):
        yy = top + i * 24
        tip = escape(f"{label}: p10 {fmt_value(p10, unit)}, p50 {fmt_value(p50, unit)}, p90 {fmt_value(p90, unit)}, "
                     f"max {fmt_value(mx, unit)}")
        body.append(f"<text x='{label_w - 6}' y='{yy + 13}' text-anchor='end'><title>{escape(label)}</title>"
                    f"{escape(shown[i])}</text>")
        body.append(f"<rect x='{px(p10):.1f}' y='{yy + 3}' width='{max(px(p90) - px(p10), 1):.1f}' height='14' "
                    f"fill='{PALETTE[0]}' opacity='0.5'><title>{tip}</title></rect>")
        body.append(f"<line x1='{px(p50):.1f}' y1='{yy}' x2='{px(p50):.1f}' y2='{yy + 20}' stroke='#222' "
                    f"stroke-width='2'><title>{tip}</title></line>")
        body.append(f"<circle cx='{px(mx):.1f}' cy='{yy + 10}' r='3' fill='{PALETTE[2]}'><title>{tip}</title></circle>")
        body.append(_text(label_w + plot_w + 8, yy + 13, fmt_value(p50, unit), extra="fill='#555'"))
    ay = top + len(rows) * 24 + 4
    body.append(f"<line x1='{label_w}' y1='{ay}' x2='{label_w + plot_w}' y2='{ay}' stroke='#999'/>")
    last_end = -1e9
    for t in ticks:
        lab = fmt_value(t, unit)
        if px(t) - text_w(lab) / 2 > last_end + 6:
            body.append(_text(px(t), ay + 14, lab, anchor="middle", extra="fill='#555'"))
            last_end = px(t) + text_w(lab) / 2
    body.append(_text(label_w + plot_w, ay + 30, "bar p10–p90, line p50 (printed), dot max; log scale",
                      anchor="end", extra="fill='#777'"))
    return _svg(width, ay + 40, body, title or "ranges")


def step_chart(series: dict[str, list[tuple[int, float]]], t0_ns: int, t1_ns: int, title: str = "",
               y_label: str = "", width: int = 900, height: int = 220) -> str:
    """Step lines (a value held until the next point) over [t0_ns, t1_ns], times relative to t0_ns."""
    pts = [p for s in series.values() for p in s]
    if not pts or t1_ns <= t0_ns:
        return _svg(width, 60, [_text(8, 30, f"{title}: no data")], title or "steps")
    left, right, top, bottom = 56, 16, 34 if title else 14, 40
    pw, ph = width - left - right, height - top - bottom
    ymax = max(max(y for _, y in pts), 1)

    def px(t: float) -> float:
        return left + (min(max(t, t0_ns), t1_ns) - t0_ns) / (t1_ns - t0_ns) * pw

    def py(v: float) -> float:
        return top + ph - v / ymax * ph

    body: list[str] = []
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    for t in _nice_ticks(ymax, 4):
        if t <= ymax:
            body.append(f"<line x1='{left}' y1='{py(t):.1f}' x2='{left + pw}' y2='{py(t):.1f}' stroke='#eee'/>")
            body.append(_text(left - 6, py(t) + 4, f"{t:g}", anchor="end", extra="fill='#555'"))
    for i, (name, s) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        d, prev = [], None
        for t, v in sorted(s):
            if prev is None:
                d.append(f"M{px(t):.1f},{py(v):.1f}")
            else:
                d.append(f"H{px(t):.1f}V{py(v):.1f}")
            prev = v
        d.append(f"H{px(t1_ns):.1f}")
        body.append(f"<path d='{''.join(d)}' fill='none' stroke='{c}' stroke-width='1.5'><title>{escape(name)}"
                    "</title></path>")
        body.append(_text(left + 8 + 150 * i, top + 12, name, extra=f"fill='{c}'"))
    for k in range(6):
        t = t0_ns + (t1_ns - t0_ns) * k / 5
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        body.append(_text(px(t), top + ph + 14, "+" + _fmt_ns(t - t0_ns), anchor=anchor, extra="fill='#555'"))
    body.append(_text(14, top + ph / 2, y_label, anchor="middle",
                      extra=f"transform='rotate(-90 14 {top + ph / 2:.1f})'"))
    return _svg(width, height, body, title or "steps")


def line_chart(
    series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, title: str = "", log_x: bool = True,
    hlines: list[tuple[float, str]] | None = None, vlines: list[tuple[float, str]] | None = None,
    y_unit: str = "", width: int = 640, height: int = 320, y_max: float | None = None,
) -> str:
    """Lines with point markers; optional horizontal reference lines and vertical markers (x in data units).
    ``y_max``: a fixed top of the y axis (HDBI: 1), else 1.1 x the largest value."""
    pts = [p for s in series.values() for p in s]
    left, right, top, bottom = 70, 20, 40 if title else 20, 46
    pw, ph = width - left - right, height - top - bottom
    xs = [x for x, _ in pts] + [x for x, _ in (vlines or [])]
    ys = [y for _, y in pts] + [y for y, _ in (hlines or [])]
    if not pts:
        return _svg(width, 60, [_text(8, 30, f"{title}: no data")], title)
    fx = (lambda v: math.log2(v)) if log_x and min(xs) > 0 else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    x1 = x1 if x1 > x0 else x0 + 1
    y0, y1 = 0.0, y_max if y_max is not None else (max(ys) * 1.1 if max(ys) > 0 else 1.0)

    def px(v: float) -> float:
        return left + (fx(v) - x0) / (x1 - x0) * pw

    def py(v: float) -> float:
        return top + ph - (v - y0) / (y1 - y0) * ph

    body: list[str] = []
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    body.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>")
    for t in _nice_ticks(y1, 4):
        if t <= y1:
            body.append(f"<line x1='{left}' y1='{py(t):.1f}' x2='{left + pw}' y2='{py(t):.1f}' stroke='#eee'/>")
            body.append(_text(left - 6, py(t) + 4, fmt_value(t, y_unit), anchor="end", extra="fill='#555'"))
    for xv in sorted({x for x, _ in pts}):
        body.append(_text(px(xv), top + ph + 16, f"{xv:g}", anchor="middle", extra="fill='#555'"))
    body.append(_text(left + pw / 2, height - 8, x_label + (" (log scale)" if log_x else ""), anchor="middle"))
    body.append(_text(14, top + ph / 2, y_label, anchor="middle",
                      extra=f"transform='rotate(-90 14 {top + ph / 2:.1f})'"))
    for yv, lab in hlines or []:
        body.append(f"<line x1='{left}' y1='{py(yv):.1f}' x2='{left + pw}' y2='{py(yv):.1f}' stroke='#999' "
                    "stroke-dasharray='4 3'/>")
        body.append(_text(left + pw - 4, py(yv) - 4, lab, anchor="end", extra="fill='#777'"))
    for xv, lab in vlines or []:
        body.append(f"<line x1='{px(xv):.1f}' y1='{top}' x2='{px(xv):.1f}' y2='{top + ph}' stroke='#e15759' "
                    "stroke-width='2' stroke-dasharray='6 3'/>")
        body.append(_text(px(xv) + 4, top + 14, lab, extra="fill='#e15759'"))
    for i, (name, s) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        s = sorted(s)
        d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(s))
        body.append(f"<path d='{d}' fill='none' stroke='{c}' stroke-width='2'/>")
        for x, y in s:
            body.append(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='4' fill='{c}'>"
                        f"<title>{escape(f'{name}: {x:g} -> {fmt_value(y, y_unit)}')}</title></circle>")
        if len(series) > 1:
            body.append(_text(left + 8, top + 16 + 14 * i, name, extra=f"fill='{c}'"))
    return _svg(width, height, body, title or y_label)


def scatter(
    series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, title: str = "", unit: str = "ns",
    diagonal: bool = True, width: int = 640, height: int = 360, max_points: int = 2000, x_unit: str | None = None,
) -> str:
    """Points per series on linear axes sharing one unit (e.g. fitted vs observed latency), with the y = x line.
    With ``x_unit`` the x axis has a unit and a range of its own (e.g. error against batch size) and no diagonal.
    A series longer than ``max_points`` is thinned to every k-th point (the title says so)."""
    thinned = False
    data: dict[str, list[tuple[float, float]]] = {}
    for name, pts in series.items():
        if len(pts) > max_points:
            k = math.ceil(len(pts) / max_points)
            pts, thinned = pts[::k], True
        data[name] = pts
    pts = [p for s in data.values() for p in s]
    if not pts:
        return _svg(width, 60, [_text(8, 30, f"{title}: no data")], title)
    left, right, top, bottom = 74, 20, 40 if title else 20, 46
    pw, ph = width - left - right, height - top - bottom
    own_x = x_unit is not None
    xs_, ys_ = [x for x, _ in pts], [y for _, y in pts]
    if own_x:
        diagonal = False
        xmax, xmin = max(max(xs_), 0) * 1.05 or 1.0, min(min(xs_), 0)
        vmax, vmin = max(max(ys_), 0) * 1.05, min(min(ys_), 0) * 1.05
        if vmax == vmin:
            vmax = 1.0
    else:
        vmax = max(max(xs_), max(ys_), 0) * 1.05 or 1.0
        vmin = min(min(xs_), min(ys_), 0)
        xmax, xmin = vmax, vmin
    ticks = [t for t in _nice_ticks(vmax, 5) if t <= vmax] if vmax > 0 else []
    if vmin < 0:
        ticks = sorted({-t for t in _nice_ticks(-vmin, 3) if t <= -vmin} | set(ticks))
    x_ticks = [t for t in _nice_ticks(xmax, 5) if t <= xmax] if own_x else ticks

    def px(v: float) -> float:
        return left + (v - xmin) / (xmax - xmin) * pw

    def py(v: float) -> float:
        return top + ph - (v - vmin) / (vmax - vmin) * ph

    body: list[str] = []
    if title:
        body.append(_text(8, 18, title + (" (thinned)" if thinned else ""), extra="font-weight='600' font-size='14'"))
    body.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>")
    for t in ticks:
        body.append(_text(left - 6, py(t) + 4, fmt_value(t, unit), anchor="end", extra="fill='#555'"))
    for t in x_ticks:
        body.append(_text(px(t), top + ph + 16, fmt_value(t, x_unit if own_x else unit), anchor="middle",
                          extra="fill='#555'"))
    if own_x and vmin < 0 < vmax:
        body.append(f"<line x1='{left}' y1='{py(0):.1f}' x2='{left + pw}' y2='{py(0):.1f}' stroke='#999' "
                    "stroke-dasharray='4 3'/>")
    if diagonal:
        body.append(f"<line x1='{px(vmin):.1f}' y1='{py(vmin):.1f}' x2='{px(vmax):.1f}' y2='{py(vmax):.1f}' "
                    "stroke='#999' stroke-dasharray='4 3'/>")
    body.append(_text(left + pw / 2, height - 8, x_label, anchor="middle"))
    body.append(_text(14, top + ph / 2, y_label, anchor="middle",
                      extra=f"transform='rotate(-90 14 {top + ph / 2:.1f})'"))
    for i, (name, s) in enumerate(data.items()):
        c = PALETTE[i % len(PALETTE)]
        for x, y in s:
            body.append(f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='2.5' fill='{c}' fill-opacity='0.6'>"
                        f"<title>{escape(f'{name}: {fmt_value(x, x_unit or unit)} -> {fmt_value(y, unit)}')}"
                        "</title></circle>")
        body.append(_text(left + 8, top + 16 + 14 * i, name, extra=f"fill='{c}'"))
    return _svg(width, height, body, title or y_label)
