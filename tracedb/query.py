"""Running canned queries and ad-hoc SQL on a warehouse: the sandbox, limits, Ctrl-C, and
rows out. What a query is (headers, includes, parameters, rollups) is the SQL library's,
`tracedb.sqllib`; printing it for other engines is `tracedb.dialects`.

A query runs on the text `CannedQuery.sql_for` gives for its values: each metric it
includes read from the metric's rollup where that serves the values, else from raw rows.
A query whose header says it reads only the runs its parameters name (`-- scope:`) runs
against views over those runs' files alone (`tracedb.snapshot.scope_to_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tracedb.errors import TracedbError
from tracedb.output import plain_numbers
from tracedb.sqllib import CannedQuery, bind, bound_names, load, scoped_runs

# duckdb and pyarrow are imported where used (issue 12 item 6): `tracedb queries` only
# parses headers.
if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb import storage
    from tracedb.output import Rows


def execute(con: duckdb.DuckDBPyConnection, query: CannedQuery, values: dict[str, Any],
            rows: bool = False, runs: list[str] | None = None, rollups: bool = True,
            sink: Callable[[pa.Table | Rows], None] | None = None) -> pa.Table | Rows | int:
    """Run a query with values from `bind` (validated, typed) on an open connection.
    rows=True: a `tracedb.output.Rows` when `fetch` allows, without importing pyarrow.
    runs: the data views show only these runs' rows (their files alone are bound), as
    the query's own `-- scope:` does when its run parameters are given.
    rollups=False: every metric from raw rows, never its rollup (`CannedQuery.sql_for`).
    sink: given, the result goes to it a batch at a time (`stream`) and the row count is
    returned."""
    import duckdb

    from tracedb import snapshot

    sql = query.sql_for(values, rollups)
    if sql != query.sql:  # a rollup read: the raw text's other parameters are not in it
        values = {k: v for k, v in values.items() if k in bound_names(sql, con)}
    limit = list(runs) if runs else scoped_runs(query, values)
    made = snapshot.scope_to_runs(con, limit, sql) if limit else []
    if made is None:
        if runs:  # asked for: never the whole views instead
            raise TracedbError(f"{query.name}: this connection's snapshot does not list its files by run, "
                               "so it cannot be limited to runs (reopen the warehouse: the snapshot is rebuilt)")
        made = []  # the header's own scoping is only a speed-up
    try:
        if sink is not None:
            return stream(con, sql, values, rows, sink)
        if rows:
            return fetch(con.sql(sql, params=values or None))
        from tracedb import catalog

        return plain_numbers(catalog.query_arrow(con, sql, values))
    except duckdb.PermissionException as e:
        raise TracedbError(
            f"{query.name}: the sandbox refused it: {str(e).splitlines()[0].removeprefix('Permission Error: ')} "
            "(queries read only the warehouse's data; --allow-external lifts this)"
        ) from e
    except duckdb.OutOfMemoryException as e:
        which = ("temp-space limit: --temp-limit" if "max_temp_directory_size" in str(e)
                 else "memory limit: --memory-limit")
        raise TracedbError(f"{query.name}: {str(e).splitlines()[0]} (over the {which}; "
                           "QueryLimits in Python)") from e
    except duckdb.Error as e:
        raise TracedbError(f"{query.name}: {type(e).__name__}: {str(e).splitlines()[0]}") from e
    finally:
        snapshot.unscope(con, made)


# Rows a sink is handed at a time (`stream`): ~10-30 MB of Python rows of a dozen columns.
BATCH_ROWS = 100_000


def stream(con: duckdb.DuckDBPyConnection, sql: str, values: dict[str, Any], rows: bool,
           sink: Callable[[pa.Table | Rows], None]) -> int:
    """Hand a query's result to `sink` a batch at a time (of `BATCH_ROWS`; always at least
    one, maybe empty, so that a writer learns the columns); returns the rows. DuckDB
    streams the result, so memory is a batch's, not the result's. Batches are `Rows` when
    rows=True and `fetch` would give Rows, else Arrow tables (`plain_numbers`)."""
    rel = con.sql(sql, params=values or None)
    if rel is None:  # a statement without a result
        import pyarrow as pa

        sink(pa.table({}))
        return 0
    types = [str(t) for t in rel.types]
    kinds = [_kind(t) for t in types]
    count = 0
    if rows and None not in kinds:
        from tracedb.output import Rows

        names = list(rel.columns)
        cursor = con.execute(sql, values or None)  # (a relation no longer fetches in parts)
        while True:
            data = cursor.fetchmany(BATCH_ROWS)
            if data or not count:
                sink(Rows(names, kinds, _wide_hugeints(types, data)))
            count += len(data)
            if len(data) < BATCH_ROWS:
                return count
    import pyarrow as pa

    reader = rel.to_arrow_reader(BATCH_ROWS)
    batches = iter(reader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (OSError, pa.ArrowException) as e:  # DuckDB's error after the first batches, as Arrow hands it on
            raise _duckdb_error(str(e)) from None
        if batch.num_rows or not count:
            sink(plain_numbers(pa.Table.from_batches([batch])))
        count += batch.num_rows
    if not count:
        sink(plain_numbers(reader.schema.empty_table()))
    return count


# DuckDB types whose Python values (fetchall) print exactly as their Arrow values do after
# `plain_numbers`, and their `Rows` kind. Others take the Arrow path: DECIMAL (Arrow's
# cast to float64 rounds differently from float(Decimal): 2,136 of 21,000 values), FLOAT
# (float32 digits), temporal types, structs, maps, BLOB, UUID, ENUM, lists of HUGEINT.
_KINDS = {"VARCHAR": "text", "BOOLEAN": "bool", "DOUBLE": "float",
          **dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
                           "UINTEGER", "UBIGINT", "HUGEINT"), "int")}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _kind(duckdb_type: str) -> str | None:
    if duckdb_type.endswith("[]"):
        inner = duckdb_type[:-2]
        return "list" if inner != "HUGEINT" and _kind(inner) is not None else None
    return _KINDS.get(duckdb_type)


def fetch(rel) -> pa.Table | Rows:
    """A DuckDB relation's rows as `tracedb.output.Rows` when every column has a plain
    kind (no pyarrow import), else as Arrow (`plain_numbers`). HUGEINT, which Arrow gets
    as decimal128(38, 0) and `plain_numbers` makes int64, stays int; a column with a
    value beyond int64 becomes Decimal throughout, as `plain_numbers` leaves it."""
    from tracedb.output import Rows

    kinds = [_kind(str(t)) for t in rel.types] if rel is not None else [None]
    if None in kinds:  # as catalog.query_arrow
        import pyarrow as pa

        if rel is None:  # a statement without a result
            return pa.table({})
        return plain_numbers((getattr(rel, "to_arrow_table", None) or rel.arrow)())
    return Rows(list(rel.columns), kinds, _wide_hugeints([str(t) for t in rel.types], rel.fetchall()))


def _duckdb_error(message: str) -> Exception:
    """The DuckDB exception an Arrow reader's error text stands for ("Out of Memory Error:
    ...", "Invalid Input Error: ..."), so that `execute` words it as it words the others."""
    import duckdb

    kinds = {"Out of Memory Error": duckdb.OutOfMemoryException, "Permission Error": duckdb.PermissionException,
             "INTERRUPT Error": duckdb.InterruptException}
    kind = next((k for prefix, k in kinds.items() if message.startswith(prefix)), duckdb.Error)
    return kind(message)


