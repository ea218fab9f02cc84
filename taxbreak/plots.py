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
    """A duration for humans: 1.23 ms, 45.6 us, 789 ns."""
    a = abs(value_ns)
    if a >= 1e9:
        return f"{value_ns / 1e9:.3g} s"
    if a >= 1e6:
        return f"{value_ns / 1e6:.3g} ms"
    if a >= 1e3:
        return f"{value_ns / 1e3:.3g} us"
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


def short_kernel_name(name: str, max_chars: int = 48) -> str:
    """A readable kernel label: no 'void', no argument list, no namespaces, the first non-numeric template argument
    kept (``vectorized_elementwise_kernel<CUDAFunctor_add>``)."""
    s = name.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    depth, base_end = 0, len(s)
    for i, ch in enumerate(s):  # the argument list starts at the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            base_end = i
            break
    s = s[:base_end]
    head, lt, rest = s.partition("<")
    head = head.split("::")[-1]
    if lt:
        arg = next((a.strip() for a in rest.split(",") if a.strip() and not a.strip()[0].isdigit()
                    and not a.strip().startswith("-")), "")
        parts = [p for p in arg.split("<")[0].split("::") if p and not any(c in p for c in "{}()")]
        arg = parts[-1].strip(" >") if parts else ""
        head = f"{head}<{arg}>" if arg else head
    return head if len(head) <= max_chars else head[: max_chars - 3] + "..."


def _nice_ticks(vmax: float, n: int = 5) -> list[float]:
    if vmax <= 0:
        return [0.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(vmax / step) + 2) if i * step <= vmax * 1.0001 + step]


def stacked_hbar(
    rows: list[tuple[str, list[tuple[str, float]]]], unit: str = "ns", title: str = "", width: int = 900,
    colors: dict[str, str] | None = None, legend: bool = True, label_w: int = 190, label_chars: int = 28,
) -> str:
    """Horizontal stacked bars: one bar per (label, [(segment, value)]) row, a shared legend and axis."""
    seg_names: list[str] = []
    for _, segs in rows:
        for name, _ in segs:
            if name not in seg_names:
                seg_names.append(name)
    colors = colors or {}
    color = {n: colors.get(n, PALETTE[i % len(PALETTE)]) for i, n in enumerate(seg_names)}
    bar_h, gap, top = 22, 10, 46 if title else 26
    plot_w = width - label_w - 30
    vmax = max([sum(max(v, 0) for _, v in segs) for _, segs in rows] + [0])
    ticks = _nice_ticks(vmax)
    scale_max = max(ticks[-1], vmax) or 1.0
    height = top + len(rows) * (bar_h + gap) + 50
    body: list[str] = []
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    lx = 8
    for n in seg_names if legend else []:
        body.append(f"<rect x='{lx}' y='{top - 20}' width='12' height='12' fill='{color[n]}'/>")
        body.append(_text(lx + 16, top - 10, n))
        lx += 24 + 7 * len(n)
    for i, (label, segs) in enumerate(rows):
        y = top + i * (bar_h + gap)
        body.append(_text(label_w - 6, y + bar_h * 0.7, label[:label_chars], anchor="end"))
        x = float(label_w)
        for name, v in segs:
            w = max(v, 0) / scale_max * plot_w
            body.append(
                f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{bar_h}' fill='{color[name]}'>"
                f"<title>{escape(label + ': ' + (name + ' = ' if legend else '') + fmt_value(v, unit))}</title></rect>"
            )
            x += w
        total = sum(max(v, 0) for _, v in segs)
        body.append(_text(x + 4, y + bar_h * 0.7, fmt_value(total, unit), extra="fill='#555'"))
    ay = top + len(rows) * (bar_h + gap)
    body.append(f"<line x1='{label_w}' y1='{ay}' x2='{label_w + plot_w}' y2='{ay}' stroke='#999'/>")
    for t in ticks:
        tx = label_w + t / scale_max * plot_w
        if tx <= label_w + plot_w + 0.5:
            body.append(f"<line x1='{tx:.1f}' y1='{ay}' x2='{tx:.1f}' y2='{ay + 4}' stroke='#999'/>")
            body.append(_text(tx, ay + 16, fmt_value(t, unit), anchor="middle", extra="fill='#555'"))
    return _svg(width, height, body, title or "stacked bars")


def hbar(
    items: list[tuple[str, float]], unit: str = "ns", title: str = "", width: int = 900, label_w: int = 190,
    label_chars: int = 28,
) -> str:
    """Simple horizontal bars, in the order given."""
    return stacked_hbar([(label, [("value", v)]) for label, v in items], unit=unit, title=title, width=width,
                        colors={"value": PALETTE[0]}, legend=False, label_w=label_w, label_chars=label_chars)


def line_chart(
    series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, title: str = "", log_x: bool = True,
    hlines: list[tuple[float, str]] | None = None, vlines: list[tuple[float, str]] | None = None,
    y_unit: str = "", width: int = 640, height: int = 320,
) -> str:
    """Lines with point markers; optional horizontal reference lines and vertical markers (x in data units)."""
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
    y0, y1 = 0.0, max(ys) * 1.1 if max(ys) > 0 else 1.0

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


