"""Which runs the report compares: explicit run ids, run.json labels, or the history.

  * explicit run ids (`--baseline RUN`, `--candidate RUN`, repeatable);
  * labels from run.json (`--baseline-label commit=abc`, `--candidate-label commit=def`;
    every label given must match), plus `--label K=V` that both sides must match;
  * history (`--history N`): the baseline is the N runs just before the candidate's
    earliest run, ordered by `started_at` (else `ingested_at`); with no candidate
    selector the candidate is the newest run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from tracedb import catalog
from tracedb.errors import TracedbError

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
        first = min(order(r) for r in cand)
        cand_ids = {r.run_id for r in cand}
        base = [r for r in pool if order(r) < first and r.run_id not in cand_ids][-history:]
    if not base and history is not None and not (baseline or baseline_labels):
        first_ids = ", ".join(repr(r.run_id) for r in cand)
        raise TracedbError(f"--history needs at least 2 runs (a candidate and a run before it): "
                           f"no run was ingested before {first_ids}")
    if not base:
        raise TracedbError("no run matches the baseline selectors"
                           + (" (--history needs a run before the candidate)" if history is not None else ""))
    return base, cand


def earlier(con: duckdb.DuckDBPyConnection, base: list[RunInfo], n: int, baseline: list[str] = (),
            baseline_labels: list[str] = (), labels: list[str] = ()) -> list[RunInfo]:
    """Up to `n` runs before the first baseline run, from the pool `--history` picks from:
    where the baseline rule looks for the regime when the N runs lie all after a change."""
    if n <= 0 or not base:
        return []
    pool = (_select(con, list(baseline), [*labels, *baseline_labels]) if (baseline or baseline_labels)
            else _select(con, [], list(labels)))
    first = min(order(r) for r in base)
    return [r for r in pool if order(r) < first][-n:]


def order(r: RunInfo) -> tuple:
    return (r.started_at or r.ingested_at, r.run_id)
