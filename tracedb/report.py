"""`tracedb report`: the nightly regression report, candidate runs against baseline runs.

Each side is one or more runs; every metric is aggregated in SQL per run and averaged over
the side's runs (a kernel missing from a run counts as 0 there). A metric regresses when it
got worse by more than both thresholds: the relative one (%) and the absolute one (ns for
times, bytes for sizes). A kernel or op type only the candidate has counts from 0, so it
regresses once its time passes the absolute threshold. Counts (nodes, launches) are shown
but never regress on their own: the time they cost does.

Run selection (the two sides may be given in any mix):
  * explicit run ids (`--baseline RUN`, `--candidate RUN`, repeatable);
  * labels from run.json (`--baseline-label commit=abc`, `--candidate-label commit=def`;
    every label given must match), plus `--label K=V` that both sides must match;
  * history (`--history N`): the baseline is the N runs just before the candidate's
    earliest run, ordered by `started_at` (else `ingested_at`); with no candidate
    selector the candidate is the newest run.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import List, Optional

import duckdb
import typer

from tracedb import catalog
from tracedb.errors import TracedbError

FORMATS = ("markdown", "html", "json")

# section -> title, in report order.
SECTIONS = {
    "gpu": "GPU totals",
    "step": "Step time",
    "kernel": "Kernels",
    "op_type": "Op types (framework nodes)",
    "memory": "Peak memory",
    "graph": "Graph",
}

# One row per run, section, metric: value (ns, bytes or a count) and instances behind it.
# The per-run rows are then averaged over each side in the same statement.
_METRICS_SQL = """
WITH sides AS (
    SELECT unnest($baseline::VARCHAR[]) AS run_id, 'baseline' AS side
    UNION ALL
    SELECT unnest($candidate::VARCHAR[]) AS run_id, 'candidate' AS side
),
k AS (SELECT * FROM kernels WHERE list_contains($runs, run_id)),
n AS (SELECT * FROM nodes WHERE list_contains($runs, run_id)),
spans AS (
    SELECT run_id, step, start_ns, start_ns + duration_ns AS end_ns FROM n
    WHERE step IS NOT NULL AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
    UNION ALL
    SELECT run_id, step, start_ns, start_ns + duration_ns AS end_ns FROM k
    WHERE step IS NOT NULL AND start_ns IS NOT NULL AND duration_ns IS NOT NULL
),
steps AS (
    SELECT run_id, step, max(end_ns) - min(start_ns) AS wall_ns FROM spans GROUP BY run_id, step
),
live AS (
    -- Live bytes after each event; a planned chunk (no timestamp) is live all along,
    -- so chunks sum to the planned total.
    SELECT run_id, coalesce(device, '?') AS device, coalesce(allocator, '?') AS allocator,
           sum(bytes) OVER (PARTITION BY run_id, device, allocator ORDER BY ts_ns) AS live_bytes
    FROM allocations WHERE list_contains($runs, run_id)
),
per_run AS (
    SELECT run_id, 'gpu' AS section, 'GPU ' || kind || ' time' AS name, 'ns' AS unit,
           sum(duration_ns) AS value, count(*) AS instances
    FROM k GROUP BY run_id, kind
    UNION ALL
    SELECT run_id, 'gpu', 'GPU ' || kind || ' bytes', 'bytes', sum(bytes), count(*)
    FROM k WHERE kind IN ('memcpy', 'memset') GROUP BY run_id, kind
    UNION ALL
    SELECT run_id, 'kernel', coalesce(name, '(unnamed)'), 'ns', sum(duration_ns), count(*)
    FROM k WHERE kind = 'kernel' GROUP BY run_id, name
    UNION ALL
    SELECT run_id, 'step', 'mean step time', 'ns', avg(wall_ns), count(*)
    FROM steps GROUP BY run_id
    UNION ALL
    SELECT run_id, 'op_type', coalesce(op_type, '(none)'), 'ns', sum(duration_ns), count(*)
    FROM n WHERE duration_ns IS NOT NULL GROUP BY run_id, op_type
    UNION ALL
    SELECT run_id, 'graph', 'nodes', 'count', count(*), count(*) FROM n GROUP BY run_id
    UNION ALL
    -- untimed nodes (dumps, listed-only graph nodes): what is left to compare is counts
    SELECT run_id, 'graph', 'untimed nodes: ' || coalesce(op_type, '(none)'), 'count', count(*), count(*)
    FROM n WHERE duration_ns IS NULL GROUP BY run_id, op_type
    UNION ALL
    SELECT run_id, 'memory', device || ' ' || allocator, 'bytes', max(live_bytes), NULL
    FROM live GROUP BY run_id, device, allocator
)
SELECT
    section, name, unit,
    -- step time is a mean over the runs that have steps; everything else a mean per run
    CAST(CASE WHEN section = 'step' THEN avg(value) FILTER (WHERE side = 'baseline')
              ELSE coalesce(sum(value) FILTER (WHERE side = 'baseline'), 0) / $n_baseline END AS DOUBLE) AS baseline,
    CAST(CASE WHEN section = 'step' THEN avg(value) FILTER (WHERE side = 'candidate')
              ELSE coalesce(sum(value) FILTER (WHERE side = 'candidate'), 0) / $n_candidate END AS DOUBLE) AS candidate,
    CAST(sum(instances) FILTER (WHERE side = 'baseline') / $n_baseline AS DOUBLE) AS baseline_count,
    CAST(sum(instances) FILTER (WHERE side = 'candidate') / $n_candidate AS DOUBLE) AS candidate_count,
    count(*) FILTER (WHERE side = 'baseline') > 0 AS in_baseline,
    count(*) FILTER (WHERE side = 'candidate') > 0 AS in_candidate
