"""The report's metrics, from the canned queries, so `tracedb query` shows the same numbers.

  query           metric (per device unless said)                           samples
  gpu_busy_idle   device step time (`device_step_ns`), GPU busy time        per step
                  (`busy_ns`), GPU busy share (`busy_pct`)
  kernel_steps    GPU kernel time per step, time per step of each kernel,   per step
                  copy bytes per step (memcpy), new / vanished kernels
  peak_memory     peak live bytes (`peak_bytes`, replayed events) and the   per run
                  allocator's own peak (`reported_peak_bytes`), per device
                  and allocator
  step_times      host step time (`host_step_ns`; host side)                per step
  op_type_time    CPU op-type time per step (host side)                     per run

A run's steps are its numbered steps; what ran outside any step (warm-up, step NULL) is
left out. A run without steps counts as one step. Each rank's steps are samples of their own
(issue 11 #3): a run of two ranks with 3 steps each gives 6 samples per device, one per
(rank, step), never 3 steps with both ranks' work summed; the queries keep ranks apart,
and rank NULL (a single trace without rank information) is one rank. Within a side, a kernel that a run did
not launch in a step counts 0 there; a device, allocator or step data that a side lacks
entirely makes the metric "not comparable" instead.
"""

from __future__ import annotations

import fnmatch
import functools
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb

from tracedb import query, sqllib
from tracedb.report.stats import Settings, Side, Test

# Metric kinds, in the order findings of equal impact are listed.
DEVICE_STEP, KERNEL_TIME, KERNEL_SET, KERNEL, BUSY, BUSY_SHARE, COPY, PEAK, PEAK_REPORTED, HOST_STEP, OP_TYPE = (
    "device_step_time", "gpu_kernel_time", "kernel_set", "kernel", "gpu_busy_time", "gpu_busy_share",
    "copy_bytes", "peak_memory", "peak_memory_reported", "host_step_time", "cpu_op_type")
RANK_KERNEL_TIME = "rank_kernel_time"
# Model FLOPs utilization per step (the `mfu` query, issue 26): pct of the GPU's peak, worse
# when lower; one sample per (rank, step) of the run, device "all" (a step spans its GPUs).
MFU = "mfu"
MFU_DEVICE = "all"


@dataclass(frozen=True)
class Kind:
    """What the report knows of a metric kind. `family` decides its significance level:
    "headline" and "device" metrics (one per device) keep the confidence level; "many"
    (one per kernel, op type or rank: hundreds a report) are tested together at the
    false-discovery rate (Benjamini-Hochberg, evaluate.py). A new kind (MFU, say) is one
    entry here plus its samples in `collect`."""

    title: str
    family: str = "device"  # headline | device | many
    host: bool = False  # host-side: gates only with gate_host
    worse_when_lower: bool = False  # a busy share, an MFU: lower is worse
    gates: bool = True  # by default (settings `gating` overrides per kind)


KINDS: dict[str, Kind] = {
    DEVICE_STEP: Kind("device step time", "headline"),
    KERNEL_TIME: Kind("GPU kernel time per step", "headline"),
    KERNEL_SET: Kind("new/vanished kernels"),
    KERNEL: Kind("kernel time per step", "many"),
    BUSY: Kind("GPU busy time per step", gates=False),  # decides whether a step time change is the device's
    BUSY_SHARE: Kind("GPU busy share", worse_when_lower=True),
    COPY: Kind("copy bytes per step"),
    PEAK: Kind("peak memory (replayed)", "headline"),
    PEAK_REPORTED: Kind("peak memory (allocator)", "headline"),
    HOST_STEP: Kind("host step time", host=True),
    OP_TYPE: Kind("CPU op time per step", "many", host=True),
    RANK_KERNEL_TIME: Kind("compute kernel time per step of a rank", "many"),
    MFU: Kind("MFU per step", "headline", worse_when_lower=True),
}
TITLES = {k: v.title for k, v in KINDS.items()}
HOST_KINDS = tuple(k for k, v in KINDS.items() if v.host)


