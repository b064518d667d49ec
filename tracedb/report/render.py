"""Text renderings of a Report: the headline, Markdown for CI logs and chat (every line at
most WIDTH characters: long names shortened in the middle, the full name below; numbers
right-aligned), and JSON for machines (schema in docs/report.md, versioned)."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import asdict

from tracedb.report import metrics as M

WIDTH = 100
NAME_WIDTH = 44


def fmt(v: float | None, unit: str, signed: bool = False) -> str:
    """Times in ns/µs/ms/s, sizes in B/KiB/MiB/GiB, shares in %."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    sign = "+" if signed and v > 0 else ""
    if unit == "pct":
        return f"{sign}{v:.2f}%"
    scales = {"ns": ((1e9, "s"), (1e6, "ms"), (1e3, "µs")),
              "bytes": ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))}[unit]
    for scale, name in scales:
        if abs(v) >= scale:
            return f"{sign}{v / scale:.4g} {name}"
    return f"{sign}{v:.0f} {'ns' if unit == 'ns' else 'B'}"


def pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.2f}%"


def _strip_signature(name: str) -> str:
    """`void ns::kernel<T>(args)` -> `ns::kernel<T>`: the return type and the argument list
    of a C++ kernel name repeat what its template arguments say."""
    if name.startswith("void "):
        name = name[5:]
    for prefix in ("at::native::", "(anonymous namespace)::", "cudnn::engines_precompiled::"):
        name = name.replace(prefix, "")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                if i > 0 and not name[:i].endswith(("operator", "::")):
                    name = name[:i]
                break
    return name


def shorten(name: str, width: int = NAME_WIDTH) -> str:
    """A long (C++ template) name without its signature, cut in the middle: its start
    and end say the most."""
    if len(name) <= width:
        return name
    name = _strip_signature(name)
    if len(name) <= width:
        return name
    head = (width - 1) * 2 // 3
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def noise_text(m: M.Metric) -> str:
    t = m.test
    if t is None:
        return ""
    if t.noise is None:
        return "no spread measured"
    base = abs(m.baseline or 0)
    if t.noise == 0:
        return "±0"
    if m.unit == "pct" or not base:
        return f"±{fmt(t.noise, m.unit)}"
    return f"±{100 * t.noise / base:.2f}%"


def change_text(m: M.Metric) -> str:
    """'+59.7 µs (+0.71%, ±0.12% noise)'."""
    if m.test is None:
        return m.reason
    d = fmt(m.test.delta, m.unit, signed=True)
    rel = pct(m.delta_pct) if m.unit != "pct" and m.kind != M.KERNEL_SET else ""
    inner = ", ".join(x for x in (rel, f"{noise_text(m)} noise" if m.test.noise is not None else noise_text(m)) if x)
    return f"{d} ({inner})"


def kernel_names(m: M.Metric, key: str, n: int = 3) -> str:
    listed = m.extra.get(key, [])
    names = [shorten(k["name"], 40) for k in listed[:n]]
    more = len(m.extra.get(key, [])) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def finding_sentence(m: M.Metric) -> str:
    if m.kind == M.KERNEL_SET:
        new, gone = m.extra.get("new", []), m.extra.get("vanished", [])
        parts = []
        if new:
            parts.append(f"{len(new)} new kernel{'s' if len(new) != 1 else ''} ({kernel_names(m, 'new')})")
        if gone:
            parts.append(f"{len(gone)} vanished ({kernel_names(m, 'vanished')})")
        return f"{m.device} " + " and ".join(parts) + f": {fmt(m.test.delta, 'ns', signed=True)} per step"
    return f"{m.device} {m.title}" + (f" {shorten(m.name, 40)}" if m.name else "") + f" {change_text(m)}"


