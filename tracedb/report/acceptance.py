"""Accepted changes: a regression stays red until someone accepts it (issue 27).

`tracedb accept RUN [--metric M ...] --note TEXT` records, in the lake's append-only
`acceptances` Delta table (tracedb.schema.ACCEPTANCES, written by `Lake.append_acceptance`),
that a change which started at RUN is the new normal: from then on the report's baseline
for those metrics starts at RUN (evaluate.regime_baseline). `tracedb revoke ID|RUN --note
TEXT` withdraws it with a row of its own, so the table is also the history of who
accepted what and why.

A metric pattern is a metric key (`GPU:0/gpu_kernel_time`), a kind (`gpu_kernel_time`,
every device), or a glob over keys (`GPU:*/kernel/*gemm*`); no pattern accepts every
metric of the run.
"""

from __future__ import annotations

import fnmatch
import getpass
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tracedb.errors import TracedbError


@dataclass
class Acceptance:
    acceptance_id: str
    run_id: str
    metrics: list[str] = field(default_factory=list)
    note: str = ""
    accepted_by: str = ""
    accepted_at: datetime | None = None

    def covers(self, key: str, kind: str) -> bool:
        """Whether this acceptance names the metric (key, e.g. GPU:0/kernel/x; its kind)."""
        return not self.metrics or any(p == kind or p == key or fnmatch.fnmatchcase(key, p) for p in self.metrics)

    def text(self, code=str, words=str) -> str:
        """'accepted at RUN (metrics) by WHO on WHEN: NOTE'; `code` formats the run and
        metric names, `words` the person and the note (the Markdown report escapes them)."""
        when = self.accepted_at.strftime("%Y-%m-%d %H:%M UTC") if self.accepted_at else "?"
        what = ", ".join(map(code, self.metrics)) if self.metrics else "every metric"
        return f"accepted at {code(self.run_id)} ({what}) by {words(self.accepted_by)} on {when}: {words(self.note)}"


def live(rows: list[dict]) -> list[Acceptance]:
    """The acceptances not revoked, oldest first, from the table's rows."""
    revoked = {r["acceptance_id"] for r in rows if r["action"] == "revoke"}
    out = [Acceptance(r["acceptance_id"], r["run_id"], list(r["metrics"] or []), r["note"] or "",
                      r["accepted_by"] or "", r["accepted_at"])
           for r in rows if r["action"] == "accept" and r["acceptance_id"] not in revoked]
    return sorted(out, key=lambda a: (a.accepted_at or datetime.min.replace(tzinfo=timezone.utc), a.acceptance_id))


def read(con) -> list[Acceptance]:
    """The live acceptances of a snapshot connection (catalog.connect)."""
    from tracedb import catalog

    return live(catalog.query_arrow(con, "SELECT * FROM acceptances").to_pylist())


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return os.environ.get("USER") or "unknown"


def _check_note(note: str) -> str:
    note = (note or "").strip()
    if not note:
        raise TracedbError("--note is required: say why (e.g. 'fused AdamW: more kernel time, fewer steps')")
    return note


def accept(lake, run_id: str, metrics: list[str], note: str, by: str | None = None) -> Acceptance:
    """Record an acceptance of the change that started at `run_id`; call under the lock."""
    note = _check_note(note)
    if run_id not in lake.published():
        raise TracedbError(f"accept: no run named {run_id!r} in the warehouse")
    bad = [m for m in metrics if not m.strip()]
    if bad:
        raise TracedbError("accept: --metric must not be empty (a key like GPU:0/gpu_kernel_time, a kind, or a glob)")
    acc = Acceptance(uuid.uuid4().hex[:12], run_id, [m.strip() for m in metrics], note, _who(by),
                     datetime.now(timezone.utc))
    lake.append_acceptance({"acceptance_id": acc.acceptance_id, "action": "accept", "run_id": run_id,
                            "metrics": acc.metrics, "note": note, "accepted_by": acc.accepted_by,
                            "accepted_at": acc.accepted_at})
    return acc


def revoke(lake, target: str, note: str, by: str | None = None) -> list[Acceptance]:
    """Withdraw the live acceptance with id `target`, or every live one at run `target`;
    call under the lock. Returns what was withdrawn."""
    note = _check_note(note)
    current = live(lake.read_table("acceptances").to_pylist())
    gone = [a for a in current if target in (a.acceptance_id, a.run_id)]
    if not gone:
        ids = ", ".join(f"{a.acceptance_id} ({a.run_id})" for a in current) or "none"
        raise TracedbError(f"revoke: no live acceptance with id or run {target!r} (live: {ids})")
    now = datetime.now(timezone.utc)
    for a in gone:
        lake.append_acceptance({"acceptance_id": a.acceptance_id, "action": "revoke", "run_id": a.run_id,
                                "metrics": a.metrics, "note": note, "accepted_by": _who(by), "accepted_at": now})
    return gone