FROM per_run JOIN sides USING (run_id)
GROUP BY section, name, unit
ORDER BY section, name
"""

_RUNS_SQL = """
SELECT run_id, model, "commit", hardware, started_at, ingested_at,
       coalesce(started_at, ingested_at) AS order_at
FROM runs
WHERE (len($ids) = 0 OR list_contains($ids, run_id)) {labels}
ORDER BY order_at, run_id
"""


@dataclass
class RunInfo:
    run_id: str
    model: str | None = None
    commit: str | None = None
    hardware: str | None = None
    started_at: datetime | None = None
    ingested_at: datetime | None = None


@dataclass
class Change:
    section: str
    name: str
    unit: str  # ns | bytes | count
    baseline: float  # mean per baseline run
    candidate: float
    baseline_count: float | None = None  # instances (kernel launches, node executions) per run
    candidate_count: float | None = None
    in_baseline: bool = True
    in_candidate: bool = True
    status: str = "unchanged"  # regression | improvement | unchanged

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def delta_pct(self) -> float | None:
        """Relative change in %; None when the baseline is 0 (new metric)."""
        return 100.0 * self.delta / self.baseline if self.baseline else None

    @property
    def presence(self) -> str:
        return "new" if not self.in_baseline else "vanished" if not self.in_candidate else "both"

    @property
    def prefix(self) -> str:
        return {"kernel": "kernel ", "op_type": "op type "}.get(self.section, "")

    @property
    def label(self) -> str:
        return self.prefix + self.name


@dataclass
class Thresholds:
    min_delta_pct: float = 5.0
    min_delta_ns: int = 10_000
    min_delta_bytes: int = 1 << 20

    def verdict(self, c: Change) -> str:
        absolute = {"ns": self.min_delta_ns, "bytes": self.min_delta_bytes}.get(c.unit)
        if absolute is None or c.delta == 0:
            return "unchanged"
        pct = abs(c.delta_pct) if c.delta_pct is not None else math.inf
        if abs(c.delta) > absolute and pct > self.min_delta_pct:
            return "regression" if c.delta > 0 else "improvement"
        return "unchanged"


@dataclass
class Report:
    baseline_runs: list[RunInfo]
    candidate_runs: list[RunInfo]
    thresholds: Thresholds
    changes: list[Change] = field(default_factory=list)
    top: int = 20

    @property
    def regressions(self) -> list[Change]:
        return _by_delta([c for c in self.changes if c.status == "regression"])

    @property
    def improvements(self) -> list[Change]:
        return _by_delta([c for c in self.changes if c.status == "improvement"])

    @property
    def has_regression(self) -> bool:
        return any(c.status == "regression" for c in self.changes)

    def new(self, section: str = "kernel") -> list[Change]:
        return _by_delta([c for c in self.changes if c.section == section and c.presence == "new"])

    def vanished(self, section: str = "kernel") -> list[Change]:
        return _by_delta([c for c in self.changes if c.section == section and c.presence == "vanished"])

    def section(self, name: str) -> list[Change]:
        return _by_delta([c for c in self.changes if c.section == name])

    def find(self, section: str, name: str) -> Change | None:
        return next((c for c in self.changes if c.section == section and c.name == name), None)

    def summary(self) -> str:
        n = len(self.regressions)
        parts = [f"{n} regression{'s' if n != 1 else ''}", _plural(len(self.improvements), "improvement"),
                 _plural(len(self.new()), "new kernel"), _plural(len(self.vanished()), "vanished kernel")]
        return ", ".join(parts)

    def threshold_text(self) -> str:
        t = self.thresholds
        return (f"worse by more than {t.min_delta_pct:g}% and more than {_fmt(t.min_delta_ns, 'ns')} "
                f"(times) / {_fmt(t.min_delta_bytes, 'bytes')} (sizes)")

    def _blocks(self) -> list[tuple[str, list[Change], bool]]:
        """(title, rows, complete?) in report order; long per-name tables keep the top rows."""
        out = [("Regressions", self.regressions, True), ("Improvements", self.improvements, True),
               ("New kernels", self.new(), True), ("Vanished kernels", self.vanished(), True)]
        for key, title in SECTIONS.items():
            rows = self.section(key)
            if rows:
                out.append((title, rows if key not in ("kernel", "op_type") else rows[: self.top],
                            key not in ("kernel", "op_type") or len(rows) <= self.top))
        return out

    def to_markdown(self) -> str:
        lines = ["# tracedb regression report", "", f"**{self.summary()}**", "",
                 f"A regression: {self.threshold_text()}. Values are means per run.", "",
                 "## Runs", "", "| side | run | model | commit | hardware | started_at |", "|---|---|---|---|---|---|"]
        for side, runs in (("baseline", self.baseline_runs), ("candidate", self.candidate_runs)):
            for r in runs:
                cells = [side, *map(_code, (r.run_id, r.model, r.commit, r.hardware)), _when(r.started_at)]
                lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
        for title, rows, complete in self._blocks():
            lines += ["", f"## {title}", ""]
            if not rows:
                lines.append("none")
                continue
            if not complete:
                lines += [f"Top {len(rows)} by change.", ""]
            lines += ["| metric | baseline | candidate | delta | delta % | |", "|---|---:|---:|---:|---:|---|"]
            for c in rows:
                cells = [_md_label(c), *_cells(c)]
                lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        e = html.escape
        out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
               "<title>tracedb regression report</title>", f"<style>{_CSS}</style></head><body>",
               "<h1>tracedb regression report</h1>",
               f'<p class="summary {"bad" if self.has_regression else "good"}">{e(self.summary())}</p>',
               f"<p>A regression: {e(self.threshold_text())}. Values are means per run.</p>",
               "<h2>Runs</h2>", "<table><thead><tr><th>side</th><th>run</th><th>model</th><th>commit</th>"
               "<th>hardware</th><th>started_at</th></tr></thead><tbody>"]
        for side, runs in (("baseline", self.baseline_runs), ("candidate", self.candidate_runs)):
            for r in runs:
                cells = [side, r.run_id, r.model, r.commit, r.hardware, _when(r.started_at)]
                out.append("<tr>" + "".join(f"<td>{e(c or '')}</td>" for c in cells) + "</tr>")
        out.append("</tbody></table>")
        for title, rows, complete in self._blocks():
            out.append(f"<h2>{e(title)}</h2>")
            if not rows:
                out.append("<p>none</p>")
                continue
            if not complete:
                out.append(f"<p>Top {len(rows)} by change.</p>")
            out.append("<table><thead><tr><th>metric</th><th>baseline</th><th>candidate</th><th>delta</th>"
                       "<th>delta %</th><th></th></tr></thead><tbody>")
            for c in rows:
                cells = "".join(f'<td class="num">{e(x)}</td>' for x in _cells(c)[:4])
                out.append(f'<tr class="{c.status}"><td>{e(c.prefix + _short(c.name))}</td>{cells}<td>{e(_cells(c)[4])}</td></tr>')
            out.append("</tbody></table>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict:
        def change(c: Change) -> dict:
            return {**asdict(c), "delta": c.delta, "delta_pct": c.delta_pct, "presence": c.presence}

        return {
            "summary": self.summary(),
            "has_regression": self.has_regression,
            "thresholds": asdict(self.thresholds),
            "baseline_runs": [asdict(r) for r in self.baseline_runs],
            "candidate_runs": [asdict(r) for r in self.candidate_runs],
            "regressions": [change(c) for c in self.regressions],
            "improvements": [change(c) for c in self.improvements],
            "changes": [change(c) for c in self.changes],
        }

    def render(self, fmt: str) -> str:
        if fmt == "markdown":
            return self.to_markdown()
        if fmt == "html":
            return self.to_html()
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, default=str) + "\n"
        raise TracedbError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}"
    "td:first-child{max-width:50em;overflow-wrap:anywhere}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}"
    "tr.regression{background:#fde2e1}tr.improvement{background:#e3f6e5}"
    ".summary{font-size:1.3em;font-weight:bold}.bad{color:#b00020}.good{color:#1b7f2a}"
)


def _by_delta(rows: list[Change]) -> list[Change]:
    # biggest change first; among equals the biggest metric
    return sorted(rows, key=lambda c: (-abs(c.delta), -max(c.baseline, c.candidate), c.section, c.name))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _when(ts: datetime | None) -> str | None:
    return ts.isoformat(sep=" ", timespec="seconds") if ts else None


def _md(v) -> str:
    return str(v if v is not None else "").replace("|", "\\|").replace("\n", " ")


def _code(v) -> str:
    """A name as a Markdown code span: kernel names hold `<>`, `*` and `_` that would
    otherwise render as HTML or emphasis."""
    if v is None or v == "":
        return ""
    v = str(v)
    fence = "``" if "`" in v else "`"
    return f"{fence}{v}{fence}" if fence == "`" else f"{fence} {v} {fence}"


def _short(name: str, width: int = 160) -> str:
    """Display form of a (C++ template) kernel name; JSON output keeps the full one."""
    return name if len(name) <= width else name[: width - 1] + "…"


def _fmt(v: float, unit: str, signed: bool = False) -> str:
    """Times in ns/µs/ms/s with 3 decimals, sizes in B/KiB/MiB/GiB, counts as numbers."""
    sign = "+" if signed and v > 0 else ""
    if unit == "ns":
        for scale, name in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
            if abs(v) >= scale:
                return f"{sign}{v / scale:.3f} {name}"
        return f"{sign}{v:g} ns"
    if unit == "bytes":
        for scale, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(v) >= scale:
                return f"{sign}{v / scale:.2f} {name}"
        return f"{sign}{v:g} B"
    return f"{sign}{v:g}"


def _md_label(c: Change) -> str:
    # names that come from traces become code spans; our own metric names stay plain
    return c.prefix + _code(_short(c.name)) if c.section in ("kernel", "op_type", "memory") else c.name


def _count(n: float | None) -> str:
    return f" ({n:g}×)" if n is not None else ""


def _cells(c: Change) -> list[str]:
    """baseline, candidate, delta, delta %, note."""
    counted = c.section in ("kernel", "op_type") or (c.section == "gpu" and c.unit == "ns")
    pct = "new" if c.delta_pct is None and c.delta else "" if c.delta_pct is None else f"{c.delta_pct:+.1f}%"
    note = c.status if c.status != "unchanged" else ""
    if c.presence != "both":
        note = f"{note} ({c.presence})".strip()
    return [
        _fmt(c.baseline, c.unit) + (_count(c.baseline_count) if counted else ""),
        _fmt(c.candidate, c.unit) + (_count(c.candidate_count) if counted else ""),
        _fmt(c.delta, c.unit, signed=True),
        pct,
        note,
    ]


def _label_filters(labels: list[str], prefix: str) -> tuple[str, dict]:
    """`K=V` selectors as SQL over the runs' label JSON; keys and values are bound."""
    sql, params = [], {}
    for i, item in enumerate(labels):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TracedbError(f"label selector {item!r}: expected KEY=VALUE")
        params[f"{prefix}k{i}"] = catalog.label_path(key.strip())
        params[f"{prefix}v{i}"] = value
        sql.append(f"AND json_extract_string(labels, ${prefix}k{i}) = ${prefix}v{i}")
    return " ".join(sql), params


