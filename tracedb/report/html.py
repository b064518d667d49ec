"""The self-contained HTML report: no script, no stylesheet or font to fetch, charts as
inline SVG (svg.py). The verdict and the findings come first, each with its evidence
and the per-step samples of both sides; everything else sits in collapsed <details>."""

from __future__ import annotations

from html import escape as _escape

from tracedb.report import metrics as M
from tracedb.report import svg
from tracedb.report.render import (acceptance_lines, change_text, clean, finding_sentence, fmt, headline,
                                   left_out_text, noise_text, p_text, pct, row_label, rule_text, shorten, shorten_all,
                                   status_word)

CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1300px;"
    "padding:0 1em;color:#222;line-height:1.4}"
    "h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}"
    ".summary{font-size:1.25em;font-weight:600;padding:.6em .8em;border-radius:6px}"
    ".bad{background:#fdecea;color:#8e1b1b}.good{background:#e8f5e9;color:#1b5e20}"
    "table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:.92em}"
    "th,td{border:1px solid #ddd;padding:.25em .55em;text-align:left;vertical-align:top}"
    "th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "td.name{max-width:34em}.full{color:#777;font-size:.82em;overflow-wrap:anywhere}"
    "tr.regression td{background:#fdecea}tr.improvement td{background:#edf7ee}tr.host-bound td{background:#fff4e5}"
    "tr.accepted td{background:#e3f2fd}td.run{overflow-wrap:anywhere;max-width:40em}"
    "ol.findings>li{margin-bottom:1.2em}.evidence{color:#444;font-size:.95em}"
    "details{margin:.8em 0}summary{cursor:pointer;font-weight:600;font-size:1.1em}"
    ".chart{display:block;margin:.4em 0 1em;background:#fff}.legend{color:#555;font-size:.9em}"
)


def escape(text) -> str:
    """HTML-escaped, control characters shown as \\xNN (names come from traces)."""
    return _escape(clean(text))


def _name_cell(m: M.Metric) -> str:
    label = row_label(m)
    short = shorten(label, 60)
    full = f'<div class="full">{escape(label)}</div>' if short != label else ""
    dev = "" if m.device == "host" else f"{escape(m.device)} "
    return f'<td class="name">{dev}{escape(short)}{full}</td>'


def _table(metrics: list[M.Metric]) -> str:
    rows = ["<table><thead><tr><th>metric</th><th>baseline</th><th>spread</th><th>candidate</th><th>delta</th>"
            "<th>delta %</th><th>noise</th><th>p</th><th>status</th></tr></thead><tbody>"]
    for m in metrics:
        p = "" if not m.test or m.test.p is None else f"{m.test.p:.2g}"
        cells = [fmt(m.baseline, m.unit), fmt(m.base.spread, m.unit), fmt(m.candidate, m.unit),
                 fmt(m.delta, m.unit, signed=True), pct(m.delta_pct) if m.unit != "pct" else "", noise_text(m), p]
        rows.append(f'<tr class="{m.status}">{_name_cell(m)}' + "".join(f'<td class="num">{escape(c)}</td>' for c in cells)
                    + f"<td>{escape(status_word(m) or 'unchanged')}</td></tr>")
    rows.append("</tbody></table>")
    return "".join(rows)


def _unit_fmt(unit: str):
    return lambda v: fmt(v, unit)


def _finding(m: M.Metric, names: dict[str, str] | None = None) -> str:
    t = m.test
    ev = (f"baseline {fmt(m.baseline, m.unit)} (spread {fmt(m.base.spread, m.unit)}, {len(m.base.means)} run(s), "
          f"{len(m.base.samples)} samples) → candidate {fmt(m.candidate, m.unit)}; change {change_text(m)}; "
          + ("no spread measured: the practical minimum decided" if t.p is None else p_text(t))
          + f"; practical minimum {fmt(m.practical, m.unit)}{left_out_text(m)}.")
    out = [f"<li><strong>{escape(finding_sentence(m, names=names))}</strong>", f'<div class="evidence">{escape(ev)}</div>']
    if m.name and len(m.name) > 40:
        out.append(f'<div class="full">{escape(m.name)}</div>')
    if m.kind == M.KERNEL_SET:
        out.append(_kernel_list(m))
    if len(m.base.samples) + len(m.cand.samples) > 2:
        out.append(svg.distribution(m.base.runs, m.cand.runs, f"{clean(shorten(m.label, 90))}: {'per-step' if m.unit != 'bytes' or m.kind == M.COPY else 'per-run'} samples", _unit_fmt(m.unit)))
    out.append("</li>")
    return "".join(out)