def _wide_hugeints(types: list[str], data: list[tuple]) -> list[tuple]:
    """The rows with each HUGEINT column that holds a value beyond int64 made Decimal
    throughout, as `plain_numbers` leaves such a column."""
    for i, t in enumerate(types):
        if t == "HUGEINT" and any(v is not None and not _INT64[0] <= v <= _INT64[1] for v in (r[i] for r in data)):
            from decimal import Decimal

            data = [r[:i] + (None if r[i] is None else Decimal(r[i]),) + r[i + 1:] for r in data]
    return data


# Statement kinds user SQL may run in the sandbox: queries (SELECT, WITH, FROM-first,
# VALUES, DESCRIBE, SHOW, SUMMARIZE, UNPIVOT all parse as SELECT), and EXPLAIN of a query.
# Everything else DuckDB's parser knows (tests/test_sandbox_statements.py names a statement
# of each type) needs --allow-external: COPY, EXPORT, ATTACH, INSTALL/LOAD, SET, PRAGMA,
# CALL, CREATE, INSERT, PIVOT (MULTI: it creates types first), ...
_SANDBOX_STATEMENTS = ("SELECT", "EXPLAIN")


def check_statements(query: CannedQuery, con: duckdb.DuckDBPyConnection | None = None) -> None:
    """Refuse anything but queries (DuckDB's own parser says what each statement is).

    EXPLAIN ANALYZE runs the statement it explains (`EXPLAIN ANALYZE COPY ... TO` writes
    the file), so an EXPLAIN passes only when the statement it explains is itself a query.
    A statement whose type DuckDB's Python API cannot name (`UPDATE EXTENSIONS`) is refused."""
    import duckdb

    try:
        statements = (con or duckdb).extract_statements(query.sql)
    except duckdb.Error as e:
        raise TracedbError(f"{query.name}: SQL does not parse: {str(e).splitlines()[0]}") from e
    for st in statements:
        kind = _kind_of(st)
        if kind == "EXPLAIN":
            inner = _explained(st.query, con)
            if inner is not None and inner != "SELECT":
                raise _refused(query, f"EXPLAIN of {inner} statements")
        if kind not in _SANDBOX_STATEMENTS:
            raise _refused(query, f"{kind} statements")


