"""The statistical rule: is a candidate's metric beyond the baseline's noise?

A metric has samples per run: one per profiled step (kernel time, device step time, ...)
or one per run (peak memory). The compared figure is the mean of the per-run means on
each side, and its noise is measured two ways, keeping the larger standard error:

  * across runs (when the baseline has 2+ runs): the spread of the per-run means, pooled
    over both sides, is the run-to-run noise; the difference of the side means has
    se = s * sqrt(1/n_baseline + 1/n_candidate), with the pooled degrees of freedom.
    For one candidate run this is the textbook prediction interval for a new run.
  * within runs (when each side has 2+ step samples): Welch's t-test on the step samples
    (`scipy.stats.ttest_ind(equal_var=False)`), the only noise a single baseline run shows.

Measured on `tests/data/fleet_dev` (one CNN, H200, 5 steps a run, 4 separate processes):
GPU kernel time per step varies 0.05% between steps of a run but 0.17% between runs, so
the within-run spread alone would call every day-vs-day pair a change; that is why a
change must also pass a minimum practical effect (stats.Settings), and why across-run
noise wins whenever the baseline has several runs.

The rule: a change is significant when the two-sided p-value of t = delta / se (Student's
t, `scipy.stats.t`) is below 1 - confidence, i.e. the confidence interval of the delta
excludes 0; the reported noise band is that interval's half-width. With no spread at all
(one sample a side) nothing is known about noise: the practical minimum alone decides,
and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special, stats


TESTS = ("t", "mann-whitney")


@dataclass
class Settings:
    """The knobs, with the defaults a nightly job starts from (also read from a file:
    tracedb.report.config)."""

    confidence: float = 0.99  # two-sided, for the delta's confidence interval (headline and device metrics)
    fdr: float = 0.01  # per-kernel, per-op and per-rank metrics: Benjamini-Hochberg false-discovery rate
    test: str = "t"  # t | mann-whitney (on the per-step samples, as benchstat)
    min_effect_pct: float = 0.5  # times: change of at least this % of the device step time
    min_effect_ns: int = 5_000  # ... and at least this many ns per step
    min_memory_pct: float = 1.0  # sizes (peak memory, copy bytes): at least this % of the baseline
    min_bytes: int = 16 << 20  # ... and at least this many bytes
    min_kernel_share: float = 0.1  # new/vanished kernels listed above this % of GPU kernel time
    top_share: float = 90.0  # gating kernels: the largest ones that make up this % of GPU kernel time
    top: int = 20  # ... at most this many per device
    gate_host: bool = False  # CPU op times, host step time and GPU idle (host-bound) gate too
    lookback: int = 30  # with --history N: runs before those N searched for the baseline's regime
    min_effect: dict = field(default_factory=dict)  # metric kind -> its own minimum effect, % (points for shares)
    gating: dict = field(default_factory=dict)  # metric kind -> gates (True) or is only shown (False)
    ignore: list = field(default_factory=list)  # glob patterns of kernel / op-type names left out
    source: str = ""  # the settings file these came from ("" : defaults and options)

    def check(self) -> None:
        from tracedb.errors import TracedbError

        def name(key):  # as the user wrote it: a file's key, or the command's option
            return f"{self.source}: {key}" if self.source else "--" + key.replace("_", "-")

        if not 0.5 <= self.confidence < 1:
            raise TracedbError(f"{name('confidence')} must be in [0.5, 1), e.g. 0.99")
        if not 0 < self.fdr < 1:
            raise TracedbError(f"{name('fdr')} must be in (0, 1), e.g. 0.01")
        if self.test not in TESTS:
            raise TracedbError(f"{name('test')} must be one of {', '.join(TESTS)}, not {self.test!r}")
        for key in ("min_effect_pct", "min_effect_ns", "min_memory_pct", "min_bytes", "min_kernel_share"):
            if getattr(self, key) < 0:
                raise TracedbError(f"{name(key)} must be >= 0")
        for kind, v in self.min_effect.items():
            if v < 0:
                raise TracedbError(f"{name('min_effect')}.{kind} must be >= 0")
        if self.lookback < 0:
            raise TracedbError(f"{name('lookback')} must be >= 0")
        if self.top < 1:
            raise TracedbError(f"{name('top')} must be >= 1")
        if not 0 < self.top_share <= 100:
            raise TracedbError(f"{name('top_share')} must be in (0, 100]")


@dataclass
class Side:
    """One side's samples of a metric: run id -> per-step (or per-run) values."""

    runs: dict[str, list[float]] = field(default_factory=dict)

    @property
    def means(self) -> list[float]:
        return [math.fsum(v) / len(v) for v in self.runs.values() if v]

    @property
    def samples(self) -> list[float]:
        return [x for v in self.runs.values() for x in v]

    @property
    def mean(self) -> float | None:
        m = self.means
        return math.fsum(m) / len(m) if m else None

    @property
    def spread(self) -> float | None:
        """Standard deviation of the per-run means (else of the samples), None with one value."""
        m = self.means
        if len(m) >= 2:
            return float(np.std(m, ddof=1))
        s = self.samples
        return float(np.std(s, ddof=1)) if len(s) >= 2 else None

    def __bool__(self) -> bool:
        return any(self.runs.values())