@dataclass
class Metric:
    kind: str  # one of the kinds above
    device: str  # GPU:0, or "host"
    name: str  # kernel / op type / allocator; "" for the device-wide metrics
    unit: str  # ns | bytes | pct
    base: Side = field(default_factory=Side)
    cand: Side = field(default_factory=Side)
    gating: bool = True
    test: Test | None = None
    status: str = "unchanged"  # regression | improvement | unchanged | not comparable | host-bound
    reason: str = ""  # why (for not comparable / host-bound), or the kernels behind a kernel set
    practical: float = 0.0  # the minimum practical effect it had to pass
    impact_ns: float = 0.0  # change of the step time it stands for, ns per step (ranking)
    extra: dict = field(default_factory=dict)  # new / vanished kernel names and times

    @property
    def key(self) -> str:
        return "/".join(x for x in (self.device, self.kind, self.name) if x)

    @property
    def title(self) -> str:
        return TITLES[self.kind]

    @property
    def label(self) -> str:
        """One line naming the metric: 'GPU:0 kernel time per step: <name>'."""
        return f"{self.device} {self.title}" + (f": {self.name}" if self.name else "")

    @property
    def baseline(self) -> float | None:
        return self.base.mean

    @property
    def candidate(self) -> float | None:
        return self.cand.mean

    @property
    def delta(self) -> float | None:
        return self.test.delta if self.test else None

    @property
    def delta_pct(self) -> float | None:
        if self.test is None or not self.baseline:
            return None
        return 100.0 * self.test.delta / abs(self.baseline)


@functools.lru_cache(maxsize=None)
def _prepared(name: str) -> tuple[sqllib.CannedQuery, tuple]:
    """A canned query and its bound defaults, checked once: binding parses the SQL
    (sqlglot, ~60 ms a query), which would otherwise be half the report's time."""
    cq = sqllib.load(name)
    return cq, tuple(sqllib.bind(cq, {"run_id": None}).items())


class _Rows:
    """Each query's rows of a run, from one query per metric query for all the report's
    runs (their files alone bound, `query.execute(runs=...)`), split by run: one query a
    run and query was 7 queries a run (84 for a 12-run fleet report), each binding its
    views anew. The queries keep runs apart (every row is one run's, its windows and
    aggregates partitioned by run), so a run's rows are the ones a query of that run alone
    returns, in its order; a query's `limit` (roofline's) applies to each run's rows."""

    def __init__(self, con: duckdb.DuckDBPyConnection, runs: list[str]):
        self.con, self.runs, self.fetched = con, sorted(set(runs)), {}

    def __call__(self, name: str, run_id: str) -> list[dict]:
        if name not in self.fetched:
            self.fetched[name] = self._fetch(name)
        return self.fetched[name].get(run_id, [])

    def _fetch(self, name: str) -> dict[str, list[dict]]:
        cq, defaults = _prepared(name)
        values = {**dict(defaults), "run_id": None}
        limit = values.get("limit") if cq.param("limit") else None
        if limit is not None:
            values["limit"] = (1 << 62)  # every run's rows: the limit applies to each run below
        by_run: dict[str, list[dict]] = defaultdict(list)
        for r in query.execute(self.con, cq, values, runs=self.runs).to_pylist():
            if limit is None or len(by_run[r["run_id"]]) < limit:
                by_run[r["run_id"]].append(r)
        return by_run


def _steps(rows: list[dict]) -> list[dict]:
    """Per rank, the numbered steps' rows, or the stepless row when the rank has no steps."""
    by_rank = defaultdict(list)
    for r in rows:
        by_rank[r["rank"]].append(r)
    out = []
    for rank_rows in by_rank.values():
        out += [r for r in rank_rows if r["step"] is not None] or rank_rows
    return out


class _Collector:
    """Samples per metric, side and run, gathered run by run."""

    def __init__(self):
        self.metrics: dict[tuple, Metric] = {}

    def add(self, side: str, run: str, kind: str, device: str, name: str, unit: str, values: list[float]):
        key = (device, kind, name)
        m = self.metrics.get(key)
        if m is None:
            m = self.metrics[key] = Metric(kind, device, name, unit)
        getattr(m, side).runs[run] = [float(v) for v in values]


def collect(con: duckdb.DuckDBPyConnection, sides: dict[str, list[str]], settings: Settings | None = None) -> list[Metric]:
    """Every metric's samples for the runs of both sides ({'base': [...], 'cand': [...]});
    kernels and op types that `settings.ignore` names (globs) are left out."""
    col = _Collector()
    ignore = tuple(settings.ignore) if settings else ()
    fetch = _Rows(con, [run for runs in sides.values() for run in runs])
    for side, runs in sides.items():
        for run in runs:
            _gpu(fetch, col, side, run, ignore)
            _memory(fetch, col, side, run)
            _host(fetch, col, side, run, ignore)
            _mfu(fetch, col, side, run)
    return list(col.metrics.values())


def ignored(name: str, patterns: tuple) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _communication(name: str) -> bool:
    """A collective's kernel: a rank waits for the others inside it."""
    return "nccl" in name.lower() or "rccl" in name.lower()


