"""`tracedb report`: the nightly regression report, candidate runs against baseline runs.

One module per job:
  select.py      which runs: ids, run.json labels, --history N
  metrics.py     the metrics' per-step samples, from the canned queries
  stats.py       the statistical rule (noise measured across runs and steps, scipy.stats)
  evaluate.py    verdicts, what gates, host-bound changes, findings in order, history
  changepoint.py E-Divisive change points and one-night blips over a --history series
  render.py      Markdown (terminal width), JSON (versioned schema); html.py + svg.py

Exit code of the CLI: 0 no gating regression, 1 a gating regression, 2 no report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracedb import catalog
from tracedb.errors import TracedbError
from tracedb.report import evaluate as E
from tracedb.report import metrics as M
from tracedb.report.select import RunInfo, order, select_sides
from tracedb.report.stats import Settings

FORMATS = ("markdown", "html", "json")
SCHEMA_VERSION = 1  # of the JSON output; docs/report.md describes it

__all__ = ["FORMATS", "SCHEMA_VERSION", "Report", "RunInfo", "Settings", "build_report", "select_sides"]


@dataclass
class Report:
    baseline_runs: list[RunInfo]
    candidate_runs: list[RunInfo]
    settings: Settings
    metrics: list[M.Metric] = field(default_factory=list)
    history: dict[str, dict] = field(default_factory=dict)  # metric key -> series and change points
    max_findings: int = 5

    @property
    def findings(self) -> list[M.Metric]:
        return E.findings(self.metrics)

    @property
    def has_regression(self) -> bool:
        return bool(self.findings)

    def find(self, kind: str, device: str | None = None, name: str = "") -> M.Metric | None:
        return next((m for m in self.metrics if m.kind == kind and m.name == name
                     and (device is None or m.device == device)), None)

    def with_status(self, status: str) -> list[M.Metric]:
        return [m for m in self.metrics if m.status == status]

    def headline(self) -> str:
        from tracedb.report.render import headline

        return headline(self)

    def render(self, fmt: str) -> str:
        from tracedb.report import render

        if fmt == "markdown":
            return render.markdown(self)
        if fmt == "html":
            from tracedb.report import html

            return html.document(self)
        if fmt == "json":
            return render.json_text(self)
        raise TracedbError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")


def build_report(
    warehouse: Path,
    baseline: list[str] = (),
    candidate: list[str] = (),
    *,
    baseline_labels: list[str] = (),
    candidate_labels: list[str] = (),
    labels: list[str] = (),
    history: int | None = None,
    settings: Settings | None = None,
) -> Report:
    """Compare candidate runs with baseline runs (see select.py for the selectors)."""
    settings = settings or Settings()
    settings.check()
    con = catalog.connect(warehouse)
    try:
        base, cand = select_sides(con, list(baseline), list(candidate), list(baseline_labels),
                                  list(candidate_labels), list(labels), history)
        metrics = M.collect(con, {"base": [r.run_id for r in base], "cand": [r.run_id for r in cand]})
    finally:
        con.close()
    M.fill_zeros(metrics)
    metrics += M.kernel_sets(metrics, settings)
    runs = [r.run_id for r in sorted(base + cand, key=order)]
    if history is not None:
        E.trim_baseline(metrics, runs)
    E.evaluate(metrics, settings)
    rep = Report(base, cand, settings, metrics)
    if history is not None:
        rep.history = E.history(metrics, runs)
    return rep
