"""Inline SVG charts for the HTML report, drawn by hand: three chart types of a few dozen
elements each do not justify a plotting library (matplotlib's SVG for one bar chart is
~60 KB and embeds fonts as paths; these are 2-6 KB and use the page's font). No xmlns:
inline SVG in HTML needs none, and the document stays free of URLs."""

from __future__ import annotations

from html import escape as _escape

from tracedb.report.render import clean

def escape(text) -> str:
    return _escape(clean(text))


COLORS = {"regression": "#c62828", "improvement": "#2e7d32", "host-bound": "#ef6c00",
          "unchanged": "#78909c", "not comparable": "#b0bec5", "accepted": "#1565c0"}
CHAR_W = 6.6  # average width of a character at font-size 11, px (for label room)


def axis_pct(v: float) -> str:
    """An axis end in %: 240%, 12%, 2.4%, 0.55%; never 2.4e+02%."""
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.0f}"
    return f"{v:.2g}"


def short(label: str, chars: int) -> str:
    """A label cut in the middle to `chars`, its start and end kept."""
    if len(label) <= chars:
        return label
    head = (chars - 1) * 2 // 3
    return label[:head] + "…" + label[len(label) - (chars - 1 - head):]
BASE, CAND = "#1565c0", "#c62828"


def _svg(width: int, height: int, body: list[str], label: str, cls: str) -> str:
    return (f'<svg class="chart {cls}" viewBox="0 0 {width} {height}" width="100%" role="img" '
            f'aria-label="{escape(label)}" style="max-width:{width}px">' + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 12, fill: str = "#222",
          weight: str = "normal", title: str | None = None, rotate: float = 0) -> str:
    """A label; `title`: the full text as a tooltip, when `s` is cut."""
    tip = f"<title>{escape(title)}</title>" if title is not None and title != s else ""
    turn = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}" '
            f'font-weight="{weight}"{turn}>{tip}{escape(s)}</text>')


def diverging_bars(rows: list[dict], title: str) -> str:
    """rows: label, delta_pct, noise_pct (may be None), status. Bars left (better) or right
    (worse) of 0, with the noise band (the delta's confidence interval) drawn behind each."""
    width, label_w, row_h, top, pad = 1100, 430, 26, 34, 70  # pad: room for the value labels
    height = top + row_h * len(rows) + 30
    lim = max([abs(r["delta_pct"]) for r in rows] + [abs(r["noise_pct"] or 0) for r in rows] + [0.5]) * 1.1
    x0, half = label_w + (width - label_w - pad) / 2 + pad / 2, (width - label_w - 2 * pad) / 2
    sx = lambda v: x0 + v / lim * half  # noqa: E731
    body = [_text(10, 20, title, size=14, weight="bold"),
            f'<line x1="{x0:.1f}" y1="{top - 6}" x2="{x0:.1f}" y2="{height - 24}" stroke="#444"/>']
    for i, r in enumerate(rows):
        y = top + i * row_h
        body.append(_text(label_w - 8, y + 16, short(r["label"], int((label_w - 16) / (CHAR_W * 12 / 11))),
                          anchor="end", title=r["label"]))
        if r["noise_pct"]:
            n = abs(r["noise_pct"])
            body.append(f'<rect class="noise" x="{sx(-n):.1f}" y="{y + 2}" width="{sx(n) - sx(-n):.1f}" '
                        f'height="{row_h - 4}" fill="#cfd8dc" opacity="0.8"><title>noise ±{n:.2f}%</title></rect>')
        d = r["delta_pct"]
        x, w = (sx(d), sx(0) - sx(d)) if d < 0 else (sx(0), sx(d) - sx(0))
        body.append(f'<rect class="bar" x="{x:.1f}" y="{y + 7}" width="{max(w, 1):.1f}" height="{row_h - 14}" '
                    f'fill="{COLORS.get(r["status"], "#78909c")}"><title>{escape(r["label"])}: {d:+.2f}%</title></rect>')
        body.append(_text(sx(d) + (6 if d >= 0 else -6), y + 16, f"{d:+.2f}%", anchor="start" if d >= 0 else "end", size=11))
    body.append(_text(x0 - half, height - 8, f"-{axis_pct(lim)}% (better)", size=11, fill="#555"))
    body.append(_text(x0 + half, height - 8, f"+{axis_pct(lim)}% (worse)", anchor="end", size=11, fill="#555"))
    return _svg(width, height, body, title, "bars")