def _gpu(fetch: _Rows, col: _Collector, side: str, run: str, ignore: tuple = ()) -> None:
    by_device = defaultdict(list)
    for r in fetch("gpu_busy_idle", run):
        by_device[r["device"]].append(r)
    kernel_rows = defaultdict(list)
    for r in fetch("kernel_steps", run):
        kernel_rows[r["device"]].append(r)
    compute: dict = defaultdict(lambda: defaultdict(float))  # rank -> step -> kernel ns without collectives
    rank_steps: dict = defaultdict(dict)  # rank -> its steps, in order -> its (first) device
    for device, rows in by_device.items():
        rows = _steps(rows)
        steps = [(r["rank"], r["step"]) for r in rows]
        col.add(side, run, DEVICE_STEP, device, "", "ns",
                [r["device_step_ns"] if r["device_step_ns"] is not None else r["span_ns"] for r in rows])
        col.add(side, run, BUSY, device, "", "ns", [r["busy_ns"] for r in rows])
        col.add(side, run, BUSY_SHARE, device, "", "pct", [r["busy_pct"] or 0.0 for r in rows])
        at = {s: i for i, s in enumerate(steps)}
        total, copies = [0.0] * len(steps), [0.0] * len(steps)
        per_kernel: dict[str, list[float]] = {}
        launches = 0
        for r, st in steps:
            rank_steps[r].setdefault(st, device)
        for k in kernel_rows[device]:
            i = at.get((k["rank"], k["step"]))
            if i is None or ignored(k["name"], ignore):
                continue
            if k["kind"] == "kernel":
                total[i] += k["total_ns"]
                launches += k["instances"]
                per_kernel.setdefault(k["name"], [0.0] * len(steps))[i] += k["total_ns"]
                if not _communication(k["name"]):
                    compute[k["rank"]][k["step"]] += k["total_ns"]
            elif k["kind"] == "memcpy":
                copies[i] += k["total_bytes"] or 0
        col.add(side, run, KERNEL_TIME, device, "", "ns", total)
        col.add(side, run, COPY, device, "", "bytes", copies)
        for name, values in per_kernel.items():
            col.add(side, run, KERNEL, device, name, "ns", values)
        kt = col.metrics[(device, KERNEL_TIME, "")]
        kt.extra.setdefault("steps", {})[run] = len(steps)
        kt.extra.setdefault("launches", {})[run] = launches / max(len(steps), 1)
    ranks = sorted(r for r in rank_steps if r is not None)
    if len(ranks) >= 2:  # per rank: its compute kernels, so a straggler is not hidden by the others' waits
        for rank in ranks:
            order = list(rank_steps[rank])
            col.add(side, run, RANK_KERNEL_TIME, rank_steps[rank][order[0]], f"rank {rank}", "ns",
                    [compute[rank][st] for st in order])


def _mfu(fetch: _Rows, col: _Collector, side: str, run: str) -> None:
    """MFU per step (pct) where the run's FLOPs and its GPU's peak are known, and the run's
    roofline points (the `roofline` query's kernels) for the HTML chart."""
    rows = [r for r in _steps(fetch("mfu", run)) if r["mfu_pct"] is not None]
    if not rows:
        return
    col.add(side, run, MFU, MFU_DEVICE, "", "pct", [r["mfu_pct"] for r in rows])
    points = [r for r in fetch("roofline", run) if r["intensity_flop_per_byte"] and r["achieved_tflops"]]
    col.metrics[(MFU_DEVICE, MFU, "")].extra.setdefault("roofline", {}).setdefault(side, []).extend(points)


def _memory(fetch: _Rows, col: _Collector, side: str, run: str) -> None:
    for r in fetch("peak_memory", run):
        name = r["allocator"] or ""
        if r["peak_bytes"] is not None and (r["allocs"] or r["chunks"]):
            col.add(side, run, PEAK, r["device"], name, "bytes", [r["peak_bytes"]])
        if r["reported_peak_bytes"] is not None:
            col.add(side, run, PEAK_REPORTED, r["device"], name, "bytes", [r["reported_peak_bytes"]])


def _host(fetch: _Rows, col: _Collector, side: str, run: str, ignore: tuple = ()) -> None:
    steps = [r for r in fetch("step_times", run) if r["host_step_ns"] is not None]
    numbered = [r for r in steps if r["step"] is not None]
    if numbered:
        col.add(side, run, HOST_STEP, "host", "", "ns", [r["host_step_ns"] for r in numbered])
    n = len(numbered) or 1
    for r in fetch("op_type_time", run):
        if ignored(r["op_type"] or "(none)", ignore):
            continue
        col.add(side, run, OP_TYPE, "host", f"{r['op_type'] or '(none)'} ({r['device']})", "ns", [r["total_ns"] / n])