def headline(rep) -> str:
    found = rep.findings
    if not found:
        host = [m for m in rep.metrics if m.status == "host-bound"]
        tail = f"; host-side changes, not gating: {', '.join(f'{m.device} {m.title} {pct(m.delta_pct)}' for m in host[:2])}" if host else ""
        tested = sum(m.gating and m.test is not None for m in rep.metrics)
        if not tested:
            nc = rep.with_status("not comparable")
            why = nc[0].reason if nc else "no metric on both sides"
            return f"Nothing to compare that gates ({why}); no regression."
        return f"No regression in {tested} gating metrics{tail}."
    first, rest = found[0], found[1:]
    text = finding_sentence(first)
    # The kernels behind a total: new ones, whether or not they gate on their own.
    sets = [m for m in rep.metrics if m.kind == M.KERNEL_SET and m.device == first.device and m.test
            and m.test.significant(rep.settings.confidence)] if first.kind in (M.KERNEL_TIME, M.DEVICE_STEP) else []
    if sets and sets[0].extra.get("new"):
        s = sets[0]
        new = s.extra["new"]
        text += f", {len(new)} new kernel{'s' if len(new) != 1 else ''}: {kernel_names(s, 'new')}"
        rest = [m for m in rest if m is not s]
    if first.unit == "bytes":  # a size alone: say whether the time moved too
        kt = next((m for m in rep.metrics if m.kind == M.KERNEL_TIME and m.device == first.device and m.test), None)
        if kt is not None and kt.status != "regression":
            text += f", GPU kernel time per step {kt.status} ({pct(kt.delta_pct)}, {noise_text(kt)} noise)"
    if rest:
        text += f"; {len(rest)} more finding{'s' if len(rest) != 1 else ''}"
    return "Regression: " + text + "."


def _run_line(side: str, runs) -> str:
    ids = [r.run_id for r in runs]
    shown = ", ".join(ids) if len(ids) <= 4 else f"{ids[0]}, {ids[1]}, … {ids[-1]}"
    return f"{side}: {len(ids)} run{'s' if len(ids) != 1 else ''} ({shown})"


def rule_text(rep) -> str:
    s = rep.settings
    return (f"A regression is beyond the baseline's noise at {100 * s.confidence:g}% confidence and at least "
            f"{s.min_effect_pct:g}% of the device step time (and {fmt(s.min_effect_ns, 'ns')}) for times, "
            f"{s.min_memory_pct:g}% (and {fmt(s.min_bytes, 'bytes')}) for sizes. "
            + ("Host-side metrics gate too (--gate-host)." if s.gate_host else
               "Host-side metrics (CPU op times, host step time, GPU idle) are shown, not gating."))


def _table(metrics: list[M.Metric], notes: list[str], with_device: bool) -> list[str]:
    """A pipe table padded so that its columns line up in a terminal and fit WIDTH: numbers
    right-aligned; the metric column gets what is left, long names are shortened and the
    full name goes to `notes` ([n] marks it)."""
    rows = [[fmt(m.baseline, m.unit), fmt(m.candidate, m.unit), fmt(m.delta, m.unit, signed=True),
             pct(m.delta_pct) if m.unit != "pct" else "",
             noise_text(m).replace("no spread measured", "n/a"), status_word(m)] for m in metrics]
    widths = [max(len(r[i]) for r in [HEADER[1:], *rows]) for i in range(len(HEADER) - 1)]
    room = max(24, WIDTH - sum(widths) - 3 * len(widths) - 4)
    labels = []
    for m in metrics:
        label = row_label(m)
        if with_device and m.device != "host":
            label = f"{m.device} {label}"
        if len(label) > room:
            notes.append(f"[{len(notes) + 1}] {label}")
            label = shorten(label, room - len(f" [{len(notes)}]")) + f" [{len(notes)}]"
        labels.append(label.replace("|", "/"))
    name_w = max(len(x) for x in [HEADER[0], *labels])

    def line(cells):
        return "| " + " | ".join([cells[0].ljust(name_w)] + [c.rjust(w) for c, w in zip(cells[1:], widths)]) + " |"

    sep = "|" + "-" * (name_w + 2) + "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return [line(HEADER), sep, *(line([lab, *r]) for lab, r in zip(labels, rows))]