def trend(values: list[float], runs: list[str], title: str, unit_fmt, change_points: list[int],
          blips: list[int], n_candidate: int) -> str:
    """A metric over the runs, oldest first; change points as dashed lines, blips circled,
    candidate runs in red."""
    longest = min(max(len(r) for r in runs), 28)
    width, height, left, right, top, bottom = 1100, 200 + int(longest * CHAR_W * 0.6), 90, 50, 30, 40 + int(longest * CHAR_W * 0.6)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.15 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad
    n = len(values)
    sx = lambda i: left + (i / max(n - 1, 1)) * (width - left - right)  # noqa: E731
    sy = lambda v: top + (hi - v) / (hi - lo) * (height - top - bottom)  # noqa: E731
    body = [_text(10, 18, title, size=13, weight="bold"),
            f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
            _text(left - 6, sy(hi - pad) + 4, unit_fmt(hi - pad), anchor="end", size=11, fill="#555"),
            _text(left - 6, sy(lo + pad) + 4, unit_fmt(lo + pad), anchor="end", size=11, fill="#555")]
    points = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in enumerate(values))
    body.append(f'<polyline class="series" points="{points}" fill="none" stroke="{BASE}" stroke-width="2"/>')
    for c in change_points:
        x = (sx(c - 1) + sx(c)) / 2
        body.append(f'<line class="change-point" x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - bottom}" '
                    f'stroke="{CAND}" stroke-dasharray="5,4" stroke-width="2"><title>moved at {escape(runs[c])}</title></line>')
        body.append(_text(x + 4, top + 4, f"moved: {short(runs[c], 40)}", size=11, fill=CAND, title=f"moved: {runs[c]}"))
    for i, v in enumerate(values):
        fill = CAND if i >= n - n_candidate else BASE
        body.append(f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="4" fill="{fill}"><title>{escape(runs[i])}: '
                    f'{escape(unit_fmt(v))}</title></circle>')
        if i in blips:
            body.append(f'<circle class="blip" cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="9" fill="none" stroke="#ef6c00" '
                        f'stroke-width="2"><title>blip: {escape(runs[i])}</title></circle>')
    step = max(1, n // 10)
    for i in range(0, n, step):
        body.append(_text(sx(i), height - bottom + 14, short(runs[i], 28), anchor="end", size=10, fill="#555",
                          title=runs[i], rotate=-35))
    return _svg(width, height, body, title, "trend")


def distribution(base: dict[str, list[float]], cand: dict[str, list[float]], title: str, unit_fmt) -> str:
    """Per-step samples of both sides as dots on one axis (one row per run), each side's
    mean as a vertical line."""
    rows = [("baseline", r, v) for r, v in base.items()] + [("candidate", r, v) for r, v in cand.items()]
    every = [x for _, _, v in rows for x in v]
    if not every:
        return ""
    chars = min(max(len(f"{run} (b)") for _, run, _ in rows), 48)
    width, left, right, row_h, top = 1100, max(200, int(chars * CHAR_W) + 16), 30, 18, 30
    height = top + row_h * len(rows) + 34
    lo, hi = min(every), max(every)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.01 or 1.0
    lo, hi = lo - pad, hi + pad
    sx = lambda v: left + (v - lo) / (hi - lo) * (width - left - right)  # noqa: E731
    body = [_text(10, 18, title, size=13, weight="bold")]
    for i, (side, run, vals) in enumerate(rows):
        y = top + i * row_h + row_h / 2
        color = BASE if side == "baseline" else CAND
        body.append(_text(left - 8, y + 4, f"{short(run, chars - 4)} ({side[0]})", anchor="end", size=11, fill=color,
                          title=f"{run} ({side})"))
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#eceff1"/>')
        for v in vals:
            body.append(f'<circle class="sample" cx="{sx(v):.1f}" cy="{y:.1f}" r="3.5" fill="{color}" opacity="0.75">'
                        f'<title>{escape(unit_fmt(v))}</title></circle>')
    for side, color in (("baseline", BASE), ("candidate", CAND)):
        vals = [x for s, _, v in rows if s == side for x in v]
        if vals:
            m = sum(vals) / len(vals)
            body.append(f'<line class="mean" x1="{sx(m):.1f}" y1="{top - 4}" x2="{sx(m):.1f}" y2="{height - 30}" '
                        f'stroke="{color}" stroke-width="2" stroke-dasharray="2,2"><title>{side} mean '
                        f'{escape(unit_fmt(m))}</title></line>')
    body.append(_text(left, height - 10, unit_fmt(lo + pad), size=11, fill="#555"))
    body.append(_text(width - right, height - 10, unit_fmt(hi - pad), anchor="end", size=11, fill="#555"))
    return _svg(width, height, body, title, "dist")


def roofline(points: dict[str, list[dict]], peak_tflops: float | None, peak_gbps: float | None, title: str) -> str:
    """Log-log roofline: x arithmetic intensity (FLOP/byte), y achieved TFLOP/s; the ceiling
    min(peak, intensity x bandwidth) as a line; each kernel of the `roofline` query a dot
    (baseline blue, candidate red), its title the kernel and figures."""
    import math

    width, height, left, right, top, bottom = 1100, 360, 80, 30, 30, 44
    allp = [p for side in points.values() for p in side]
    xs = [p["intensity_flop_per_byte"] for p in allp] + ([peak_tflops * 1000 / peak_gbps] if peak_tflops and peak_gbps else [])
    ys = [p["achieved_tflops"] for p in allp] + ([peak_tflops] if peak_tflops else [])
    x_lo, x_hi = math.floor(math.log10(min(xs))) - 0.5, math.ceil(math.log10(max(xs))) + 0.5
    y_lo, y_hi = math.floor(math.log10(min(ys))) - 0.5, math.ceil(math.log10(max(ys))) + 0.3
    sx = lambda v: left + (math.log10(v) - x_lo) / (x_hi - x_lo) * (width - left - right)  # noqa: E731
    sy = lambda v: height - bottom - (math.log10(v) - y_lo) / (y_hi - y_lo) * (height - top - bottom)  # noqa: E731
    body = [_text(10, 20, title, size=14, weight="bold"),
            f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="#999"/>']
    for e in range(math.ceil(x_lo), math.floor(x_hi) + 1):
        body.append(_text(sx(10 ** e), height - bottom + 16, f"{10 ** e:g}", anchor="middle", size=11, fill="#555"))
    for e in range(math.ceil(y_lo), math.floor(y_hi) + 1):
        body.append(_text(left - 6, sy(10 ** e) + 4, f"{10 ** e:g}", anchor="end", size=11, fill="#555"))
    body.append(_text(width / 2, height - 6, "arithmetic intensity (FLOP/byte)", anchor="middle", size=11, fill="#555"))
    body.append(_text(12, top + 12, "TFLOP/s", size=11, fill="#555"))
    if peak_tflops and peak_gbps:
        ridge = peak_tflops * 1000 / peak_gbps
        a = 10 ** x_lo
        y_a = max(a * peak_gbps / 1000, 10 ** y_lo)
        a = y_a * 1000 / peak_gbps
        body.append(f'<polyline class="ceiling" fill="none" stroke="#444" stroke-width="2" points="'
                    f'{sx(a):.1f},{sy(y_a):.1f} {sx(ridge):.1f},{sy(peak_tflops):.1f} {sx(10 ** x_hi):.1f},{sy(peak_tflops):.1f}">'
                    f'<title>ceiling: {peak_gbps:g} GB/s, {peak_tflops:g} TFLOP/s (ridge {ridge:.1f} FLOP/byte)</title></polyline>')
    for side, color in (("base", BASE), ("cand", CAND)):
        for p in points.get(side, []):
            tip = (f"{p['kernel']} ({'baseline' if side == 'base' else 'candidate'}): "
                   f"{p['intensity_flop_per_byte']:g} FLOP/byte, {p['achieved_tflops']:g} TFLOP/s, {p['bound']}-bound")
            body.append(f'<circle class="kernel {side}" cx="{sx(p["intensity_flop_per_byte"]):.1f}" '
                        f'cy="{sy(p["achieved_tflops"]):.1f}" r="4" fill="{color}" fill-opacity="0.6">'
                        f'<title>{escape(tip)}</title></circle>')
    return _svg(width, height, body, title, "roofline")