def _kernel_list(m: M.Metric) -> str:
    items = []
    for key in ("new", "vanished"):
        for k in m.extra.get(key, []):
            items.append(f"<li>{key}: {escape(fmt(k['ns_per_step'], 'ns'))} per step ({k['share_pct']:.2f}% of GPU "
                         f"kernel time): <code>{escape(k['name'])}</code></li>")
    return "<ul>" + "".join(items) + "</ul>"


def _bars(rep) -> str:
    rows = []
    for m in rep.metrics:
        if not (m.gating or m.status == "host-bound") or m.test is None or m.kind == M.KERNEL_SET:
            continue
        if m.unit == "pct":
            d, n = m.test.delta, m.test.noise
        elif m.baseline:
            d = 100 * m.test.delta / abs(m.baseline)
            n = None if m.test.noise is None else 100 * m.test.noise / abs(m.baseline)
        else:
            continue
        if m.kind in M.HOST_KINDS and not rep.settings.gate_host:
            continue
        label = f"{m.device} " + (clean(shorten(m.name, 44)) if m.name else m.title)
        rows.append({"label": label, "delta_pct": d, "noise_pct": n, "status": m.status,
                     "rank": abs(d) / max(abs(n or 0), 1e-9) if m.status == "unchanged" else 1e18 + abs(d)})
    rows.sort(key=lambda r: -r["rank"])
    if not rows:
        return ""
    return svg.diverging_bars(rows[:14], "Largest changes of the gating metrics (%; grey: noise band at the "
                              f"{100 * rep.settings.confidence:g}% confidence level)")


def _trends(rep) -> str:
    out = []
    keys = {m.key: m for m in rep.metrics}
    order = [k for k, h in rep.history.items() if max(h["values"]) > min(h["values"])
             and (keys[k].kind not in (M.KERNEL, M.OP_TYPE) or h["change_points"] or h["blips"])]
    for key in order[:10]:
        h, m = rep.history[key], keys[key]
        out.append(svg.trend(h["values"], h["runs"], clean(shorten(m.label, 90)), _unit_fmt(m.unit),
                             [c["index"] for c in h["change_points"]], [b["index"] for b in h["blips"]],
                             len(rep.candidate_runs)))
        notes = [f"moved {c['shift_pct']:+.2f}% at {c['run_id']} (p = {c['p_value']:.2g})" for c in h["change_points"]]
        notes += [f"one-night blip at {b['run_id']}" for b in h["blips"]]
        if notes:
            out.append(f'<p class="legend">{escape("; ".join(notes))}</p>')
    return "".join(out)


def document(rep) -> str:
    e = escape
    found = rep.findings
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>tracedb regression report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>tracedb regression report</h1>",
           f'<p class="summary {"bad" if found else "good"}" id="headline">{e(headline(rep))}</p>',
           f"<p>{e(rule_text(rep))}</p>", _runs(rep)]
    if rep.acceptances:
        out.append("<h2>Accepted changes</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in acceptance_lines(rep))
                   + "</ul>")
    if found:
        out.append("<h2>Findings</h2><ol class=\"findings\">")
        names = shorten_all([m.name for m in found[: rep.max_findings] if m.name], 40)
        out += [_finding(m, names) for m in found[: rep.max_findings]]
        out.append("</ol>")
        if len(found) > rep.max_findings:
            out.append(f"<p>… and {len(found) - rep.max_findings} more regressions in the tables below.</p>")
    out += ["<h2>Changes against the noise</h2>", _bars(rep),
            '<p class="legend">Red: regression; green: improvement; orange: host-bound (the GPU waited for the '
            "host; not gating without --gate-host); blue: accepted; grey: within the noise or below the "
            "practical minimum.</p>"]
    if rep.history:
        out += [f"<h2>History: {len(rep.baseline_runs) + len(rep.candidate_runs)} runs</h2>", _trends(rep)]
    out.append(_roofline(rep))
    out.append(_details(rep))
    out.append("</body></html>")
    return "\n".join(x for x in out if x) + "\n"