def _select(con: duckdb.DuckDBPyConnection, ids: list[str], labels: list[str]) -> list[RunInfo]:
    """Runs among `ids` (all when empty) matching every label, oldest first."""
    where, params = _label_filters(labels, "l")
    rows = catalog.query_arrow(con, _RUNS_SQL.format(labels=where), {"ids": list(ids), **params}).to_pylist()
    missing = sorted(set(ids) - {r["run_id"] for r in rows})
    if missing and not labels:
        raise TracedbError(f"no run named {', '.join(map(repr, missing))} in the warehouse")
    return [RunInfo(**{k: v for k, v in r.items() if k != "order_at"}) for r in rows]


def select_sides(
    con: duckdb.DuckDBPyConnection,
    baseline: list[str] = (),
    candidate: list[str] = (),
    baseline_labels: list[str] = (),
    candidate_labels: list[str] = (),
    labels: list[str] = (),
    history: int | None = None,
) -> tuple[list[RunInfo], list[RunInfo]]:
    """The baseline and candidate runs the selectors name (see the module doc)."""
    if history is not None and history < 1:
        raise TracedbError("--history must be at least 1")
    if candidate or candidate_labels:
        cand = _select(con, list(candidate), [*labels, *candidate_labels])
    elif history is not None:
        cand = _select(con, [], list(labels))[-1:]
    else:
        raise TracedbError("no candidate runs selected: give --candidate RUN, --candidate-label K=V or --history N")
    if not cand:
        raise TracedbError("no run matches the candidate selectors")
    if baseline or baseline_labels or history is None:
        if not (baseline or baseline_labels):
            raise TracedbError("no baseline runs selected: give --baseline RUN, --baseline-label K=V or --history N")
        base = _select(con, list(baseline), [*labels, *baseline_labels])
    else:
        base = []
    if history is not None:
        # The N runs right before the candidate's earliest run (among the baseline selectors).
        pool = base if (baseline or baseline_labels) else _select(con, [], list(labels))
        first = min(_order(r) for r in cand)
        cand_ids = {r.run_id for r in cand}
        base = [r for r in pool if _order(r) < first and r.run_id not in cand_ids][-history:]
        if not base:
            raise TracedbError(f"--history needs at least 2 runs (the candidate and one before it); "
                               f"no run was ingested before {min(cand, key=_order).run_id!r}")
    if not base:
        raise TracedbError("no run matches the baseline selectors")
    return base, cand


