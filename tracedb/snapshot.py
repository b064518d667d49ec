"""Opening a fresh catalog snapshot without the lake module: `tracedb query`'s fast path.

`catalog.connect` opens the lake (`tracedb.lake`, whose schema is pyarrow's: with numpy
~110 ms of the 150 ms start-up budget, issue 12 item 6) to tell whether catalog.duckdb is
fresh. For a local warehouse the same answer costs a directory listing per Delta table:
the snapshot records the lake state it was built from (`catalog._lake_state`: the
resolved root and each table's latest log version), and the log folders give the current
one. When both agree, every table exists and no migration is pending, the snapshot is
exactly what `catalog.connect` would open. Otherwise (stale, missing, damaged, a schema-1
or remote warehouse, a migration pending, a table to create) `attach_fresh` says no and
the caller uses `catalog.connect`, which rebuilds, migrates or raises as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb

# The lake's tables (`schema.ALL_TABLES`) and files (`lake.LAKE_JSON`, `catalog.CATALOG`),
# repeated here without pyarrow; tests/test_startup.py keeps them equal. Were one to
# drift, the recorded state would not match and every query would take the slow path.
TABLES = ("nodes", "kernels", "tensors", "allocations", "runtime_calls", "annotations", "steps", "events",
          "rollup_gpu_busy_idle", "rollup_stream_overlap", "rollup_collectives", "runs", "files", "ingest_log", "checksums")
LAKE_JSON = "_tracedb/lake.json"
CATALOG = "catalog.duckdb"


def log_version(table_dir: Path) -> int:
    """The latest Delta version of a table from its log folder listing (as `Lake.versions`)."""
    from tracedb.storage import latest_log_version

    try:
        return latest_log_version(os.listdir(table_dir / "_delta_log"))
    except OSError:
        return -1


def lake_state(root: Path) -> dict:
    """The state `catalog._lake_state` computes for a local lake."""
    return {"root": str(root.resolve()), "versions": {t: log_version(root / t) for t in TABLES}}


def _migrations_done(root: Path) -> bool:
    from tracedb import migrate

    done = {m["number"] for m in json.loads((root / LAKE_JSON).read_text()).get("migrations", [])}
    return all(m.number in done for m in migrate.discover())


def attach_fresh(con: duckdb.DuckDBPyConnection, warehouse: Path) -> bool:
    """ATTACH the warehouse's snapshot read-only as `tracedb` and USE it, when it is fresh;
    False (nothing attached) when `catalog.connect` must decide."""
    root = Path(warehouse)
    path = root / CATALOG
    if not (root / LAKE_JSON).is_file() or not path.is_file():
        return False
    try:
        con.execute("ATTACH '" + str(path).replace("'", "''") + "' AS tracedb (READ_ONLY)")
    except duckdb.Error:
        return False
    try:
        recorded = json.loads(con.execute(
            "SELECT value FROM tracedb.tracedb_meta WHERE key = 'lake_state'").fetchone()[0])
        state = lake_state(root)
        fresh = (recorded == state and min(state["versions"].values()) >= 0 and _migrations_done(root))
    except (duckdb.Error, TypeError, ValueError, OSError, AttributeError):
        fresh = False
    con.execute("USE tracedb" if fresh else "DETACH tracedb")
    return fresh