def timeline(
    lanes: list[tuple[str, list[tuple[int, int, str, str]]]], gaps_ns: list[tuple[int, int]] | None = None,
    title: str = "", width: int = 1100, lane_colors: dict[str, str] | None = None,
) -> str:
    """A launch timeline: lanes of (start_ns, end_ns, name, category) boxes on one time axis; idle gaps of the
    device are shaded red across the plot.  Times are ns on one trace clock."""
    spans = [(s, e) for _, boxes in lanes for s, e, _, _ in boxes] + list(gaps_ns or [])
    if not spans:
        return _svg(width, 60, [_text(8, 30, f"{title}: no events")], title)
    t0, t1 = min(s for s, _ in spans), max(e for _, e in spans)
    t1 = t1 if t1 > t0 else t0 + 1
    label_w, lane_h, top = 150, 26, 44 if title else 24
    pw = width - label_w - 16
    height = top + len(lanes) * (lane_h + 8) + 40
    cats: dict[str, str] = dict(lane_colors or {})

    def px(t: float) -> float:
        return label_w + (t - t0) / (t1 - t0) * pw

    body: list[str] = []
    if title:
        body.append(_text(8, 18, title, extra="font-weight='600' font-size='14'"))
    plot_h = len(lanes) * (lane_h + 8)
    for s, e in gaps_ns or []:
        body.append(f"<rect x='{px(s):.2f}' y='{top - 4}' width='{max(px(e) - px(s), 0.5):.2f}' height='{plot_h}' "
                    f"fill='#e15759' opacity='0.13'><title>{escape('GPU idle ' + _fmt_ns(e - s))}</title></rect>")
    for i, (lane, boxes) in enumerate(lanes):
        y = top + i * (lane_h + 8)
        body.append(_text(label_w - 6, y + lane_h * 0.65, lane, anchor="end"))
        body.append(f"<line x1='{label_w}' y1='{y + lane_h}' x2='{label_w + pw}' y2='{y + lane_h}' stroke='#eee'/>")
        for s, e, name, cat in boxes:
            if cat not in cats:
                cats[cat] = PALETTE[len(cats) % len(PALETTE)]
            body.append(
                f"<rect x='{px(s):.2f}' y='{y}' width='{max(px(e) - px(s), 0.6):.2f}' height='{lane_h}' "
                f"fill='{cats[cat]}' stroke='#fff' stroke-width='0.3'>"
                f"<title>{escape(f'{name} ({cat}): {_fmt_ns(e - s)} at +{_fmt_ns(s - t0)}')}</title></rect>"
            )
    ay = top + plot_h
    for k in range(6):
        t = t0 + (t1 - t0) * k / 5
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        body.append(_text(px(t), ay + 14, "+" + _fmt_ns(t - t0), anchor=anchor, extra="fill='#555'"))
    lx = label_w
    for cat, c in list(cats.items()) + [("GPU idle", "#e15759")]:
        op = " opacity='0.35'" if cat == "GPU idle" else ""
        body.append(f"<rect x='{lx}' y='{ay + 22}' width='12' height='12' fill='{c}'{op}/>")
        body.append(_text(lx + 16, ay + 32, cat))
        lx += 30 + 7 * len(cat)
    return _svg(width, height, body, title or "timeline")


def scatter(
    series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str, title: str = "", unit: str = "ns",
    diagonal: bool = True, width: int = 640, height: int = 360, max_points: int = 2000,
) -> str:
    """Points per series on linear axes sharing one unit (e.g. fitted vs observed latency), with the y = x line.
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
    vmax = max(max(x for x, _ in pts), max(y for _, y in pts), 0) * 1.05 or 1.0
    vmin = min(min(x for x, _ in pts), min(y for _, y in pts), 0)
    ticks = [t for t in _nice_ticks(vmax, 5) if t <= vmax]

    def px(v: float) -> float:
        return left + (v - vmin) / (vmax - vmin) * pw

    def py(v: float) -> float:
        return top + ph - (v - vmin) / (vmax - vmin) * ph

    body: list[str] = []
    if title:
        body.append(_text(8, 18, title + (" (thinned)" if thinned else ""), extra="font-weight='600' font-size='14'"))
    body.append(f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>")
    for t in ticks:
        body.append(_text(left - 6, py(t) + 4, fmt_value(t, unit), anchor="end", extra="fill='#555'"))
        body.append(_text(px(t), top + ph + 16, fmt_value(t, unit), anchor="middle", extra="fill='#555'"))
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
                        f"<title>{escape(f'{name}: {fmt_value(x, unit)} -> {fmt_value(y, unit)}')}</title></circle>")
        body.append(_text(left + 8, top + 16 + 14 * i, name, extra=f"fill='{c}'"))
    return _svg(width, height, body, title or y_label)