def _order(r: RunInfo) -> tuple:
    return (r.started_at or r.ingested_at, r.run_id)


def build_report(
    warehouse: Path,
    baseline: list[str] = (),
    candidate: list[str] = (),
    *,
    baseline_labels: list[str] = (),
    candidate_labels: list[str] = (),
    labels: list[str] = (),
    history: int | None = None,
    min_delta_pct: float = 5.0,
    min_delta_ns: int = 10_000,
    min_delta_bytes: int = 1 << 20,
    top: int = 20,
) -> Report:
    """Compare candidate runs with baseline runs; see the module doc for selection and rules."""
    if min_delta_pct < 0 or min_delta_ns < 0 or min_delta_bytes < 0 or top < 1:
        raise TracedbError("thresholds must be >= 0 and --top >= 1")
    con = catalog.connect(warehouse)
    try:
        base, cand = select_sides(con, list(baseline), list(candidate), list(baseline_labels),
                                  list(candidate_labels), list(labels), history)
        b_ids, c_ids = [r.run_id for r in base], [r.run_id for r in cand]
        rows = catalog.query_arrow(con, _METRICS_SQL, {
            "baseline": b_ids, "candidate": c_ids, "runs": sorted(set(b_ids + c_ids)),
            "n_baseline": len(b_ids), "n_candidate": len(c_ids),
        }).to_pylist()
    finally:
        con.close()
    thresholds = Thresholds(min_delta_pct, min_delta_ns, min_delta_bytes)
    changes = []
    for r in rows:
        c = Change(**{k: (0.0 if r[k] is None and k in ("baseline", "candidate") else r[k]) for k in r})
        c.status = thresholds.verdict(c)
        changes.append(c)
    return Report(base, cand, thresholds, changes, top)