def row_label(m: M.Metric) -> str:
    """A kernel or op type by its name; the other named metrics (memory) by title and name."""
    if m.kind in (M.PEAK, M.PEAK_REPORTED):
        if not m.name:
            return m.title
        return f"{m.name} peak" + (" (alloc.)" if m.kind == M.PEAK_REPORTED else "")
    if not m.name:
        return m.title
    return m.name if m.kind in (M.KERNEL, M.OP_TYPE) else f"{m.title} {m.name}"


def status_word(m: M.Metric) -> str:
    """REGRESSED for a gating regression; a metric that does not gate only got worse/better."""
    if not m.gating and m.status in ("regression", "improvement"):
        return "worse" if m.status == "regression" else "better"
    return STATUS_WORD[m.status]


STATUS_WORD = {"regression": "REGRESSED", "improvement": "improved", "unchanged": "",
               "host-bound": "host-bound", "not comparable": "n/c"}
HEADER = ["metric", "baseline", "candidate", "delta", "delta %", "noise", "status"]


def markdown(rep) -> str:
    out = ["# tracedb regression report", "", *textwrap.wrap(f"**{headline(rep)}**", WIDTH), "",
           _run_line("Baseline", rep.baseline_runs), _run_line("Candidate", rep.candidate_runs), ""]
    out += textwrap.wrap(rule_text(rep), WIDTH) + [""]
    found = rep.findings
    notes: list[str] = []
    if found:
        out += ["## Findings", ""]
        for i, m in enumerate(found[: rep.max_findings], 1):
            out += textwrap.wrap(f"{i}. {finding_sentence(m)}", WIDTH, subsequent_indent="   ")
            out += textwrap.wrap(_evidence(m), WIDTH, initial_indent="   ", subsequent_indent="   ")
            if m.name and len(m.name) > 40:
                out += textwrap.wrap(f"full name: {m.name}", WIDTH, initial_indent="   ", subsequent_indent="     ")
        if len(found) > rep.max_findings:
            out.append(f"… and {len(found) - rep.max_findings} more regressions in the table below.")
        out.append("")
    blocks = [
        ("Device metrics", [m for m in rep.metrics if (m.gating or m.kind == M.BUSY) and m.kind not in M.HOST_KINDS
                            and m.kind != M.KERNEL_SET and m.test], None),
        ("Host side (not gating)" if not rep.settings.gate_host else "Host side",
         sorted((m for m in rep.metrics if m.kind in M.HOST_KINDS and m.test),
                key=lambda m: -abs(m.impact_ns)), 15),
        ("Other kernels (not gating)", sorted((m for m in rep.metrics if m.kind == M.KERNEL and not m.gating and m.test),
                                             key=lambda m: -abs(m.delta or 0)), 10),
    ]
    for title, ms, limit in blocks:
        if not ms:
            continue
        out += [f"## {title}", ""]
        if limit and len(ms) > limit:
            out += [f"The {limit} largest changes of {len(ms)}.", ""]
            ms = ms[:limit]
        devices = sorted({m.device for m in ms})
        if len(devices) == 1 or title.startswith("Host"):
            out += _table(ms, notes, with_device=len(devices) > 1) + [""]
            continue
        for d in devices:
            out += [f"### {d}", "", *_table([m for m in ms if m.device == d], notes, with_device=False), ""]
    sets = [m for m in rep.metrics if m.kind == M.KERNEL_SET]
    for s in sets:
        out += [f"## {s.device} kernels only one side launched", ""]
        for key in ("new", "vanished"):
            for k in s.extra.get(key, []):
                out += textwrap.wrap(f"- {key}: {fmt(k['ns_per_step'], 'ns')} per step ({k['share_pct']:.2f}%): {k['name']}",
                                     WIDTH, subsequent_indent="  ")
        out.append("")
    nc = rep.with_status("not comparable")
    if nc:
        out += ["## Not comparable", ""]
        for m in nc:
            out += textwrap.wrap(f"- {m.reason}", WIDTH, subsequent_indent="  ")
        out.append("")
    if rep.history:
        out += ["## History", ""]
        for key, h in rep.history.items():
            moved = [f"moved {c['shift_pct']:+.2f}% on {c['run_id']}" for c in h["change_points"]]
            blips = [f"blip on {b['run_id']}" for b in h["blips"]]
            if moved or blips:
                out += textwrap.wrap(f"- {key}: {'; '.join(moved + blips)}", WIDTH, subsequent_indent="  ")
        if not any(h["change_points"] or h["blips"] for h in rep.history.values()):
            out.append(f"No change point or blip in {len(rep.history)} series over {len(rep.baseline_runs) + len(rep.candidate_runs)} runs.")
        out.append("")
    if notes:
        out += ["Full names:", ""]
        for n in notes:
            out += textwrap.wrap(n, WIDTH, subsequent_indent="    ")
    return "\n".join(out).rstrip("\n") + "\n"