@dataclass
class Test:
    """The outcome of comparing two sides."""

    delta: float
    se: float | None  # standard error of the delta; None: no spread measured
    df: float | None
    p: float | None  # two-sided p-value; None when no spread was measured
    noise: float | None  # half-width of the confidence interval of the delta
    method: str  # "across runs", "within runs (steps)", "Mann-Whitney U (steps)", "no spread", "identical"
    q: float | None = None  # Benjamini-Hochberg adjusted p-value (per-kernel/op/rank metrics; evaluate.fdr_adjust)

    def significant(self, confidence: float) -> bool:
        if self.delta == 0:
            return False
        return self.p is None or self.p < 1 - confidence


def t_p(t: float, df: float) -> float:
    """Two-sided p-value of Student's t: `scipy.special.stdtr`, the CDF `scipy.stats.t.sf`
    computes, without the distribution object's ~1 ms of argument checking a call."""
    return float(2 * special.stdtr(df, -abs(t)))


def t_quantile(confidence: float, df: float) -> float:
    """Half-width factor of the two-sided interval (`scipy.stats.t.ppf`, through stdtrit)."""
    return float(special.stdtrit(df, 1 - (1 - confidence) / 2))


def _var(xs: list[float]) -> float:
    """Sample variance (ddof 1) in plain Python: for the few dozen values of a metric,
    ~10x faster than numpy's call overhead."""
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) * (x - m) for x in xs) / (len(xs) - 1)


def _welch(bs: list[float], cs: list[float]) -> tuple[float, float]:
    """Welch's standard error and Welch-Satterthwaite degrees of freedom (what
    `scipy.stats.ttest_ind(equal_var=False)` uses, without its overhead: the report runs
    thousands of these)."""
    vb, vc = _var(bs) / len(bs), _var(cs) / len(cs)
    se2 = vb + vc
    den = (vb * vb / (len(bs) - 1) if vb else 0.0) + (vc * vc / (len(cs) - 1) if vc else 0.0)
    return math.sqrt(se2), (se2 * se2 / den if den else float(len(bs) + len(cs) - 2))


def compare(base: Side, cand: Side, confidence: float, test: str = "t") -> Test:
    """Candidate mean - baseline mean, with its noise (see the module doc). test
    "mann-whitney": the p-value is Mann-Whitney U's on the per-step samples (two-sided,
    `scipy.stats.mannwhitneyu`); the noise band stays the t rule's."""
    bm, cm = base.means, cand.means
    delta = math.fsum(cm) / len(cm) - math.fsum(bm) / len(bm)
    options = []  # (se, df, method)
    if len(bm) >= 2:
        ss = _var(bm) * (len(bm) - 1)
        df = len(bm) - 1
        if len(cm) >= 2:
            ss += _var(cm) * (len(cm) - 1)
            df += len(cm) - 1
        options.append((math.sqrt(ss / df * (1 / len(bm) + 1 / len(cm))), df, "across runs"))
    bs, cs = base.samples, cand.samples
    if len(bs) >= 2 and len(cs) >= 2 and (max(bs) > min(bs) or max(cs) > min(cs)):
        options.append((*_welch(bs, cs), "within runs (steps)"))
    if not options:
        if len(bs) >= 2 and len(cs) >= 2:  # every sample equal on both sides
            return Test(delta, 0.0, None, 0.0 if delta else 1.0, 0.0, "identical")
        return Test(delta, None, None, None, None, "no spread")
    se, df, method = max(options, key=lambda o: o[0])
    if se == 0:
        return Test(delta, 0.0, df, 0.0 if delta else 1.0, 0.0, method)
    t = delta / se
    p, noise = t_p(t, df), t_quantile(confidence, df) * se
    if test == "mann-whitney" and len(bs) >= 2 and len(cs) >= 2:
        p = float(stats.mannwhitneyu(cs, bs, alternative="two-sided").pvalue)
        method = "Mann-Whitney U (steps)"
    return Test(delta, se, df, p, noise, method)