_WAREHOUSE = typer.Option(
    None, "--warehouse", "-w", envvar="TRACEDB_WAREHOUSE",
    help="Warehouse folder [default: $TRACEDB_WAREHOUSE, else ./tracedb-warehouse]",
)


def report_command(
    baseline: List[str] = typer.Option([], "--baseline", "-b", help="Baseline run id (repeatable)"),
    candidate: List[str] = typer.Option([], "--candidate", "-c", help="Candidate run id (repeatable)"),
    baseline_label: List[str] = typer.Option([], "--baseline-label", help="Baseline runs have this run.json label, KEY=VALUE (repeatable, all must match)"),
    candidate_label: List[str] = typer.Option([], "--candidate-label", help="Candidate runs have this label, KEY=VALUE (repeatable)"),
    label: List[str] = typer.Option([], "--label", help="Both sides have this label, KEY=VALUE, e.g. model=resnet50 (repeatable)"),
    history: Optional[int] = typer.Option(None, "--history", help="Baseline = the N runs before the candidate (by started_at, else ingested_at); candidate defaults to the newest run"),
    fmt: str = typer.Option("markdown", "--format", "-f", help="markdown | html | json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to FILE (the summary line still goes to stdout)"),
    min_delta_pct: float = typer.Option(5.0, "--min-delta-pct", help="Regression: worse by more than this many %"),
    min_delta_ns: int = typer.Option(10_000, "--min-delta-ns", help="... and by more than this many ns (times)"),
    min_delta_bytes: int = typer.Option(1 << 20, "--min-delta-bytes", help="... or this many bytes (sizes)"),
    top: int = typer.Option(20, "--top", help="Rows in the per-kernel and per-op-type tables"),
    warehouse: Optional[Path] = _WAREHOUSE,
):
    """Regression report: candidate runs against baseline runs; exit 1 when a metric regressed.

    Example: tracedb report --baseline-label commit=abc123 --candidate-label commit=def456 --format html -o report.html
    """
    try:
        if fmt not in FORMATS:
            raise TracedbError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")
        rep = build_report(
            warehouse or catalog.default_warehouse(), baseline, candidate,
            baseline_labels=baseline_label, candidate_labels=candidate_label, labels=label,
            history=history, min_delta_pct=min_delta_pct, min_delta_ns=min_delta_ns,
            min_delta_bytes=min_delta_bytes, top=top,
        )
        text = rep.render(fmt)
        if output:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as e:
                raise TracedbError(f"cannot write {output}: {e.strerror or e}") from e
            typer.echo(rep.summary())
        else:
            typer.echo(text, nl=False)
    except TracedbError as e:
        typer.echo(f"tracedb: error: {e}", err=True)
        raise typer.Exit(2)
    raise typer.Exit(1 if rep.has_regression else 0)
