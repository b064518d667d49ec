"""Change points over a nightly series (report --history): a step change is found on the
night it happened, a one-night blip is told apart from it, and a noisy flat series has
neither. Synthetic series with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from tracedb.report.changepoint import detect


def nights(seed: int, step_at: int | None = 19, blip_at: int | None = 9, n: int = 30) -> list[float]:
    """30 nights of a 100 ms metric with 0.3% noise; +3% from night 20 (index 19) on, and
    +6% on night 10 (index 9) only."""
    x = 100.0 + np.random.default_rng(seed).normal(0, 0.3, n)
    if step_at is not None:
        x[step_at:] += 3.0
    if blip_at is not None:
        x[blip_at] += 6.0
    return list(x)


def test_step_on_night_20_and_blip_on_night_10_told_apart():
    found = detect(nights(7))
    assert found.change_points == [19] and found.blips == [9]
    assert found.shifts[19] == pytest.approx(0.03, abs=0.005)
    assert found.p_values[19] < 0.001


@pytest.mark.parametrize("seed", range(40))
def test_across_noise_draws(seed):
    found = detect(nights(seed))
    assert (found.change_points, found.blips) == ([19], [9])


def test_step_alone_blip_alone_and_flat():
    assert (detect(nights(3, blip_at=None)).change_points, detect(nights(3, blip_at=None)).blips) == ([19], [])
    blip_only = detect(nights(3, step_at=None))
    assert (blip_only.change_points, blip_only.blips) == ([], [9])
    flat = [detect(nights(s, step_at=None, blip_at=None)) for s in range(40)]
    assert sum(bool(f.change_points or f.blips) for f in flat) <= 2  # false alarms: rare


def test_the_newest_night_is_neither():
    # A jump on the last night cannot be told from a blip yet: neither is claimed.
    x = nights(5, step_at=29, blip_at=None)
    found = detect(x)
    assert found.change_points == [] and found.blips == []


def test_the_fast_statistics_equal_scipys():
    """changepoint's own energy distance, Welch p-value and noise scale (scipy's per-call
    overhead was most of a report's time) give scipy's numbers."""
    from scipy import stats

    from tracedb.report import changepoint as C

    rng = np.random.default_rng(0)
    for _ in range(50):
        a, b = rng.normal(0, 1, rng.integers(2, 12)), rng.normal(0.5, 2, rng.integers(2, 12))
        assert C.energy_distance_sq(a, b) == pytest.approx(stats.energy_distance(a, b) ** 2, rel=1e-9, abs=1e-12)
        assert C._welch_p(a, b) == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
        x = rng.normal(0, 1, 15)
        assert C.noise_scale(x) == pytest.approx(stats.median_abs_deviation(np.diff(x), scale="normal") / np.sqrt(2))