def _evidence(m: M.Metric) -> str:
    t = m.test
    conf = "" if t.p is None else f", p = {t.p:.2g} ({t.method})"
    return (f"baseline {fmt(m.baseline, m.unit)} (spread {fmt(m.base.spread, m.unit)}, {_n(m.base.means, 'run')}, "
            f"{_n(m.base.samples, 'sample')}); candidate {fmt(m.candidate, m.unit)} ({_n(m.cand.means, 'run')}, "
            f"{_n(m.cand.samples, 'sample')}); delta {fmt(t.delta, m.unit, signed=True)}"
            f"{' ' + pct(m.delta_pct) if m.unit != 'pct' and m.kind != M.KERNEL_SET else ''}, noise {noise_text(m)}{conf}; "
            f"practical minimum {fmt(m.practical, m.unit)}" + left_out_text(m))


def left_out_text(m: M.Metric) -> str:
    out = m.extra.get("left_out")
    return "; left out of the baseline: " + ", ".join(f"{r} ({why})" for r, why in out.items()) if out else ""


def _n(items, word: str) -> str:
    return f"{len(items)} {word}{'s' if len(items) != 1 else ''}"


def metric_dict(m: M.Metric, confidence: float) -> dict:
    t = m.test

    def side(s):
        return {"mean": s.mean, "spread": s.spread, "runs": len(s.means), "samples": len(s.samples),
                "per_run": s.runs}

    d = {"key": m.key, "kind": m.kind, "device": m.device, "name": m.name, "title": m.title, "unit": m.unit,
         "gating": m.gating, "status": m.status, "reason": m.reason,
         "baseline": side(m.base), "candidate": side(m.cand),
         "delta": t.delta if t else None, "delta_pct": m.delta_pct, "noise": t.noise if t else None,
         "p_value": t.p if t else None, "confidence": confidence, "method": t.method if t else None,
         "practical_minimum": m.practical, "impact_ns_per_step": m.impact_ns,
         "baseline_left_out": m.extra.get("left_out", {})}
    if m.kind == M.KERNEL_SET:
        d["new_kernels"] = m.extra.get("new", [])
        d["vanished_kernels"] = m.extra.get("vanished", [])
    return d


def to_dict(rep) -> dict:
    from tracedb.report import SCHEMA_VERSION

    conf = rep.settings.confidence
    return {
        "schema": "tracedb.report", "schema_version": SCHEMA_VERSION,
        "verdict": "regression" if rep.has_regression else "ok", "exit_code": 1 if rep.has_regression else 0,
        "headline": headline(rep), "rule": rule_text(rep), "settings": asdict(rep.settings),
        "baseline_runs": [asdict(r) for r in rep.baseline_runs],
        "candidate_runs": [asdict(r) for r in rep.candidate_runs],
        "findings": [m.key for m in rep.findings],
        "metrics": [metric_dict(m, conf) for m in rep.metrics],
        "history": rep.history,
    }


def json_text(rep) -> str:
    return json.dumps(to_dict(rep), indent=2, default=str) + "\n"