def _kind_of(statement) -> str:
    """A parsed statement's type name; for a type newer than DuckDB's Python enum
    (`UPDATE EXTENSIONS`: "29 is not a valid StatementType") the number."""
    try:
        return statement.type.name
    except ValueError as e:
        return f"type {str(e).split()[0]}"


def _refused(query: CannedQuery, what: str) -> TracedbError:
    return TracedbError(
        f"{query.name}: {what} are not allowed: queries run sandboxed, read-only, "
        "on the warehouse's data (write results with --format/--output; "
        "--allow-external, or allow_external=True, lifts the sandbox)")


def _explained(sql: str, con: duckdb.DuckDBPyConnection | None) -> str | None:
    """The type of the statement an EXPLAIN statement explains (`EXPLAIN [ANALYZE]
    stmt`, `EXPLAIN (options) stmt`), by DuckDB's tokenizer and parser; "unknown" when
    it cannot be told (refused)."""
    import duckdb

    tokens = [(pos, kind) for pos, kind in duckdb.tokenize(sql) if kind != duckdb.token_type.comment]

    def word(i: int) -> str:
        pos = tokens[i][0]
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        return sql[pos:end].strip().upper()

    i = 1  # tokens[0] is EXPLAIN
    if i < len(tokens) and word(i) in ("ANALYZE", "ANALYSE"):
        i += 1
    elif i < len(tokens) and word(i) == "(":
        depth = 0
        while i < len(tokens):
            depth += {"(": 1, ")": -1}.get(word(i), 0)
            i += 1
            if depth == 0:
                break
    if i >= len(tokens):
        return "unknown"
    try:
        inner = (con or duckdb).extract_statements(sql[tokens[i][0]:])
    except (duckdb.Error, ValueError):
        return "unknown"
    if len(inner) != 1:
        return "unknown"
    kind = _kind_of(inner[0])
    if kind == "EXPLAIN":
        return _explained(inner[0].query, con) or "EXPLAIN"
    return kind


