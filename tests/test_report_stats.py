"""The report's statistical rule and host-bound attribution on hand-made samples whose
answers are known (Student's t quantiles from tables, not from the code under test)."""

from __future__ import annotations

import pytest

from tracedb.report import evaluate as E
from tracedb.report import metrics as M
from tracedb.report.stats import Settings, Side, compare


def side(**runs) -> Side:
    return Side({k: list(v) for k, v in runs.items()})


def test_across_runs_noise_is_the_prediction_interval():
    # baseline run means 10, 11, 12 (sd 1), one candidate run at 20: se = 1 * sqrt(1/3 + 1),
    # t(0.995, df=2) = 9.925 (tables): noise = 11.46, delta 9 is inside it
    t = compare(side(a=[10], b=[11], c=[12]), side(d=[20]), 0.99)
    assert t.method == "across runs" and t.df == 2
    assert t.se == pytest.approx((4 / 3) ** 0.5)
    assert t.noise == pytest.approx(9.925 * (4 / 3) ** 0.5, rel=1e-3)
    assert not t.significant(0.99) and t.significant(0.90)


def test_within_runs_when_one_baseline_run():
    # steps 10, 10.1, 9.9 against 11, 11.1, 10.9: Welch se = 0.0816, df = 4
    t = compare(side(a=[10, 10.1, 9.9]), side(b=[11, 11.1, 10.9]), 0.99)
    assert t.method == "within runs (steps)" and t.df == pytest.approx(4)
    assert t.se == pytest.approx((0.01 / 3 * 2) ** 0.5)
    assert t.significant(0.99)


def test_no_spread_and_identical():
    t = compare(side(a=[5.0]), side(b=[6.0]), 0.99)
    assert (t.method, t.p, t.noise) == ("no spread", None, None) and t.significant(0.99)
    t = compare(side(a=[5.0, 5.0]), side(b=[5.0, 5.0]), 0.99)
    assert t.delta == 0 and not t.significant(0.99)


def _device(step_delta: float, busy_delta: float) -> list[M.Metric]:
    """Device step time 10 ms and busy 9 ms a step, 4 baseline runs with a little noise."""
    def m(kind, base, delta):
        x = M.Metric(kind, "GPU:0", "", "ns")
        for i, r in enumerate("abcd"):
            x.base.runs[r] = [base + 1000 * i, base - 1000 * i]
        x.cand.runs["z"] = [base + delta, base + delta]
        return x
    return [m(M.DEVICE_STEP, 10_000_000, step_delta), m(M.BUSY, 9_000_000, busy_delta)]


def test_device_step_time_gates_when_the_gpu_was_busy_for_it():
    metrics = _device(1_000_000, 900_000)
    E.evaluate(metrics, Settings())
    assert metrics[0].status == "regression" and E.findings(metrics) == [metrics[0]]
    assert metrics[0].impact_ns == pytest.approx(1_000_000)


def test_device_step_time_is_host_bound_when_the_gpu_waited():
    metrics = _device(1_000_000, 100_000)
    E.evaluate(metrics, Settings())
    assert metrics[0].status == "host-bound" and E.findings(metrics) == []
    assert "waited for the host" in metrics[0].reason
    metrics = _device(1_000_000, 100_000)
    E.evaluate(metrics, Settings(gate_host=True))
    assert metrics[0].status == "regression"
