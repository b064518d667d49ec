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
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats


@dataclass
class Settings:
    """The knobs, with the defaults a nightly job starts from."""

    confidence: float = 0.99  # two-sided, for the delta's confidence interval
    min_effect_pct: float = 0.5  # times: change of at least this % of the device step time
    min_effect_ns: int = 5_000  # ... and at least this many ns per step
    min_memory_pct: float = 1.0  # sizes (peak memory, copy bytes): at least this % of the baseline
    min_bytes: int = 16 << 20  # ... and at least this many bytes
    min_kernel_share: float = 0.1  # new/vanished kernels listed above this % of GPU kernel time
    top_share: float = 90.0  # gating kernels: the largest ones that make up this % of GPU kernel time
    top: int = 20  # ... at most this many per device
    gate_host: bool = False  # CPU op times, host step time and GPU idle (host-bound) gate too

    def check(self) -> None:
        from tracedb.errors import TracedbError

        if not 0.5 <= self.confidence < 1:
            raise TracedbError("--confidence must be in [0.5, 1), e.g. 0.99")
        if min(self.min_effect_pct, self.min_effect_ns, self.min_memory_pct, self.min_bytes,
               self.min_kernel_share) < 0 or self.top < 1 or not 0 < self.top_share <= 100:
            raise TracedbError("thresholds must be >= 0, --top >= 1 and --top-share in (0, 100]")


@dataclass
class Side:
    """One side's samples of a metric: run id -> per-step (or per-run) values."""

    runs: dict[str, list[float]] = field(default_factory=dict)

    @property
    def means(self) -> list[float]:
        return [float(np.mean(v)) for v in self.runs.values() if v]

    @property
    def samples(self) -> list[float]:
        return [x for v in self.runs.values() for x in v]

    @property
    def mean(self) -> float | None:
        m = self.means
        return float(np.mean(m)) if m else None

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
    method: str  # "across runs", "within runs (steps)", "no spread", "identical"

    def significant(self, confidence: float) -> bool:
        if self.delta == 0:
            return False
        return self.p is None or self.p < 1 - confidence


def compare(base: Side, cand: Side, confidence: float) -> Test:
    """Candidate mean - baseline mean, with its noise (see the module doc)."""
    bm, cm = base.means, cand.means
    delta = float(np.mean(cm) - np.mean(bm))
    options = []  # (se, df, method)
    if len(bm) >= 2:
        ss = float(np.var(bm, ddof=1)) * (len(bm) - 1)
        df = len(bm) - 1
        if len(cm) >= 2:
            ss += float(np.var(cm, ddof=1)) * (len(cm) - 1)
            df += len(cm) - 1
        options.append((math.sqrt(ss / df * (1 / len(bm) + 1 / len(cm))), df, "across runs"))
    bs, cs = base.samples, cand.samples
    if len(bs) >= 2 and len(cs) >= 2 and (np.ptp(bs) > 0 or np.ptp(cs) > 0):
        se = math.sqrt(np.var(bs, ddof=1) / len(bs) + np.var(cs, ddof=1) / len(cs))
        with warnings.catch_warnings():  # near-identical samples: scipy warns, the se above is exact
            warnings.simplefilter("ignore", RuntimeWarning)
            res = stats.ttest_ind(cs, bs, equal_var=False)
        options.append((se, float(res.df), "within runs (steps)"))
    if not options:
        if len(bs) >= 2 and len(cs) >= 2:  # every sample equal on both sides
            return Test(delta, 0.0, None, 0.0 if delta else 1.0, 0.0, "identical")
        return Test(delta, None, None, None, None, "no spread")
    se, df, method = max(options, key=lambda o: o[0])
    if se == 0:
        return Test(delta, 0.0, df, 0.0 if delta else 1.0, 0.0, method)
    t = delta / se
    p = float(2 * stats.t.sf(abs(t), df))
    noise = float(stats.t.ppf(1 - (1 - confidence) / 2, df) * se)
    return Test(delta, se, df, p, noise, method)
