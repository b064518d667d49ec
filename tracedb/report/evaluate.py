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
seen from the other side and is host-bound too.
"""

from __future__ import annotations

from tracedb.report import metrics as M
from tracedb.report.changepoint import detect
from tracedb.report.stats import Settings, compare

WORSE_WHEN_LOWER = {M.BUSY_SHARE, M.MFU}


def practical_minimum(m: M.Metric, ref_ns: dict[str, float], settings: Settings) -> float:
    if m.unit == "bytes":
        return max(settings.min_memory_pct / 100 * abs(m.baseline or 0), settings.min_bytes)
    if m.unit == "pct":
        return settings.min_effect_pct  # percentage points of the step
    ref = ref_ns.get(m.device) or abs(m.baseline or 0)
    return max(settings.min_effect_pct / 100 * ref, settings.min_effect_ns)


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


def evaluate(metrics: list[M.Metric], settings: Settings) -> None:
    """Test every metric and set its status, gating and impact."""
    ref_ns = {m.device: m.base.mean for m in metrics if m.kind == M.DEVICE_STEP and m.base}
    host_ref = next((m.base.mean for m in metrics if m.kind == M.HOST_STEP and m.base), None)
    if host_ref:
        ref_ns["host"] = host_ref
    gating_kernels = M.top_kernels(metrics, settings)
    for m in metrics:
        missing = _missing(m)
        m.gating = _gates(m, gating_kernels, settings)
        if missing:
            m.status, m.reason = "not comparable", missing
            continue
        m.test = compare(m.base, m.cand, settings.confidence)
        m.practical = practical_minimum(m, ref_ns, settings)
        worse = -1 if m.kind in WORSE_WHEN_LOWER else 1
        if m.test.significant(settings.confidence) and abs(m.test.delta) >= m.practical:
            m.status = "regression" if m.test.delta * worse > 0 else "improvement"
        if m.unit == "ns":
            m.impact_ns = m.test.delta
        elif m.unit == "pct" and m.device in ref_ns:
            m.impact_ns = -m.test.delta / 100 * ref_ns[m.device]
    _host_bound(metrics, settings)


def _gates(m: M.Metric, gating_kernels: set[str], settings: Settings) -> bool:
    if m.kind in M.HOST_KINDS:
        return settings.gate_host
    if m.kind == M.BUSY:
        return False  # shown; it decides whether a device step time change is the device's
    if m.kind == M.KERNEL:
        return m.key in gating_kernels
    return True


def _host_bound(metrics: list[M.Metric], settings: Settings) -> None:
    busy = {m.device: m for m in metrics if m.kind == M.BUSY}
    for m in metrics:
        if m.status != "regression" or m.kind not in (M.DEVICE_STEP, M.BUSY_SHARE):
            continue
        b = busy.get(m.device)
        grew = b.test.delta if b is not None and b.test is not None else 0.0
        step = m.test.delta if m.kind == M.DEVICE_STEP else m.impact_ns
        if grew < step / 2:
            m.reason = (f"GPU busy time per step {_signed_ns(grew)} of {_signed_ns(step)}: "
                        "the GPU waited for the host (host-side; gates with --gate-host)")
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


def _signed_ns(v: float) -> str:
    from tracedb.report.render import fmt

    return fmt(v, "ns", signed=True)


def findings(metrics: list[M.Metric]) -> list[M.Metric]:
    """Gating regressions, largest impact on the step first. Times before sizes; a total
    (device step time, GPU kernel time) leads the parts it contains when it carries at
    least 2/3 of the largest part's impact: it is the sentence the parts explain."""
    regs = [m for m in metrics if m.status == "regression" and m.gating]
    times = sorted((m for m in regs if m.unit != "bytes"), key=lambda m: (-m.impact_ns, _order(m)))
    sizes = sorted((m for m in regs if m.unit == "bytes"), key=lambda m: (-(m.delta_pct or 0), _order(m)))
    if times:
        totals = [m for m in times if m.kind in (M.DEVICE_STEP, M.KERNEL_TIME)]
        if totals and totals[0] is not times[0] and totals[0].impact_ns >= 2 / 3 * times[0].impact_ns:
            times.remove(totals[0])
            times.insert(0, totals[0])
    return times + sizes


def _order(m: M.Metric) -> tuple:
    kinds = [M.DEVICE_STEP, M.KERNEL_TIME, M.KERNEL_SET, M.KERNEL, M.COPY, M.PEAK_REPORTED, M.PEAK,
             M.BUSY_SHARE, M.BUSY, M.HOST_STEP, M.OP_TYPE, M.MFU]
    return (kinds.index(m.kind), m.device, m.name)


def trim_baseline(metrics: list[M.Metric], order: list[str]) -> None:
    """With a history, each metric's baseline is its current regime: runs before its last
    change point and one-night blips (changepoint.detect over the baseline runs) are left
    out, when 2+ runs remain. Otherwise one odd night among the baseline runs would widen
    the noise enough to hide the next real change (a 2x blip hid a +20% step in the
    12-night test). What was left out is kept in `extra` and shown."""
    for m in metrics:
        if m.kind == M.KERNEL_SET or not m.base:
            continue
        runs = [r for r in order if m.base.runs.get(r)]
        if len(runs) < 3:
            continue
        found = detect([sum(m.base.runs[r]) / len(m.base.runs[r]) for r in runs])
        keep = runs
        if found.change_points and len(runs) - found.change_points[-1] >= 2:
            keep = runs[found.change_points[-1]:]
        blips = {runs[i] for i in found.blips}
        keep = [r for r in keep if r not in blips]
        if 2 <= len(keep) < len(runs):
            m.extra["full_base"] = dict(m.base.runs)
            m.extra["left_out"] = {r: "blip" if r in blips else "before a change point" for r in runs if r not in keep}
            m.base.runs = {r: m.base.runs[r] for r in keep}


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
