"""Verdicts: which metric regressed, which gate, and in what order findings are told.

A metric regresses when its change is significant (stats.compare at the confidence level)
AND at least the minimum practical effect AND in the worse direction (more time, more
bytes, a lower busy share). The practical minimum of a time is relative to the device
step time (a kernel going from 10 to 20 µs in an 8.6 ms step is 0.1% of the step:
not practical), so the effects of different metrics rank on one scale: ns per step.

Host-bound changes. When the device step time grows but the GPU busy time in the step
does not grow with it (less than half of the growth), the GPU was waiting for the host:
the change is host-side, like CPU op times, and gates only with `gate_host`. On
`tests/data/fleet_dev` the host step time of the same program varies from 6.2 to 9.6 ms
between processes and the GPU busy time by 0.2%; `mem512` shows a device step time of
11.1 ms against 8.6-9.1 ms with busy time unchanged (GPU idle 2.6 ms a step): host
jitter under the profiler, not the memory change. A lower busy share is the same thing
seen from the other side and is host-bound too. Host-side changes beyond their noise that
do not gate are still named in the headline ("not gating: ...").

Many tests at once. A report tests every kernel that makes up most of the GPU time, every
CPU op type and every rank (100-300 metrics): at 99% each, a few would pass by chance on
a quiet night. Those metrics ("many" in metrics.KINDS) are tested together with
Benjamini-Hochberg (`scipy.stats.false_discovery_control`) at `Settings.fdr`; the few
headline and device metrics keep the confidence level each.

The baseline rule with a history (`regime_baseline`; docs/report.md states it):
per metric, the baseline starts at the latest live acceptance that covers it (else at the
window's first run); from there it is the runs up to the first change point E-Divisive
finds (changepoint.py, over the baseline and candidate runs), without one-night blips and
without any run that, tested against the runs kept before it with this module's rule,
changed. So a change nobody accepted stays out of the baseline and fails every night
it persists; `tracedb accept` moves the start to it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy import stats as sps

from tracedb.report import metrics as M
from tracedb.report.changepoint import detect
from tracedb.report.stats import Settings, Side, compare


def practical_minimum(m: M.Metric, ref_ns: dict[str, float], settings: Settings) -> float:
    own = settings.min_effect.get(m.kind)
    if m.unit == "bytes":
        share = settings.min_memory_pct if own is None else own
        return max(share / 100 * abs(m.baseline or 0), settings.min_bytes)
    share = settings.min_effect_pct if own is None else own
    if m.unit == "pct":
        return share  # percentage points of the step
    ref = ref_ns.get(m.device) or abs(m.baseline or 0)
    return max(share / 100 * ref, settings.min_effect_ns)


def _missing(m: M.Metric) -> str | None:
    if m.base and m.cand:
        return None
    what = {"ns": "time", "bytes": "memory events", "pct": "GPU activity"}[m.unit]
    if m.kind in (M.HOST_STEP,):
        what = "steps with host ops"
    has, lacks = ("baseline", "candidate") if m.base else ("candidate", "baseline")
    if not (m.base or m.cand):
        return f"not comparable: neither side has {what} for {m.label}"
    return f"not comparable: only the {has} has {what} for {m.label} (none in the {lacks} runs)"


def reference_ns(metrics: list[M.Metric]) -> dict[str, float]:
    """Per device (and "host"), the baseline step time practical minimums are relative to."""
    ref_ns = {m.device: m.base.mean for m in metrics if m.kind == M.DEVICE_STEP and m.base}
    host_ref = next((m.base.mean for m in metrics if m.kind == M.HOST_STEP and m.base), None)
    if host_ref:
        ref_ns["host"] = host_ref
    return ref_ns


def evaluate(metrics: list[M.Metric], settings: Settings) -> None:
    """Test every metric and set its status, gating and impact."""
    ref_ns = reference_ns(metrics)
    gating_kernels = M.top_kernels(metrics, settings)
    tested = []
    for m in metrics:
        missing = _missing(m)
        m.gating = _gates(m, gating_kernels, settings)
        if missing:
            m.status, m.reason = "not comparable", missing
            continue
        m.test = compare(m.base, m.cand, settings.confidence, settings.test)
        m.practical = practical_minimum(m, ref_ns, settings)
        tested.append(m)
    fdr_adjust(tested)
    for m in tested:
        kind = M.KINDS[m.kind]
        worse = -1 if kind.worse_when_lower else 1
        if significant(m, settings) and abs(m.test.delta) >= m.practical:
            m.status = "regression" if m.test.delta * worse > 0 else "improvement"
        if m.unit == "ns":
            m.impact_ns = m.test.delta
        elif m.unit == "pct" and m.device in ref_ns:
            m.impact_ns = -m.test.delta / 100 * ref_ns[m.device]
        acc = m.extra.get("accepted")
        if acc is not None and m.status in ("regression", "improvement"):
            m.status, m.reason = "accepted", acc.text()
    _host_bound(metrics, settings)
    _stragglers(metrics)


def fdr_adjust(metrics: list[M.Metric]) -> None:
    """Benjamini-Hochberg adjusted p-values (`Test.q`) over the "many" family: every
    per-kernel, per-op and per-rank metric with a p-value, gating or not."""
    family = [m for m in metrics if M.KINDS[m.kind].family == "many" and m.test and m.test.p is not None]
    if not family:
        return
    qs = sps.false_discovery_control(np.array([m.test.p for m in family]), method="bh")
    for m, q in zip(family, qs):
        m.test.q = float(q)


def significant(m: M.Metric, settings: Settings) -> bool:
    """Beyond the noise: q < fdr in the "many" family, else p < 1 - confidence."""
    if m.test.q is not None:
        return m.test.delta != 0 and m.test.q < settings.fdr
    return m.test.significant(settings.confidence)


def _gates(m: M.Metric, gating_kernels: set[str], settings: Settings) -> bool:
    kind = M.KINDS[m.kind]
    if m.kind in settings.gating:
        gates = settings.gating[m.kind]
        return gates and (m.kind != M.KERNEL or m.key in gating_kernels)
    if kind.host:
        return settings.gate_host
    if m.kind == M.KERNEL:
        return m.key in gating_kernels
    return kind.gates


def _host_bound(metrics: list[M.Metric], settings: Settings) -> None:
    """A device step time (or busy share) change that the GPU busy time does not follow
    (less than half of it, either way) is the host's: `host-bound`, gating only with
    gate_host. Shorter steps with the same GPU work are a host-side improvement alike."""
    busy = {m.device: m for m in metrics if m.kind == M.BUSY}
    for m in metrics:
        if not ((m.status == "regression" and m.kind in (M.DEVICE_STEP, M.BUSY_SHARE))
                or (m.status == "improvement" and m.kind == M.DEVICE_STEP)):
            continue
        b = busy.get(m.device)
        grew = b.test.delta if b is not None and b.test is not None else 0.0
        step = m.test.delta if m.kind == M.DEVICE_STEP else m.impact_ns
        if (grew < step / 2) if step > 0 else (grew > step / 2):
            what = "waited for the host" if step > 0 else "waited less for the host"
            m.reason = (f"GPU busy time per step {_signed_ns(grew)} of {_signed_ns(step)}: "
                        f"the GPU {what} (host-side; gates with --gate-host)")
            m.impact_ns = grew
            if not settings.gate_host:
                m.status = "host-bound"
    # MFU divides by the device step time: when that grew only because the GPU waited for the
    # host (and no device's step time regressed otherwise), a lower MFU is the host's too.
    steps = [m for m in metrics if m.kind == M.DEVICE_STEP]
    for m in metrics:
        if m.kind == M.MFU and m.status == "regression" and any(s.status == "host-bound" for s in steps) \
                and not any(s.status == "regression" for s in steps):
            m.reason = "the device step time grew while the GPU waited for the host (host-side; gates with --gate-host)"
            if not settings.gate_host:
                m.status = "host-bound"


def _stragglers(metrics: list[M.Metric]) -> None:
    """A rank whose compute kernel time regressed while the job's other ranks did not
    (more than twice any other rank's change) is a straggler: said in its reason."""
    by_job = defaultdict(list)
    for m in metrics:
        if m.kind == M.RANK_KERNEL_TIME and m.test is not None:
            by_job["job"].append(m)
    for ranks in by_job.values():
        for m in ranks:
            others = [o for o in ranks if o is not m]
            if m.status == "regression" and others and all(
                    o.status != "regression" and 2 * abs(o.test.delta) < m.test.delta for o in others):
                worst = max(others, key=lambda o: abs(o.delta_pct or 0))
                m.extra["straggler"] = True
                m.reason = f"straggler: the other {len(others)} rank(s) moved at most {worst.delta_pct:+.2f}%"


def _signed_ns(v: float) -> str:
    from tracedb.report.render import fmt

    return fmt(v, "ns", signed=True)


def findings(metrics: list[M.Metric]) -> list[M.Metric]:
    """Gating regressions, largest impact on the step first. Times before sizes; a total
    (device step time, GPU kernel time) leads the parts it contains when it carries at
    least 2/3 of the largest part's impact: it is the sentence the parts explain. A
    straggler rank leads what it explains too."""
    regs = [m for m in metrics if m.status == "regression" and m.gating]
    times = sorted((m for m in regs if m.unit != "bytes"), key=lambda m: (-m.impact_ns, _order(m)))
    sizes = sorted((m for m in regs if m.unit == "bytes"), key=lambda m: (-(m.delta_pct or 0), _order(m)))
    if times:
        totals = [m for m in times if m.kind in (M.DEVICE_STEP, M.KERNEL_TIME)]
        if totals and totals[0] is not times[0] and totals[0].impact_ns >= 2 / 3 * times[0].impact_ns:
            times.remove(totals[0])
            times.insert(0, totals[0])
        stragglers = [m for m in times if m.extra.get("straggler")]
        for m in reversed(stragglers):
            times.remove(m)
            times.insert(0, m)
    return times + sizes


def improvements(metrics: list[M.Metric]) -> list[M.Metric]:
    """Gating improvements, largest first (ns per step; then sizes). A higher busy share
    is not one to headline: it rises as much with more GPU work as with less waiting."""
    imp = [m for m in metrics if m.status == "improvement" and m.gating and m.kind != M.BUSY_SHARE]
    return sorted(imp, key=lambda m: (m.unit == "bytes", m.impact_ns if m.unit != "bytes" else (m.delta_pct or 0),
                                      _order(m)))


def not_gating(metrics: list[M.Metric]) -> list[M.Metric]:
    """Step-level host-side changes beyond their noise that do not gate: the host-bound
    device step time and busy share, the host step time; largest first. (CPU op times are
    too many and too noisy for a headline: they are in the host-side table.)"""
    out = [m for m in metrics if m.test is not None and (m.status == "host-bound" or (
        not m.gating and m.kind == M.HOST_STEP and m.status in ("regression", "improvement")))]
    return sorted(out, key=lambda m: -abs(m.delta_pct if m.unit != "pct" else m.test.delta))


def _order(m: M.Metric) -> tuple:
    kinds = list(M.KINDS)
    return (kinds.index(m.kind), m.device, m.name)


def regime_baseline(metrics: list[M.Metric], order: list[str], n_candidates: int, accepted: list[tuple],
                    settings: Settings, keep: int | None = None, window: int | None = None) -> None:
    """The baseline rule with a history (module doc; docs/report.md "The baseline rule").

    `order`: baseline then candidate run ids, oldest first; `accepted`: (Acceptance,
    position) for the live acceptances, position the index of its run in `order`, or -1
    when that run is older than the window. Each metric's left-out runs and why are kept
    in `extra["left_out"]`, its whole baseline in `extra["full_base"]`; an acceptance at a
    candidate run goes to `extra["accepted"]` (the change is then `accepted`, not a finding).
    `keep`: the baseline is at most the `keep` newest runs of the regime; `window`: of the
    baseline runs, the newest `window` are the --history N (older ones were looked at for
    the regime only, and are not named when left out)."""
    pos = {r: i for i, r in enumerate(order)}
    first_cand = len(order) - n_candidates
    ref_ns = reference_ns(metrics)
    for m in metrics:
        if m.kind == M.KERNEL_SET or not m.base:
            continue
        mine = [(a, p) for a, p in accepted if a.covers(m.key, m.kind)]
        at_cand = [a for a, p in mine if p >= first_cand]
        if at_cand:
            m.extra["accepted"] = at_cand[-1]
        before = [(a, p) for a, p in mine if p < first_cand]
        acc, start = max(before, key=lambda ap: ap[1]) if before else (None, -1)
        if acc is not None:
            m.extra["baseline_from"] = acc
        runs = [r for r in order[:first_cand] if m.base.runs.get(r)]
        why = {r: f"before the change accepted at {acc.run_id}" for r in runs if pos[r] < start}
        series = [r for r in runs if pos[r] >= start]
        cands = [r for r in order[first_cand:] if m.cand.runs.get(r)]
        if series:
            why.update(_regime(m, series, cands, ref_ns, settings))
        kept = [r for r in runs if r not in why]
        if keep is not None and len(kept) > keep:
            kept = kept[-keep:]
        shown = set(order[first_cand - window:first_cand]) if window is not None else set(runs)
        if kept and len(kept) < len(runs):
            m.extra["full_base"] = dict(m.base.runs)
            m.extra["left_out"] = {r: why[r] for r in runs if r in why and r in shown}
            m.base.runs = {r: m.base.runs[r] for r in kept}


def mark_accepted(metrics: list[M.Metric], order: list[str], n_candidates: int, accepted: list[tuple]) -> None:
    """Without a history: an acceptance at a candidate run still makes its change accepted."""
    first_cand = len(order) - n_candidates
    for m in metrics:
        mine = [a for a, p in accepted if p >= first_cand and a.covers(m.key, m.kind)]
        if mine:
            m.extra["accepted"] = mine[-1]


def _mean(v: list[float]) -> float:
    return sum(v) / len(v)


def _regime(m: M.Metric, series: list[str], cands: list[str], ref_ns: dict, settings: Settings) -> dict[str, str]:
    """Of the baseline runs from the regime's start: which to leave out, and why."""
    values = [_mean(m.base.runs[r]) for r in series] + [_mean(m.cand.runs[r]) for r in cands]
    why = {}
    found = detect(values) if len(values) >= 3 else None
    if found is not None:
        for i in found.blips:
            if i < len(series):
                why[series[i]] = "blip"
        if found.change_points and found.change_points[0] < len(series):
            cp = found.change_points[0]
            for r in series[cp:]:
                why.setdefault(r, f"a change at {series[cp]} that nobody accepted")
    rest = [r for r in series if r not in why]
    if not rest:
        return why
    # The first run of the reference: of the first three, the one nearest their median.
    head = rest[:3]
    med = float(np.median([_mean(m.base.runs[r]) for r in head]))
    ref = [min(head, key=lambda r: abs(_mean(m.base.runs[r]) - med))]
    worse = -1 if M.KINDS[m.kind].worse_when_lower else 1
    for r in rest:
        if r in ref:
            continue
        probe = M.Metric(m.kind, m.device, m.name, m.unit, base=Side({x: m.base.runs[x] for x in ref}),
                         cand=Side({r: m.base.runs[r]}))
        t = compare(probe.base, probe.cand, settings.confidence)
        if t.significant(settings.confidence) and abs(t.delta) >= practical_minimum(probe, ref_ns, settings):
            word = "worse" if t.delta * worse > 0 else "better"
            why[r] = f"changed ({word}) against the runs before it, not accepted"
        else:
            ref.append(r)
    return why


def history(metrics: list[M.Metric], order: list[str]) -> dict[str, dict]:
    """Per gating metric: the per-run series over baseline then candidate runs, and where
    it moved (change points) or blipped, by run id."""
    out = {}
    for m in metrics:
        if not m.gating or m.status == "not comparable" or m.kind == M.KERNEL_SET:
            continue
        runs = {**m.extra.get("full_base", m.base.runs), **m.cand.runs}
        series = [(r, sum(runs[r]) / len(runs[r])) for r in order if runs.get(r)]
        if len(series) < 3:
            continue
        found = detect([v for _, v in series])
        out[m.key] = {
            "runs": [r for r, _ in series], "values": [v for _, v in series],
            "change_points": [{"run_id": series[i][0], "index": i, "shift_pct": 100 * found.shifts[i],
                               "p_value": found.p_values[i]} for i in found.change_points],
            "blips": [{"run_id": series[i][0], "index": i} for i in found.blips],
        }
    return out