def fill_zeros(metrics: list[Metric]) -> None:
    """A kernel a run did not launch took 0 ns in each of that run's steps on that device
    (an op type, 0 ns in that run)."""
    steps = {}  # (device, side) -> run -> number of steps
    for m in metrics:
        if m.kind == KERNEL_TIME:
            for side in ("base", "cand"):
                steps[(m.device, side)] = {r: len(v) for r, v in getattr(m, side).runs.items()}
    op_runs = {side: {r for m in metrics if m.kind == OP_TYPE for r in getattr(m, side).runs}
               for side in ("base", "cand")}
    for m in metrics:
        if m.kind == OP_TYPE:  # an op type a run did not execute took 0 ns there
            for side in ("base", "cand"):
                for run in op_runs[side]:
                    getattr(m, side).runs.setdefault(run, [0.0])
        if m.kind != KERNEL:
            continue
        for side in ("base", "cand"):
            runs = getattr(m, side).runs
            for run, n in steps.get((m.device, side), {}).items():
                runs.setdefault(run, [0.0] * n)


def _side_runs(m: Metric, side: str, runs) -> dict[str, list[float]]:
    """A kernel's samples in these runs (its whole baseline, should its own regime have
    left some out: the kernel set follows the device's GPU kernel time)."""
    have = m.extra.get("full_base", m.base.runs) if side == "base" else m.cand.runs
    return {r: have[r] for r in runs if r in have}


def kernel_sets(metrics: list[Metric], settings: Settings) -> list[Metric]:
    """Per device, one metric for the kernels only one side launched: per step, the time of
    the candidate's new kernels (candidate) and of the vanished ones (baseline). The
    baseline is the GPU kernel time's (its regime, with a history)."""
    out = []
    totals = {m.device: m for m in metrics if m.kind == KERNEL_TIME}
    for device, total in totals.items():
        if not (total.base and total.cand):
            continue
        kernels = [m for m in metrics if m.kind == KERNEL and m.device == device]
        sides = {k.key: {side: _side_runs(k, side, getattr(total, side).runs) for side in ("base", "cand")}
                 for k in kernels}

        def launched(k, side):
            return any(x for v in sides[k.key][side].values() for x in v)

        new = [m for m in kernels if not launched(m, "base") and launched(m, "cand")]
        gone = [m for m in kernels if launched(m, "base") and not launched(m, "cand")]
        if not (new or gone):
            continue
        s = Metric(KERNEL_SET, device, "", "ns")
        for side, group in (("base", gone), ("cand", new)):
            for run, steps in getattr(total, side).runs.items():
                per_step = [sides[k.key][side].get(run) or [0.0] * len(steps) for k in group]
                getattr(s, side).runs[run] = [sum(col) for col in zip(*per_step)] if per_step else [0.0] * len(steps)
        for key, group, side in (("new", new, "cand"), ("vanished", gone, "base")):
            ref = getattr(total, side).mean or 1.0
            means = {k.key: Side(sides[k.key][side]).mean or 0.0 for k in group}
            listed = sorted(group, key=lambda m: -means[m.key])
            s.extra[key] = [{"name": m.name, "ns_per_step": means[m.key],
                             "share_pct": 100.0 * means[m.key] / ref} for m in listed]
            s.extra[key + "_listed"] = [k for k in s.extra[key] if k["share_pct"] >= settings.min_kernel_share]
        out.append(s)
    return out


def top_kernels(metrics: list[Metric], settings: Settings) -> set[str]:
    """Keys of the kernels that gate: per device, the largest ones (by the larger of the
    two sides' time) that make up `top_share` % of the GPU kernel time, at most `top`."""
    keys = set()
    by_device = defaultdict(list)
    for m in metrics:
        if m.kind == KERNEL and any(m.base.samples) and any(m.cand.samples):
            by_device[m.device].append(m)
    for device, kernels in by_device.items():
        kernels.sort(key=lambda m: -max(m.base.mean or 0, m.cand.mean or 0))
        total = sum(max(m.base.mean or 0, m.cand.mean or 0) for m in kernels) or 1.0
        acc = 0.0
        for m in kernels[: settings.top]:
            if acc >= settings.top_share / 100 * total:
                break
            keys.add(m.key)
            acc += max(m.base.mean or 0, m.cand.mean or 0)
    return keys