def sandbox(con: duckdb.DuckDBPyConnection, warehouse: Path | str | storage.Storage) -> duckdb.DuckDBPyConnection:
    """Lock an open catalog connection to the warehouse's own files.

    DuckDB then reads only under the warehouse folder (`allowed_directories`: the
    snapshot's views list absolute paths of the lake's files), refuses every other file,
    URL, extension and database (`enable_external_access = false`), and no later SET can
    undo it (`lock_configuration`). Extensions the views need must be loaded before this.
    A lake on object storage: only URLs under its prefix (`s3://bucket/prefix/`), read
    through the fsspec filesystem `catalog.connect` registered; its snapshot, a local
    cache file, is attached before the lock and stays readable.
    """
    from tracedb import storage

    root = storage.open_storage(warehouse).home().rstrip("/") + "/"
    con.execute("SET allowed_directories = ?", [[root]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


@dataclass
class QueryLimits:
    """What one query may use: `tracedb.Warehouse(path, limits=QueryLimits(...))` for
    `Warehouse.sql` / `Warehouse.query`, the CLI's --timeout / --memory-limit / --temp-limit.

    timeout_s: stop the query after this many seconds (TracedbError); None: no limit.
    memory_limit: DuckDB's memory_limit for the query, a size ('4GB', '512MiB') or a share
    of the machine's RAM ('50%'); None: DuckDB's default, 80% of RAM.
    temp_limit: at most this much spilled to disk (DuckDB's max_temp_directory_size);
    None: DuckDB's default, 90% of the free space.
    Spilled data goes to a private folder under the system's temporary folder ($TMPDIR),
    removed after the query, never to the working folder (DuckDB's default `.tmp`)."""

    timeout_s: float | None = None
    memory_limit: str | None = None
    temp_limit: str | None = None


def apply_limits(con: duckdb.DuckDBPyConnection, limits: QueryLimits | None) -> Path:
    """Set a connection's memory and temp-space limits (before `sandbox` locks them);
    returns the private spill folder (created by DuckDB only if it spills) to remove after."""
    import os
    import secrets
    import tempfile

    import duckdb

    limits = limits or QueryLimits()
    spill = Path(tempfile.gettempdir()) / f"tracedb-query-{os.getpid()}-{secrets.token_hex(4)}"
    settings = [("temp_directory", str(spill), None), ("memory_limit", limits.memory_limit, "memory limit"),
                ("max_temp_directory_size", limits.temp_limit, "temp limit")]
    for name, value, what in settings:
        if value is None:
            continue
        try:
            con.execute(f"SET {name} = ?", [str(value)])
        except duckdb.Error:
            raise TracedbError(f"{what} {value!r} is not a size (e.g. 4GB, 512MiB"
                               f"{', 50%' if name == 'memory_limit' else ''})") from None
    return spill


def interruptible(con: duckdb.DuckDBPyConnection, work, timeout_s: float | None, name: str):
    """`work()` (DuckDB calls on `con`) in a worker thread, so that the calling thread stays
    able to take Ctrl-C: a DuckDB call in the main thread holds off Python's signal handler
    until it returns. On Ctrl-C (KeyboardInterrupt) or at the timeout the query is
    interrupted (`con.interrupt()`, DuckDB stops within milliseconds) and the
    KeyboardInterrupt re-raised, or a TracedbError raised. No signal handler is installed.
    The wait is on an Event, not Thread.join: a join cut short by Ctrl-C marks the thread
    stopped while it still runs (CPython's bpo-45274 handling)."""
    import threading
    import time

    box: dict = {}
    done = threading.Event()

    def run():
        try:
            box["value"] = work()
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            box["error"] = e
        finally:
            done.set()

    deadline = time.monotonic() + timeout_s if timeout_s else None
    threading.Thread(target=run, name="tracedb-query", daemon=True).start()
    try:
        while not done.wait(0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))):
            if deadline is not None and time.monotonic() >= deadline:
                _stop(con, done)
                raise TracedbError(f"{name}: stopped after {timeout_s:g} s, the query time limit "
                                   "(--timeout SECONDS, 0 for none; QueryLimits.timeout_s in Python)")
    except KeyboardInterrupt:
        _stop(con, done)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _stop(con: duckdb.DuckDBPyConnection, done) -> None:
    """Interrupt the query and wait (a few seconds at most) for its thread to return."""
    import time

    until = time.monotonic() + 5
    while not done.is_set() and time.monotonic() < until:
        try:
            con.interrupt()
            done.wait(0.05)
        except KeyboardInterrupt:  # Ctrl-C again while stopping: keep stopping
            continue


