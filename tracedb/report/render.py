"""Text renderings of a Report: the headline, Markdown for CI logs and chat (every line at
most WIDTH characters: long names shortened in the middle, the full name below; numbers
right-aligned), and JSON for machines (schema in docs/report.md, versioned).

Names come from traces and run.json: hostile ones too (issue 28: `<script>` as a run id,
`<img onerror=...>` as a kernel name). In Markdown every kernel, op and run name is a code
span (`md_code`: nothing in it is markup, HTML or a link), other free text (notes, reasons)
has its markup characters backslash-escaped (`md_text`), and control characters (ANSI and
OSC escape sequences) are shown as `\\xNN` everywhere (`clean`). A long name is wrapped at
`::`, `<`, `,` or `_`, never mid-word (`wrap`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict

from tracedb.report import metrics as M

WIDTH = 100
NAME_WIDTH = 44
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`<>\[\]!|])")


def clean(text: str) -> str:
    """Control characters (an ANSI or OSC escape sequence, a newline in a name) as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def plain(name: str) -> str:
    return clean(name)


def md_code(name: str) -> str:
    """A name as a Markdown code span: literal text, whatever it holds."""
    name = clean(name)
    ticks = max((len(t) for t in re.findall(r"`+", name)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if ticks or name.startswith(" ") or name.endswith(" ") else ""
    return f"{fence}{pad}{name}{pad}{fence}"


def md_text(text: str) -> str:
    """Free text for Markdown: markup, HTML and link characters backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", clean(text))


def _pieces(word: str) -> list[str]:
    """A word cut after each `::`, `<`, `,` and `_`: where a long C++ name may break."""
    return re.findall(r".+?(?:::|[<,_]|$)", word) or [word]


def wrap(text: str, width: int = WIDTH, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    """textwrap.wrap, except that a word longer than a line breaks at `::`, `<`, `,` or `_`
    (a kernel name stays readable), and only where it has none, mid-word."""
    lines, cur, fresh = [], initial_indent, True
    for word in text.split():
        if len(cur) + (0 if fresh else 1) + len(word) <= width:
            cur += ("" if fresh else " ") + word
            fresh = False
            continue
        if not fresh and len(subsequent_indent) + len(word) <= width:
            lines.append(cur)
            cur, fresh = subsequent_indent + word, False
            continue
        if not fresh:
            cur += " "
        for piece in _pieces(word):
            while piece:
                room = width - len(cur)
                if len(piece) <= room:
                    cur, piece = cur + piece, ""
                elif cur.strip() and len(subsequent_indent) + len(piece) <= width:
                    lines.append(cur.rstrip())
                    cur = subsequent_indent
                else:  # no break point within a line: cut
                    room = max(room, 1)
                    cur, piece = cur + piece[:room], piece[room:]
                    lines.append(cur)
                    cur = subsequent_indent
        fresh = not cur.strip()
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


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
    return (name[:head].rstrip() + "…" + name[len(name) - (width - 1 - head):].lstrip()).strip()


def shorten_all(names, width: int = NAME_WIDTH) -> dict[str, str]:
    """Each name as `shorten` would print it, but no two different names alike (two
    `sm80_xmma_gemm_…_cublas` kernels listed side by side must read as two): signatures
    dropped where that keeps them apart, then cut where they differ (`output.distinct_cut`,
    the terminal tables' rule)."""
    from tracedb.output import distinct_cut

    names = list(dict.fromkeys(names))
    short = {n: _strip_signature(n) if len(n) > width else n for n in names}
    if len(set(short.values())) < len(names):  # only the signature tells some apart
        short = {n: n for n in names}
    _, shown = distinct_cut(list(short.values()), width)
    return {n: shown[s].strip() for n, s in short.items()}


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


def kernel_names(m: M.Metric, key: str, n: int = 3, code=plain) -> str:
    listed = m.extra.get(key, [])
    short = shorten_all([k["name"] for k in listed[:n]], 40)
    names = [code(short[k["name"]]) for k in listed[:n]]
    more = len(m.extra.get(key, [])) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def finding_sentence(m: M.Metric, code=plain, names: dict[str, str] | None = None) -> str:
    """One metric's change in words; `code` formats names (md_code in Markdown); `names`:
    how to print each name (`shorten_all` of the names listed together), else `shorten`."""
    if m.kind == M.KERNEL_SET:
        new, gone = m.extra.get("new", []), m.extra.get("vanished", [])
        parts = []
        if new:
            parts.append(f"{len(new)} new kernel{'s' if len(new) != 1 else ''} ({kernel_names(m, 'new', code=code)})")
        if gone:
            parts.append(f"{len(gone)} vanished ({kernel_names(m, 'vanished', code=code)})")
        return f"{m.device} " + " and ".join(parts) + f": {fmt(m.test.delta, 'ns', signed=True)} per step"
    if m.extra.get("straggler"):
        return (f"{m.device} {code(m.name)} is a straggler: its compute kernel time per step "
                f"{change_text(m)}; {m.reason.split(': ', 1)[1]}")
    name = (names or {}).get(m.name) or shorten(m.name, 40)
    return f"{m.device} {m.title}" + (f" {code(name)}" if m.name else "") + f" {change_text(m)}"


def _launches(rep, m: M.Metric) -> str:
    """', 5,270 -> 2,250 kernels a step' when the launches per step changed by 1% or more."""
    per_run = m.extra.get("launches", {})
    b = [per_run[r] for r in m.base.runs if r in per_run]
    c = [per_run[r] for r in m.cand.runs if r in per_run]
    if not (b and c):
        return ""
    b, c = sum(b) / len(b), sum(c) / len(c)
    if b and abs(c - b) / b < 0.01:
        return ""
    return f", {b:,.0f} → {c:,.0f} kernels a step"


def _not_gating_text(rep, code=plain) -> str:
    items = rep.not_gating[:3]
    if not items:
        return ""
    parts = []
    for m in items:
        what = f"{m.device} {m.title}" + (f" {code(shorten(m.name, 30))}" if m.name else "")
        size = pct(m.delta_pct) if m.unit != "pct" else fmt(m.test.delta, "pct", signed=True).replace("%", " points")
        why = " host-bound" if m.status == "host-bound" else ""
        noise = noise_text(m)
        noise = noise if noise.startswith("no ") else f"{noise} noise"
        parts.append(f"{what} {size} ({noise}{';' + why if why else ''})")
    more = len(rep.not_gating) - len(items)
    return "; not gating: " + ", ".join(parts) + (f" and {more} more" if more > 0 else "") + \
        ("" if rep.settings.gate_host else " (--gate-host gates them)")


def headline(rep, code=plain) -> str:
    found = rep.findings
    accepted = rep.with_status("accepted")
    tail = _not_gating_text(rep, code)
    if accepted:
        tail += f"; {len(accepted)} accepted change{'s' if len(accepted) != 1 else ''} (not gating)"
    if not found:
        tested = sum(m.gating and m.test is not None for m in rep.metrics)
        if not tested:
            nc = rep.with_status("not comparable")
            why = nc[0].reason if nc else "no metric on both sides"
            return f"Nothing to compare that gates ({why}); no regression{tail}."
        better = rep.improvements
        if better:
            first = better[0]
            text = "Improvement: " + finding_sentence(first, code)
            if first.kind == M.KERNEL_TIME:
                text += _launches(rep, first)
            if len(better) > 1:
                text += f"; {len(better) - 1} more improvement{'s' if len(better) > 2 else ''}"
            return f"{text}; no regression in {tested} gating metrics{tail}."
        return f"No regression in {tested} gating metrics{tail}."
    first, rest = found[0], found[1:]
    text = finding_sentence(first, code)
    if first.kind == M.KERNEL_TIME:
        text += _launches(rep, first)
    # The kernels behind a total: new ones, whether or not they gate on their own.
    sets = [m for m in rep.metrics if m.kind == M.KERNEL_SET and m.device == first.device and m.test
            and m.test.significant(rep.settings.confidence)] if first.kind in (M.KERNEL_TIME, M.DEVICE_STEP) else []
    if sets and sets[0].extra.get("new"):
        s = sets[0]
        new = s.extra["new"]
        text += f", {len(new)} new kernel{'s' if len(new) != 1 else ''}: {kernel_names(s, 'new', code=code)}"
        rest = [m for m in rest if m is not s]
    if first.unit == "bytes":  # a size alone: say whether the time moved too
        kt = next((m for m in rep.metrics if m.kind == M.KERNEL_TIME and m.device == first.device and m.test), None)
        if kt is not None and kt.status != "regression":
            text += f", GPU kernel time per step {kt.status} ({pct(kt.delta_pct)}, {noise_text(kt)} noise)"
    if rest:
        text += f"; {len(rest)} more finding{'s' if len(rest) != 1 else ''}"
    return "Regression: " + text + tail + "."


def _run_line(side: str, runs, code=plain) -> str:
    ids = [code(r.run_id) for r in runs]
    shown = ", ".join(ids) if len(ids) <= 4 else f"{ids[0]}, {ids[1]}, … {ids[-1]}"
    return f"{side}: {len(ids)} run{'s' if len(ids) != 1 else ''} ({shown})"


def earlier_text(rep) -> str:
    n = len(rep.earlier_runs)
    return f"; {n} earlier run{'s' if n != 1 else ''} searched for the baseline's regime" if n else ""


def rule_text(rep) -> str:
    s = rep.settings
    test = "Mann-Whitney U on the per-step samples" if s.test == "mann-whitney" else "Student's t"
    return (f"A regression is beyond the baseline's noise ({test}) at {100 * s.confidence:g}% confidence for "
            f"the headline and device metrics, and at a false-discovery rate of {100 * s.fdr:g}% "
            "(Benjamini-Hochberg) for the per-kernel, per-op and per-rank ones; and at least "
            f"{s.min_effect_pct:g}% of the device step time (and {fmt(s.min_effect_ns, 'ns')}) for times, "
            f"{s.min_memory_pct:g}% (and {fmt(s.min_bytes, 'bytes')}) for sizes"
            + "".join(f"; {k} {v:g}%" for k, v in sorted(s.min_effect.items())) + ". "
            + ("Host-side metrics gate too (--gate-host)." if s.gate_host else
               "Host-side metrics (CPU op times, host step time, GPU idle) are shown, not gating.")
            + "".join(f" {k} {'gates' if v else 'does not gate'}." for k, v in sorted(s.gating.items()))
            + (f" Ignored names: {', '.join(s.ignore)}." if s.ignore else "")
            + (f" Settings from {s.source}." if s.source else ""))


def acceptance_lines(rep, code=plain, words=plain) -> list[str]:
    """One line per acceptance that bears on this report (baseline start or candidate)."""
    return [f"{a.acceptance_id}: {a.text(code, words)}" for a in rep.acceptances]


def _table(metrics: list[M.Metric], notes: list[str], with_device: bool) -> list[str]:
    """A pipe table padded so that its columns line up in a terminal and fit WIDTH: numbers
    right-aligned; the metric column gets what is left, long names are shortened and the
    full name goes to `notes` ([n] marks it). Names are code spans."""
    rows = [[fmt(m.baseline, m.unit), fmt(m.candidate, m.unit), fmt(m.delta, m.unit, signed=True),
             pct(m.delta_pct) if m.unit != "pct" else "",
             noise_text(m).replace("no spread measured", "n/a"), status_word(m)] for m in metrics]
    widths = [max(len(r[i]) for r in [HEADER[1:], *rows]) for i in range(len(HEADER) - 1)]
    room = max(24, WIDTH - sum(widths) - 3 * len(widths) - 4)
    labels = []
    for m in metrics:
        label = clean(row_label(m)).replace("|", "/")
        named = m.kind in NAMED
        prefix = f"{m.device} " if with_device and m.device != "host" else ""
        if len(prefix) + len(label) + 2 * named > room:
            notes.append(m.name if named else label)
            mark = f" [{len(notes)}]"
            label = shorten(label, room - len(prefix) - len(mark) - 2 * named).strip()
            label = (md_code(label) if named else md_text(label)) + mark
        else:
            label = md_code(label) if named else md_text(label)
        labels.append(prefix + label)
    name_w = max(len(x) for x in [HEADER[0], *labels])

    def line(cells):
        return "| " + " | ".join([cells[0].ljust(name_w)] + [c.rjust(w) for c, w in zip(cells[1:], widths)]) + " |"

    sep = "|" + "-" * (name_w + 2) + "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return [line(HEADER), sep, *(line([lab, *r]) for lab, r in zip(labels, rows))]


NAMED = (M.KERNEL, M.OP_TYPE, M.RANK_KERNEL_TIME)  # rows labelled by a name from the trace


def row_label(m: M.Metric) -> str:
    """A kernel or op type by its name; the other named metrics (memory) by title and name."""
    if m.kind in (M.PEAK, M.PEAK_REPORTED):
        if not m.name:
            return m.title
        return f"{m.name} peak" + (" (alloc.)" if m.kind == M.PEAK_REPORTED else "")
    if not m.name:
        return m.title
    return m.name if m.kind in NAMED else f"{m.title} {m.name}"


def status_word(m: M.Metric) -> str:
    """REGRESSED for a gating regression; a metric that does not gate only got worse/better."""
    if not m.gating and m.status in ("regression", "improvement"):
        return "worse" if m.status == "regression" else "better"
    if m.extra.get("straggler") and m.status == "regression":
        return "STRAGGLER"
    return STATUS_WORD[m.status]


STATUS_WORD = {"regression": "REGRESSED", "improvement": "improved", "unchanged": "",
               "host-bound": "host-bound", "not comparable": "n/c", "accepted": "accepted"}
HEADER = ["metric", "baseline", "candidate", "delta", "delta %", "noise", "status"]


def markdown(rep) -> str:
    out = ["# tracedb regression report", "", *wrap(f"**{headline(rep, md_code)}**"), "",
           *wrap(_run_line("Baseline", rep.baseline_runs, md_code) + earlier_text(rep)),
           *wrap(_run_line("Candidate", rep.candidate_runs, md_code)), ""]
    out += wrap(md_text(rule_text(rep))) + [""]
    if rep.acceptances:
        out += ["## Accepted changes", ""]
        for line in acceptance_lines(rep, md_code, md_text):
            out += wrap("- " + line, subsequent_indent="  ")
        out.append("")
    found = rep.findings
    notes: list[str] = []
    if found:
        out += ["## Findings", ""]
        names = shorten_all([m.name for m in found[: rep.max_findings] if m.name], 40)
        for i, m in enumerate(found[: rep.max_findings], 1):
            out += wrap(f"{i}. {finding_sentence(m, md_code, names)}", subsequent_indent="   ")
            out += wrap(md_text(_evidence(m)), initial_indent="   ", subsequent_indent="   ")
            if m.name and len(m.name) > 40:
                out += wrap(f"full name: {md_code(m.name)}", initial_indent="   ", subsequent_indent="     ")
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
                out += wrap(f"- {key}: {fmt(k['ns_per_step'], 'ns')} per step ({k['share_pct']:.2f}%): {md_code(k['name'])}",
                            subsequent_indent="  ")
        out.append("")
    nc = rep.with_status("not comparable")
    if nc:
        out += ["## Not comparable", ""]
        for m in nc:
            out += wrap(f"- {md_text(m.reason)}", subsequent_indent="  ")
        out.append("")
    if rep.history:
        out += ["## History", ""]
        for key, h in rep.history.items():
            moved = [f"moved {c['shift_pct']:+.2f}% on {md_code(c['run_id'])}" for c in h["change_points"]]
            blips = [f"blip on {md_code(b['run_id'])}" for b in h["blips"]]
            if moved or blips:
                out += wrap(f"- {md_code(key)}: {'; '.join(moved + blips)}", subsequent_indent="  ")
        if not any(h["change_points"] or h["blips"] for h in rep.history.values()):
            out.append(f"No change point or blip in {len(rep.history)} series over {len(rep.baseline_runs) + len(rep.candidate_runs)} runs.")
        out.append("")
    if notes:
        out += ["Full names:", ""]
        for i, n in enumerate(notes, 1):
            out += wrap(f"[{i}] {md_code(n)}", subsequent_indent="    ")
    return "\n".join(out).rstrip("\n") + "\n"


def p_text(t) -> str:
    """'p = 0.0021 (across runs)'; a q-value too when the metric is tested with the others."""
    if t.p is None:
        return ""
    p = f"p = {t.p:.2g}" if t.p >= 1e-4 else "p < 0.0001"
    q = "" if t.q is None else (f", q = {t.q:.2g}" if t.q >= 1e-4 else ", q < 0.0001")
    return f"{p}{q} ({t.method})"


def _evidence(m: M.Metric) -> str:
    t = m.test
    conf = "" if t.p is None else f", {p_text(t)}"
    return (f"baseline {fmt(m.baseline, m.unit)} (spread {fmt(m.base.spread, m.unit)}, {_n(m.base.means, 'run')}, "
            f"{_n(m.base.samples, 'sample')}); candidate {fmt(m.candidate, m.unit)} ({_n(m.cand.means, 'run')}, "
            f"{_n(m.cand.samples, 'sample')}); delta {fmt(t.delta, m.unit, signed=True)}"
            f"{' ' + pct(m.delta_pct) if m.unit != 'pct' and m.kind != M.KERNEL_SET else ''}, noise {noise_text(m)}{conf}; "
            f"practical minimum {fmt(m.practical, m.unit)}" + left_out_text(m))


def left_out_text(m: M.Metric) -> str:
    out = m.extra.get("left_out")
    if not out:
        return ""
    by_why: dict[str, list[str]] = {}
    for r, why in out.items():
        by_why.setdefault(why, []).append(r)
    return "; left out of the baseline: " + "; ".join(
        f"{', '.join(rs[:3])}{f' and {len(rs) - 3} more' if len(rs) > 3 else ''} ({why})" for why, rs in by_why.items())


def _n(items, word: str) -> str:
    return f"{len(items)} {word}{'s' if len(items) != 1 else ''}"


def _acc_dict(a) -> dict | None:
    if a is None:
        return None
    return {"acceptance_id": a.acceptance_id, "run_id": a.run_id, "metrics": a.metrics, "note": a.note,
            "accepted_by": a.accepted_by, "accepted_at": a.accepted_at}


def metric_dict(m: M.Metric, confidence: float) -> dict:
    t = m.test

    def side(s):
        return {"mean": s.mean, "spread": s.spread, "runs": len(s.means), "samples": len(s.samples),
                "per_run": s.runs}

    d = {"key": m.key, "kind": m.kind, "device": m.device, "name": m.name, "title": m.title, "unit": m.unit,
         "family": M.KINDS[m.kind].family, "gating": m.gating, "status": m.status, "reason": m.reason,
         "baseline": side(m.base), "candidate": side(m.cand),
         "delta": t.delta if t else None, "delta_pct": m.delta_pct, "noise": t.noise if t else None,
         "p_value": t.p if t else None, "q_value": t.q if t else None, "confidence": confidence,
         "method": t.method if t else None,
         "practical_minimum": m.practical, "impact_ns_per_step": m.impact_ns,
         "baseline_left_out": m.extra.get("left_out", {}),
         "baseline_from": _acc_dict(m.extra.get("baseline_from")),
         "accepted": _acc_dict(m.extra.get("accepted")), "straggler": bool(m.extra.get("straggler"))}
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
        "earlier_runs": [r.run_id for r in rep.earlier_runs],
        "findings": [m.key for m in rep.findings],
        "improvements": [m.key for m in rep.improvements],
        "not_gating": [m.key for m in rep.not_gating],
        "acceptances": [_acc_dict(a) for a in rep.acceptances],
        "metrics": [metric_dict(m, conf) for m in rep.metrics],
        "history": rep.history,
    }


def json_text(rep) -> str:
    return json.dumps(to_dict(rep), indent=2, default=str) + "\n"
