"""Change points in a nightly series: a step change told apart from a one-night blip.

The method is E-Divisive (Matteson & James 2014), as MongoDB's signal-processing-algorithms
and Apache Otava use it, on scipy: neither library installs next to this project's numpy
(signal-processing-algorithms 2.1.6 pins numpy < 2; apache-otava 0.8.0 pins numpy 2.2.0
and scipy < 1.17, and pulls in BigQuery, Postgres and Slack clients).

  1. Candidate split: the night tau maximising the E-Divisive divergence of the series
     before and after it, (m n / (m + n)) * energy_distance(before, after)^2, with
     `scipy.stats.energy_distance`; both parts need at least `min_size` nights (3), so a
     single odd night cannot be a split.
  2. Significance, as Otava does it: Welch's t-test between the two parts
     (`scipy.stats.ttest_ind`), kept when p < `max_p` (0.001, Otava's default) and the
     shift of the means is at least `min_shift` (relative, 0.5%, the report's practical
     minimum) and 3 night-to-night noise units (below). Then each part is split again (binary segmentation).
  0. Blips first: a night further than `blip_z` (5) night-to-night noise units (the robust
     spread of the first differences, `scipy.stats.median_abs_deviation(scale="normal")`)
     and than `min_shift` from the median of its `min_size` neighbours on each side (it
     needs that many nights on both sides), while
     those neighbours agree with each other (the nights after it are back to normal), is
     a blip; it is replaced by its neighbours' median before looking for splits. The
     newest night has no nights after it: whether it is a blip or a step, only the
     following nights will tell, so it is never called either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special, stats

_MAD_NORMAL = float(stats.norm.ppf(0.75))  # scale="normal" of median_abs_deviation


@dataclass
class Series:
    """What the detector found in one series (indices are positions in it)."""

    change_points: list[int] = field(default_factory=list)  # first index of each new segment
    blips: list[int] = field(default_factory=list)
    shifts: dict[int, float] = field(default_factory=dict)  # change point -> relative shift of the means
    p_values: dict[int, float] = field(default_factory=dict)


def energy_distance_sq(a: np.ndarray, b: np.ndarray) -> float:
    """`scipy.stats.energy_distance(a, b) ** 2` for 1-D samples, as its V-statistic
    2 E|X - Y| - E|X - X'| - E|Y - Y'| (the same number: a test checks it), without
    scipy's per-call argument handling (~1 ms; the report runs thousands)."""
    return float(2 * np.abs(a[:, None] - b[None, :]).mean() - np.abs(a[:, None] - a[None, :]).mean()
                 - np.abs(b[:, None] - b[None, :]).mean())


def _divergence(x: np.ndarray, tau: int) -> float:
    a, b = x[:tau], x[tau:]
    m, n = len(a), len(b)
    return m * n / (m + n) * energy_distance_sq(a, b)


def _split(x: np.ndarray, lo: int, hi: int, min_size: int, max_p: float, min_shift: float,
           floor: float, out: Series) -> None:
    seg = x[lo:hi]
    if len(seg) < 2 * min_size or np.ptp(seg) == 0:
        return
    taus = range(min_size, len(seg) - min_size + 1)
    tau = max(taus, key=lambda t: _divergence(seg, t))
    a, b = seg[:tau], seg[tau:]
    base = abs(float(np.mean(a))) or 1.0
    shift = (float(np.mean(b)) - float(np.mean(a))) / base
    p = _welch_p(a, b)
    if p >= max_p or abs(shift) < min_shift or abs(float(np.mean(b)) - float(np.mean(a))) < floor:
        return
    out.change_points.append(lo + tau)
    out.shifts[lo + tau] = shift
    out.p_values[lo + tau] = p
    _split(x, lo, lo + tau, min_size, max_p, min_shift, floor, out)
    _split(x, lo + tau, hi, min_size, max_p, min_shift, floor, out)


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's two-sided p-value (`scipy.stats.ttest_ind(equal_var=False)`); 0 when both
    parts are constant with different means."""
    va, vb = float(np.var(a, ddof=1)) / len(a), float(np.var(b, ddof=1)) / len(b)
    se2, diff = va + vb, float(np.mean(b)) - float(np.mean(a))
    if se2 == 0:
        return 0.0 if diff else 1.0
    df = se2 * se2 / ((va * va / (len(a) - 1) if va else 0.0) + (vb * vb / (len(b) - 1) if vb else 0.0))
    return float(2 * special.stdtr(df, -abs(diff) / np.sqrt(se2)))


def noise_scale(x: np.ndarray) -> float:
    """Night-to-night noise: the robust spread of the first differences over sqrt(2); a
    step or a blip moves only one or two differences, so it barely moves this."""
    if len(x) < 3:
        return 0.0
    d = np.diff(x)  # scipy.stats.median_abs_deviation(d, scale="normal"), without its overhead
    return float(np.median(np.abs(d - np.median(d)))) / _MAD_NORMAL / np.sqrt(2)


def _blips(x: np.ndarray, window: int, blip_z: float, min_shift: float) -> list[int]:
    """Nights far from their neighbours, whose neighbours before and after agree."""
    scale, out = noise_scale(x), []
    for i in range(window, len(x) - window):  # a full window of nights on each side
        before, after = x[max(0, i - window):i], x[i + 1:i + 1 + window]
        around = float(np.median(np.concatenate([before, after])))
        far = abs(x[i] - around)
        if far <= max(blip_z * scale, min_shift * abs(around)):
            continue
        if abs(float(np.median(before)) - float(np.median(after))) <= far / 2:
            out.append(i)
    return out


def detect(values: list[float], min_size: int = 3, max_p: float = 0.001, min_shift: float = 0.005,
           blip_z: float = 5.0) -> Series:
    """Change points and blips of a series, oldest first (see the module doc)."""
    x = np.asarray(values, dtype=float)
    out = Series()
    if len(x) < 3:
        return out
    out.blips = _blips(x, min_size, blip_z, min_shift)
    # A blip is replaced by its neighbours' median, so that it cannot pull a split toward it.
    clean = x.copy()
    for i in out.blips:
        clean[i] = float(np.median(np.concatenate([x[max(0, i - min_size):i], x[i + 1:i + 1 + min_size]])))
    _split(clean, 0, len(clean), min_size, max_p, min_shift, 3 * noise_scale(clean), out)
    out.change_points.sort()
    return out