def run_query(spec: str | CannedQuery, params: dict[str, Any] | None = None,
              warehouse: Path | str | storage.Storage | None = None, output: str = "arrow", allow_external: bool = False,
              runs: list[str] | None = None, limits: QueryLimits | None = None,
              sink: Callable[[pa.Table | Rows], None] | None = None):
    """Run a canned query (name, .sql path or CannedQuery) on a warehouse.

    The query runs sandboxed (`sandbox`, `check_statements`): it reads only the
    warehouse's data, writes no file and attaches no database, unless allow_external.
    Returns an Arrow table; output="pandas" or "polars" converts when installed;
    output="rows" gives `tracedb.output.Rows` where `fetch` allows (what
    `tracedb.output.write` prints without importing pyarrow: the CLI's fast path).
    runs: limit the data views (nodes, kernels, ...; not runs, files, ingest_log) to
    these runs, whose files alone are then bound: ad-hoc SQL about a few runs costs the
    same however many runs the warehouse holds. Each must exist.
    limits: time, memory and temp-space limits (`QueryLimits`); Ctrl-C (KeyboardInterrupt)
    stops the query within a second either way.
    sink: a callable handed the result a batch at a time (`stream`: Arrow tables, or Rows
    with output="rows"), e.g. a `tracedb.output.Writer`; the row count is returned. Memory
    is then a batch's, however many rows the result has.
    """
    import shutil

    import duckdb

    from tracedb import snapshot

    query = spec if isinstance(spec, CannedQuery) else load(spec)
    # One DuckDB instance parses, then opens the snapshot (each instance costs ~15 ms).
    con = duckdb.connect()
    spill = None
    try:
        con.execute("SET enable_progress_bar = false")  # DuckDB would print it into the API user's stdout
        if not allow_external:
            check_statements(query, con)
        values = bind(query, params or {}, con)  # parameter errors first, before the warehouse is opened
        from tracedb import storage

        warehouse = storage.open_storage(warehouse)  # `Warehouse` hands its own down
        folder = warehouse.local_path()
        if folder is None or not snapshot.attach_fresh(con, folder):
            # the lake decides (pyarrow, ~110 ms); an object-storage lake always goes there
            from tracedb import catalog

            con.close()
            con = catalog.connect(warehouse)
        spill = apply_limits(con, limits)
        if not allow_external:
            sandbox(con, warehouse)
        if runs:
            _check_runs_exist(con, list(runs))
        if sink is not None and output not in ("arrow", "rows"):
            raise TracedbError(f"output={output!r} with a sink: batches are arrow or rows")
        table = interruptible(con, lambda: execute(con, query, values, rows=output == "rows", runs=runs, sink=sink),
                              (limits or QueryLimits()).timeout_s, query.name)
        if (table if sink is not None else table.num_rows) == 0:
            _check_run_ids(con, values)
    finally:
        con.close()
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)
    if output == "pandas":
        return to_pandas(table)
    if output == "polars":
        import polars

        return polars.from_arrow(table)
    return table


# Parameters that name a run: an empty result for an id the warehouse lacks is a typo.
RUN_PARAMS = ("run_id", "run_a", "run_b", "baseline", "candidate")


def _unknown_runs(con: duckdb.DuckDBPyConnection, runs: list[str]) -> list[str]:
    known = {r for (r,) in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)", [runs]).fetchall()}
    return [r for r in runs if r not in known]


def _check_runs_exist(con: duckdb.DuckDBPyConnection, runs: list[str]) -> None:
    missing = _unknown_runs(con, runs)
    if missing:
        raise TracedbError(f"no run {', '.join(map(repr, missing))} in the warehouse (--run; `tracedb runs` lists them)")


def _check_run_ids(con: duckdb.DuckDBPyConnection, values: dict[str, Any]) -> None:
    for name in RUN_PARAMS:
        run = values.get(name)
        if isinstance(run, str) and _unknown_runs(con, [run]):
            raise TracedbError(f"no run {run!r} in the warehouse (parameter {name}; `tracedb runs` lists them)")


def to_pandas(table: pa.Table):
    """A pandas DataFrame whose integer and boolean columns stay integer and boolean where
    they hold NULLs (pandas' nullable Int64 / boolean), instead of turning float."""
    import pyarrow as pa
    import pandas as pd

    nullable = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
                pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype()}
    return table.to_pandas(types_mapper=nullable.get)


