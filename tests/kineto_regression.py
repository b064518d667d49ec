"""Per-table sorted-row digests of what the JSON readers (Kineto, Chrome trace) make of
every Kineto / Chrome-trace file in tests/data: a PAST-OUTPUT regression check, not an
oracle (the independent oracles read the raw JSON: tests/rawtrace.py,
tests/test_kineto_raw_oracle.py).

`data/json_readers_before_session9.json` holds the digests the readers of main ecdab84
(the Kineto reader with its fast and general paths) gave, recorded before the reader was
rebuilt as one code path. Rows are compared as sets of Python values (sorted reprs), so a
change of batch order or size does not matter; every value (timestamps to the ns) does.
Regenerate only for a deliberate change of rows, and say why in the commit:

    PYTHONPATH=$PWD python tests/kineto_regression.py > tests/data/json_readers_before_session9.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
RECORD = DATA / "json_readers_before_session9.json"


def json_traces() -> list[Path]:
    """Every Kineto / Chrome-trace file under tests/data (the frozen warehouses aside)."""
    from tracedb.formats import detect

    out = []
    for p in sorted(DATA.rglob("*")):
        if not p.is_file() or "frozen_warehouse" in p.as_posix() or not p.name.endswith((".json", ".json.gz")):
            continue
        try:
            if detect(p).NAME in ("kineto", "chrome_trace"):
                out.append(p)
        except Exception:  # noqa: BLE001 - run.json labels and the like
            continue
    return out


def key(p: Path) -> str:
    return p.relative_to(DATA).as_posix()


def read_tables(path: Path) -> tuple[dict[str, list] | None, object]:
    """What the reader `formats.detect` picks makes of the file: ({table: [batches]},
    its ReadContext), or (None, the error's message)."""
    from tracedb.errors import TraceFormatError
    from tracedb.formats import detect, read
    from tracedb.formats.base import ReadContext

    ctx = ReadContext(run_id="r", source_file=path.name)
    tables: dict[str, list] = {}
    try:
        for table, batch in read(path, ctx, detect(path).NAME):
            tables.setdefault(table, []).append(batch)
    except TraceFormatError as e:
        return None, str(e)
    return tables, ctx


def sorted_digest(path: Path, read: tuple | None = None) -> dict:
    """{table: "rows:sha"} over the sorted reprs of the rows, plus format, metadata and
    warnings (or the error). `read`: the file's `read_tables`, when made already."""
    import pyarrow as pa

    tables, ctx = read or read_tables(path)
    if tables is None:
        return {"error": ctx}
    out = {}
    for t, bs in sorted(tables.items()):
        rows = sorted(repr(sorted(r.items())) for r in pa.Table.from_batches(bs).to_pylist())
        out[t] = f"{len(rows)}:" + hashlib.sha256("\n".join(rows).encode()).hexdigest()[:24]
    out["format"] = ctx.format
    out["metadata"] = hashlib.sha256(json.dumps(ctx.metadata, sort_keys=True, default=str).encode()).hexdigest()[:24]
    out["warnings"] = json.dumps(ctx.warnings, sort_keys=True)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent.parent))
    print(json.dumps({key(p): sorted_digest(p) for p in json_traces()}, indent=1, sort_keys=True))