def _roofline(rep) -> str:
    """The kernels of both sides on the roofline of the candidate's GPU (the `roofline` query)."""
    m = next((m for m in rep.metrics if m.kind == M.MFU and m.extra.get("roofline")), None)
    if m is None:
        return ""
    points = m.extra["roofline"]
    ref = next((p for side in ("cand", "base") for p in points.get(side, []) if p["peak_tflops"]), None)
    peak, bw = (ref["peak_tflops"], ref["peak_gbps"]) if ref else (None, None)
    return "<h2>Roofline</h2>" + svg.roofline(points, peak, bw, "Kernels: achieved TFLOP/s against arithmetic "
                                                  "intensity (line: the GPU's roofline; blue baseline, red candidate)")


def _runs(rep) -> str:
    """The runs compared, in full (never folded away, names never cut)."""
    rows = ["<h2>Runs compared</h2><table><thead><tr><th>side</th><th>run</th><th>model</th><th>commit</th>"
            "<th>hardware</th><th>started_at</th></tr></thead><tbody>"]
    for side, runs in (("baseline", rep.baseline_runs), ("candidate", rep.candidate_runs)):
        for r in runs:
            when = r.started_at.isoformat(sep=" ", timespec="seconds") if r.started_at else ""
            cells = [side, r.run_id, r.model, r.commit, r.hardware, when]
            rows.append("<tr>" + "".join(f'<td{" class=run" if i == 1 else ""}>{escape(c or "")}</td>'
                                         for i, c in enumerate(cells)) + "</tr>")
    rows.append("</tbody></table>")
    if rep.earlier_runs:
        rows.append(f"<p>{len(rep.earlier_runs)} earlier runs searched for the baseline's regime: "
                    f"{escape(', '.join(r.run_id for r in rep.earlier_runs))}.</p>")
    return "".join(rows)


def _details(rep) -> str:
    gating = [m for m in rep.metrics if (m.gating or m.kind == M.BUSY) and m.kind not in M.HOST_KINDS
              and m.test and m.kind != M.KERNEL_SET]
    host = sorted((m for m in rep.metrics if m.kind in M.HOST_KINDS and m.test),
                  key=lambda m: -abs(m.impact_ns))
    kernels = sorted((m for m in rep.metrics if m.kind == M.KERNEL and not m.gating and m.test),
                     key=lambda m: -abs(m.delta or 0))
    out = [f"<details><summary>Device metrics ({len(gating)})</summary>{_table(gating)}</details>",
           f"<details><summary>Host side{'' if rep.settings.gate_host else ', not gating'} ({len(host)})</summary>"
           f"{_table(host)}</details>",
           f"<details><summary>Other kernels, not gating ({len(kernels)})</summary>{_table(kernels)}</details>"]
    for s in (m for m in rep.metrics if m.kind == M.KERNEL_SET):
        out.append(f"<details><summary>{escape(s.device)}: kernels only one side launched ({s.status})</summary>"
                   f"<p>{escape(change_text(s))} per step</p>{_kernel_list(s)}</details>")
    nc = rep.with_status("not comparable")
    if nc:
        out.append(f"<details><summary>Not comparable ({len(nc)})</summary><ul>"
                   + "".join(f"<li>{escape(m.reason)}</li>" for m in nc) + "</ul></details>")
    dists = [svg.distribution(m.base.runs, m.cand.runs, f"{m.label}: per-step samples", _unit_fmt(m.unit))
             for m in rep.metrics if m.kind in (M.DEVICE_STEP, M.KERNEL_TIME, M.BUSY, M.BUSY_SHARE) and m.test]
    out.append(f"<details><summary>Per-step distributions, baseline vs candidate</summary>{''.join(dists)}</details>")
    return "".join(out)
