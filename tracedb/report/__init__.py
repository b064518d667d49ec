"""`tracedb report`: the nightly regression report, candidate runs against baseline runs.

One module per job:
  select.py      which runs: ids, run.json labels, --history N
  metrics.py     the metrics' per-step samples, from the canned queries; the metric kinds
  stats.py       the statistical rule (noise measured across runs and steps, scipy.stats)
  evaluate.py    verdicts, what gates, false-discovery control, host-bound changes,
                 findings in order, the baseline rule with a history, history
  changepoint.py E-Divisive change points and one-night blips over a --history series
  acceptance.py  accepted changes (`tracedb accept` / `revoke`, the lake's `acceptances`)
  config.py      settings from [tool.tracedb.report] in pyproject.toml, or tracedb.toml
  render.py      Markdown (terminal width), JSON (versioned schema); html.py + svg.py

Exit code of the CLI: 0 no gating regression, 1 a gating regression, 2 no report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracedb import catalog
from tracedb.errors import TracedbError
from tracedb.report import evaluate as E
from tracedb.report import acceptance
from tracedb.report import metrics as M
from tracedb.report.acceptance import Acceptance
from tracedb.report.select import RunInfo, earlier, order, select_sides
from tracedb.report.stats import Settings

FORMATS = ("markdown", "html", "json")
SCHEMA_VERSION = 2  # of the JSON output; docs/report.md describes it (2: acceptances, q-values, not gating)

__all__ = ["FORMATS", "SCHEMA_VERSION", "Report", "RunInfo", "Settings", "build_report", "select_sides"]


@dataclass
class Report:
    baseline_runs: list[RunInfo]
    candidate_runs: list[RunInfo]
    settings: Settings
    metrics: list[M.Metric] = field(default_factory=list)
    history: dict[str, dict] = field(default_factory=dict)  # metric key -> series and change points
    max_findings: int = 5
    acceptances: list[Acceptance] = field(default_factory=list)  # live ones that bear on these runs
    earlier_runs: list[RunInfo] = field(default_factory=list)  # before the baseline: where its regime may be

    @property
    def findings(self) -> list[M.Metric]:
        return E.findings(self.metrics)

    @property
    def has_regression(self) -> bool:
        return bool(self.findings)

    @property
    def improvements(self) -> list[M.Metric]:
        return E.improvements(self.metrics)

    @property
    def not_gating(self) -> list[M.Metric]:
        """Host-side changes beyond their noise that do not gate (named in the headline)."""
        return E.not_gating(self.metrics)

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
        older = earlier(con, base, settings.lookback, list(baseline), list(baseline_labels), list(labels)) \
            if history is not None else []
        metrics = M.collect(con, {"base": [r.run_id for r in older + base], "cand": [r.run_id for r in cand]},
                            settings)
        accepted = acceptance.read(con)
        runs = [r.run_id for r in sorted(base + cand, key=order)]
        every = [r.run_id for r in sorted(older + base + cand, key=order)]
        placed = _place(con, accepted, every, older + base + cand)
    finally:
        con.close()
    M.fill_zeros(metrics)
    if history is not None:
        E.regime_baseline(metrics, every, len(cand), placed, settings, keep=history, window=len(runs) - len(cand))
    else:  # explicit baselines are taken as given; an acceptance of a candidate run still applies
        E.mark_accepted(metrics, runs, len(cand), placed)
    metrics += M.kernel_sets(metrics, settings)
    E.evaluate(metrics, settings)
    rep = Report(base, cand, settings, metrics, acceptances=[a for a, p in placed if p >= 0],
                 earlier_runs=older)
    if history is not None:
        rep.history = E.history(metrics, runs)
    return rep


def _place(con, accepted: list[Acceptance], runs: list[str], infos: list[RunInfo]) -> list[tuple[Acceptance, int]]:
    """(acceptance, index of its run in `runs`, or -1 when older than all of them) for the
    acceptances that bear on these runs: those at a run newer than the candidates do not."""
    if not accepted:
        return []
    at = {r: i for i, r in enumerate(runs)}
    known = {r.run_id: order(r) for r in infos}
    missing = sorted({a.run_id for a in accepted} - set(known))
    if missing:
        rows = catalog.query_arrow(con, "SELECT run_id, started_at, ingested_at FROM runs WHERE list_contains($ids, run_id)",
                                   {"ids": missing}).to_pylist()
        known.update({r["run_id"]: order(RunInfo(**r)) for r in rows})
    first = min(known[r] for r in runs)
    out = []
    for a in accepted:
        if a.run_id in at:
            out.append((a, at[a.run_id]))
        elif a.run_id in known and known[a.run_id] < first:
            out.append((a, -1))
    return out
