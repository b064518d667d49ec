"""Canned queries: one `.sql` file each in `sql/`, metadata in a header comment.

    -- title: Top kernels
    -- description: One line saying what question it answers.
    -- param: run_id VARCHAR NULL Only this run (NULL: every run)
    -- param: limit BIGINT>=0 20 Rows to return

Parameters are DuckDB named placeholders (`$run_id`) bound at execution, never pasted
into the SQL. A parameter's default is a literal, `NULL`, or `REQUIRED`; a numeric type
may carry a lower bound (`BIGINT>0`, `DOUBLE>=0`) and a VARCHAR its allowed values
(`VARCHAR{time,flops}`), checked before anything runs.

A line `-- include: metrics/NAME.sql` in a query's body is replaced, when the query is
loaded, by that file of the library's `sql/` folder (its header comments dropped): the one
definition of a metric that a canned query and the ingest-time rollups both run
(`tracedb.rollups`). Every consumer (DuckDB, `--dialect`, the report) sees the expanded text.

A line `-- scope: run_id` (or several names: `-- scope: baseline candidate`) says the
query reads only the rows of the runs those parameters name, when all of them are given:
tracedb then runs it against views over those runs' files alone
(`tracedb.snapshot.scope_to_runs`), so a one-run query costs the same at 10 runs as at
10,000. Leave it out of a query that compares a run with the rest of the fleet.

A line `-- raw-if: step_from step_to` says that while all those parameters have their
defaults the query reads only rollup tables (its raw-row branch is dropped): tracedb then
makes the raw views it names empty, so planning does not bind their thousands of files for
a branch that is not run (1,000 runs: `collectives` fleet-wide in a fresh process spent
most of its 1.38 s there). A default is mostly NULL; a non-NULL one (idle_time_breakdown's
`kernel_wait_ns 30000`) is the value the rollup was computed with, which the query's rollup
branch then tests for (`$kernel_wait_ns = 30000`): any other value reads the raw rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracedb.errors import TracedbError
from tracedb.resources import sql_dir

# duckdb, pyarrow and sqlglot are imported where used (issue 12 item 6): `tracedb queries`
# only parses headers, and running a query needs no sqlglot (transpiling does).
if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from sqlglot import exp

    from tracedb.output import Rows

TYPES = ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP")
DIALECTS = ("duckdb", "spark", "trino", "postgres", "bigquery", "snowflake", "databricks", "clickhouse")
_HEADER = re.compile(r"^--\s*(title|description|param|scope|raw-if):\s*(.*)$")
# `name TYPE DEFAULT description`; TYPE may carry a lower bound (BIGINT>0, BIGINT>=0) or,
# for VARCHAR, the allowed values (VARCHAR{time,flops,memory}).
_PARAM = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)\s+(?P<type>[A-Z]+)(?:\{(?P<choices>[\w,.-]+)\})?"
    r"(?P<cmp>>=?)?(?P<bound>-?\d+(?:\.\d+)?)?"
    r"\s+(?P<default>'[^']*'|\S+)\s*(?P<doc>.*)$"
)
_INCLUDE = re.compile(r"^[ \t]*--[ \t]*include:[ \t]*(\S+)[ \t]*$", re.MULTILINE)
_BOOL = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass
class Param:
    name: str
    type: str
    default: Any = None
    required: bool = False
    description: str = ""
    minimum: float | None = None  # lower bound from `BIGINT>0` / `BIGINT>=0`
    exclusive: bool = False
    choices: tuple[str, ...] = ()  # allowed values from `VARCHAR{a,b,c}` (case-insensitive)

    @property
    def type_text(self) -> str:
        if self.choices:
            return f"{self.type}{{{','.join(self.choices)}}}"
        if self.minimum is None:
            return self.type
        return f"{self.type}{'>' if self.exclusive else '>='}{self.minimum:g}"


@dataclass
class CannedQuery:
    name: str
    sql: str
    title: str = ""
    description: str = ""
    params: list[Param] = field(default_factory=list)
    path: Path | None = None
    has_header: bool = False
    scope: tuple[str, ...] = ()  # `-- scope:` parameters naming the only runs it reads
    raw_if: tuple[str, ...] = ()  # `-- raw-if:` parameters at whose defaults it reads only rollups

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def coerce(param: Param, value: Any) -> Any:
    """A --param string (or Python value) as the parameter's type; TracedbError if it isn't."""
    if value is None or (isinstance(value, str) and value.upper() == "NULL"):
        return None
    value = _convert(param, value)
    if param.choices and str(value).lower() not in param.choices:
        allowed = ", ".join(param.choices[:-1]) + f" or {param.choices[-1]}" if len(param.choices) > 1 else param.choices[0]
        raise TracedbError(f"parameter {param.name} must be {allowed}, got {value!r}")
    if param.minimum is not None and value is not None:
        if value < param.minimum or (param.exclusive and value == param.minimum):
            raise TracedbError(f"parameter {param.name} must be {param.type_text[len(param.type):]}, got {value!r}")
    return value


def _convert(param: Param, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if param.type == "BIGINT":
            return int(value)
        if param.type == "DOUBLE":
            return float(value)
        if param.type == "BOOLEAN":
            return _BOOL[value.lower()]
        if param.type == "TIMESTAMP":
            return datetime.fromisoformat(value)
    except (ValueError, KeyError):
        raise TracedbError(f"parameter {param.name} must be {param.type}, got {value!r}") from None
    return value


def _parse_param(line: str, where: str) -> Param:
    m = _PARAM.match(line.strip())
    if not m or m["type"] not in TYPES or (m["cmp"] is None) != (m["bound"] is None):
        raise TracedbError(f"{where}: bad param header {line!r} (want: name TYPE DEFAULT description; TYPE one of {', '.join(TYPES)}, optionally with a bound like BIGINT>0)")
    p = Param(m["name"], m["type"], description=m["doc"].strip())
    if m["choices"]:
        if m["type"] != "VARCHAR" or m["bound"] is not None:
            raise TracedbError(f"{where}: a value list only fits VARCHAR parameters: {line!r}")
        p.choices = tuple(c.lower() for c in m["choices"].split(",") if c)
    if m["bound"] is not None:
        if m["type"] not in ("BIGINT", "DOUBLE"):
            raise TracedbError(f"{where}: a bound only fits BIGINT or DOUBLE parameters: {line!r}")
        p.minimum, p.exclusive = float(m["bound"]), m["cmp"] == ">"
    raw = m["default"]
    if raw.upper() == "REQUIRED":
        p.required = True
    elif raw.upper() != "NULL":
        p.default = coerce(p, raw.strip("'"))
    return p


def expand_includes(text: str, where: str, _chain: tuple[str, ...] = ()) -> str:
    """The text with each `-- include: metrics/NAME.sql` line replaced by that library file
    (header comments dropped; its own includes expanded, a file including itself an error)."""
    def fragment(m: re.Match) -> str:
        rel = Path(m[1])
        target = sql_dir() / rel
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".sql" or not target.is_file():
            raise TracedbError(f"{where}: include {m[1]!r}: no such file in the SQL library ({sql_dir()})")
        if rel.as_posix() in _chain:
            raise TracedbError(f"{where}: include {m[1]!r} includes itself ({' -> '.join((*_chain, rel.as_posix()))})")
        body = [ln for ln in target.read_text().splitlines() if not _HEADER.match(ln.strip())]
        return expand_includes("\n".join(body).strip("\n"), where, (*_chain, rel.as_posix()))

    return _INCLUDE.sub(fragment, text)


def parse(text: str, name: str, path: Path | None = None) -> CannedQuery:
    where = str(path or name)
    q = CannedQuery(name=name, sql=expand_includes(text, where), path=path)
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.lstrip().startswith("--"):
            break
        m = _HEADER.match(line.strip())
        if not m:
            continue
        q.has_header = True
        key, value = m[1], m[2].strip()
        if key == "param":
            q.params.append(_parse_param(value, where))
        elif key in ("scope", "raw-if"):
            setattr(q, key.replace("-", "_"), tuple(n for n in re.split(r"[\s,]+", value) if n))
        else:
            setattr(q, key, value)
    unknown = [n for n in q.scope if q.param(n) is None or q.param(n).type != "VARCHAR"]
    if unknown:
        raise TracedbError(f"{where}: scope names {', '.join(unknown)}, not a VARCHAR parameter of the query")
    unknown = [n for n in q.raw_if if q.param(n) is None]
    if unknown:
        raise TracedbError(f"{where}: raw-if names {', '.join(unknown)}, not a parameter of the query")
    return q


def scoped_runs(query: CannedQuery, values: dict[str, Any]) -> list[str] | None:
    """The runs a query reads alone with these values (its `-- scope:` parameters, all
    given), or None: it may read every run."""
    runs = [values.get(n) for n in query.scope]
    return runs if runs and None not in runs else None


def rollups_suffice(query: CannedQuery, values: dict[str, Any]) -> bool:
    """Whether the query reads only rollup tables with these values: it has a `-- raw-if:`
    line and every parameter there has its default (NULL, or the value the rollup was
    computed with)."""
    return bool(query.raw_if) and all(values.get(n, query.param(n).default) == query.param(n).default
                                      for n in query.raw_if)


def list_queries() -> list[CannedQuery]:
    return [parse(p.read_text(), p.stem, p) for p in sorted(sql_dir().glob("*.sql"))]


def load(spec: str) -> CannedQuery:
    """A canned query by name, a path to a .sql file, or '-' for stdin."""
    if spec == "-":
        import sys

        return parse(sys.stdin.read(), "stdin")
    path = Path(spec)
    if path.suffix == ".sql" and path.is_file():
        return parse(path.read_text(), path.stem, path)
    canned = sql_dir() / f"{spec}.sql"
    if re.fullmatch(r"[A-Za-z0-9_]+", spec) and canned.is_file():
        return parse(canned.read_text(), spec, canned)
    if path.suffix == ".sql":
        raise TracedbError(f"{spec}: no such file")
    names = ", ".join(q.name for q in list_queries())
    raise TracedbError(f"no canned query named {spec!r} (known: {names}); or give a path to a .sql file, or - for stdin")


def placeholders(sql: str) -> set[str]:
    """Names of the `$name` placeholders sqlglot finds in the SQL."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise TracedbError(f"SQL does not parse: {str(e).splitlines()[0]}") from e
    return {p.name for t in tree if t for p in t.find_all(exp.Placeholder) if p.name}


def _bound_names(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> set[str]:
    """Names of the placeholders DuckDB will bind: its own parser's answer, which costs no
    sqlglot import on the `tracedb query` path (~150 ms, issue 12 item 6). `con`: parse
    with that connection rather than DuckDB's default one (another instance, ~15 ms)."""
    import duckdb

    try:
        return {n for st in (con or duckdb).extract_statements(sql) for n in st.named_parameters}
    except duckdb.Error as e:
        raise TracedbError(f"SQL does not parse: {str(e).splitlines()[0]}") from e


def bind(query: CannedQuery, given: dict[str, Any], con: duckdb.DuckDBPyConnection | None = None) -> dict[str, Any]:
    """Validate parameters against the header and return the values to bind."""
    used = _bound_names(query.sql, con)
    if not query.has_header:
        # Ad-hoc SQL: bind what was given to the placeholders found; numbers stay numbers.
        unknown = set(given) - used
        if unknown:
            raise TracedbError(f"unknown parameter(s) {', '.join(sorted(unknown))}; the SQL uses: {', '.join(sorted(used)) or 'none'}")
        missing = used - set(given)
        if missing:
            raise TracedbError(f"missing parameter(s): {', '.join(sorted(missing))}")
        # Values stay as given: DuckDB casts a string parameter to the column's type where
        # needed, while guessing "007" to be the number 7 would change its meaning.
        return dict(given)
    known = {p.name for p in query.params}
    unknown = set(given) - known
    if unknown:
        raise TracedbError(
            f"{query.name}: unknown parameter(s) {', '.join(sorted(unknown))}; "
            f"it takes: {', '.join(sorted(known)) or 'none'}"
        )
    values = {}
    for p in query.params:
        if p.name in given:
            values[p.name] = coerce(p, given[p.name])
        elif p.required:
            raise TracedbError(f"{query.name}: missing required parameter {p.name} ({p.type}): pass --param {p.name}=...")
        else:
            values[p.name] = p.default
    return {k: v for k, v in values.items() if k in used}


def execute(con: duckdb.DuckDBPyConnection, query: CannedQuery, values: dict[str, Any],
            rows: bool = False, runs: list[str] | None = None) -> pa.Table | Rows:
    """Run a query with values from `bind` (validated, typed) on an open connection.
    rows=True: a `tracedb.output.Rows` when `fetch` allows, without importing pyarrow.
    runs: the data views show only these runs' rows (their files alone are bound), as
    the query's own `-- scope:` does when its run parameters are given."""
    import duckdb

    from tracedb import snapshot

    rollups_only = rollups_suffice(query, values)
    limit = list(runs) if runs else scoped_runs(query, values)
    made = snapshot.scope_to_runs(con, limit, query.sql, rollups_only) if limit or rollups_only else []
    if made is None:
        if runs:  # asked for: never the whole views instead
            raise TracedbError(f"{query.name}: this connection's snapshot does not list its files by run, "
                               "so it cannot be limited to runs (reopen the warehouse: the snapshot is rebuilt)")
        made = []  # the header's own scoping is only a speed-up
    try:
        if rows:
            return fetch(con.sql(query.sql, params=values or None))
        from tracedb import catalog

        return plain_numbers(catalog.query_arrow(con, query.sql, values))
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
    names, data = list(rel.columns), rel.fetchall()
    for i, t in enumerate(rel.types):
        if str(t) == "HUGEINT" and any(v is not None and not _INT64[0] <= v <= _INT64[1] for v in (r[i] for r in data)):
            from decimal import Decimal

            data = [r[:i] + (None if r[i] is None else Decimal(r[i]),) + r[i + 1:] for r in data]
    return Rows(names, kinds, data)


def plain_numbers(table: pa.Table) -> pa.Table:
    """DuckDB sums BIGINTs into HUGEINT (Arrow decimal128): give integers back as int64
    and other decimals as float64, so CSV/JSON/pandas see numbers."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            target = pa.int64() if f.type.scale == 0 else pa.float64()
            try:
                col = table.column(i).cast(target)
            except pa.ArrowInvalid:  # beyond int64: keep the exact decimal
                continue
            table = table.set_column(i, pa.field(f.name, target), col)
    return table


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


def sandbox(con: duckdb.DuckDBPyConnection, warehouse: Path | str) -> duckdb.DuckDBPyConnection:
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

    loc = storage.location(warehouse)
    root = (loc if storage.is_remote(loc) else loc.resolve().as_posix()).rstrip("/") + "/"
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
              warehouse: Path | str | None = None, output: str = "arrow", allow_external: bool = False,
              runs: list[str] | None = None, limits: QueryLimits | None = None):
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

        warehouse = storage.location(warehouse)  # a Path, or the URL of an object-storage lake
        if storage.is_remote(warehouse) or not snapshot.attach_fresh(con, warehouse):
            # the lake decides (pyarrow, ~110 ms); an object-storage lake always goes there
            from tracedb import catalog

            con.close()
            con = catalog.connect(warehouse)
        spill = apply_limits(con, limits)
        if not allow_external:
            sandbox(con, warehouse)
        if runs:
            _check_runs_exist(con, list(runs))
        table = interruptible(con, lambda: execute(con, query, values, rows=output == "rows", runs=runs),
                              (limits or QueryLimits()).timeout_s, query.name)
        if table.num_rows == 0:
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


# How each engine writes a parameter when it is not inlined (`--dialect X` without
# `--param`): its own server-side syntax, so that the printed SQL can be prepared as is.
#   duckdb `$name`, spark/databricks `:name` (named parameter markers, spark.sql(sql, args=)),
#   bigquery `@name` (named query parameters), clickhouse `{name:Type}` (query parameters),
#   postgres `$1` (PREPARE; one number per parameter, reused), snowflake `:1` (numbered bind
#   variables, reused), trino `?` (positional only: EXECUTE ... USING binds each `?` in order,
#   so a parameter used twice is given twice; the header says the order).
NAMED = {"duckdb", "spark", "databricks", "bigquery", "clickhouse"}
NUMBERED = {"postgres": "$", "snowflake": ":"}
POSITIONAL = {"trino"}
_CLICKHOUSE_TYPES = {"VARCHAR": "String", "BIGINT": "Int64", "DOUBLE": "Float64",
                     "BOOLEAN": "Bool", "TIMESTAMP": "DateTime64(6)"}


# Trino has no exact median (only approx_percentile; sqlglot writes DuckDB's median() as
# PERCENTILE_CONT, which Trino lacks): the mean of the middle one or two sorted values.
# array_sort puts NULLs last, so positions up to count(x) hold the non-NULL values.
_TRINO_MEDIAN = (
    "CASE WHEN count(__arg__) = 0 THEN NULL ELSE"
    " (CAST(element_at(array_sort(array_agg(__arg__)), (count(__arg__) + 1) / 2) AS DOUBLE)"
    " + CAST(element_at(array_sort(array_agg(__arg__)), count(__arg__) / 2 + 1) AS DOUBLE)) / 2 END"
)


# Engines that take `WITH x AS [NOT] MATERIALIZED (...)`; the others get a plain CTE (the
# hint only steers DuckDB's planner: rows are the same either way).
_CTE_HINTS = {"duckdb", "postgres"}


def _for_dialect(tree: exp.Expression, dialect: str) -> exp.Expression:
    """Rewrite DuckDB aggregates that sqlglot would pass to `dialect` unchanged or wrong,
    and drop the `[NOT] MATERIALIZED` planner hints of CTEs for engines without them."""
    import sqlglot
    from sqlglot import exp

    if dialect not in _CTE_HINTS:
        for cte in tree.find_all(exp.CTE):
            cte.set("materialized", None)
    if dialect != "trino":
        return tree

    def rewrite(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Median):
            arg = node.this
            template = sqlglot.parse_one(_TRINO_MEDIAN, read="trino")
            return template.transform(
                lambda n: arg.copy() if isinstance(n, exp.Column) and n.name == "__arg__" else n)
        return node

    return tree.transform(rewrite)


def transpile(query: CannedQuery, dialect: str, params: dict[str, Any] | None = None) -> str:
    """The query's SQL for another engine (header kept), via sqlglot; errors on anything
    sqlglot cannot express in that dialect.

    params None: parameters stay placeholders, in the engine's own syntax (see NAMED,
    NUMBERED, POSITIONAL). params a dict (even empty): validated like `bind` and every
    parameter inlined, defaults included, as a literal that sqlglot quotes for the dialect
    (typed: a NULL is CAST(NULL AS <type>)); the header then records the values.
    """
    import sqlglot

    if dialect not in DIALECTS:
        raise TracedbError(f"unknown dialect {dialect!r} (one of: {', '.join(DIALECTS)})")
    lines = query.sql.splitlines()
    header = [ln for ln in lines if _HEADER.match(ln.strip())]
    body = "\n".join(ln for ln in lines if not _HEADER.match(ln.strip()))
    values = None if params is None else bind(query, params)
    try:
        trees = [t for t in sqlglot.parse(body, read="duckdb") if t is not None]
        if values is None:
            trees, note = _placeholders_for(trees, query, dialect)
        else:
            trees, note = _inline(trees, query, values), _bound_note(query, values)
        trees = [_for_dialect(_portable_null_order(t, dialect), dialect) for t in trees]
        out = [t.sql(dialect=dialect, pretty=True, unsupported_level=sqlglot.ErrorLevel.RAISE) for t in trees]
        if values is None and dialect in POSITIONAL:
            out, note = _positional(out, dialect, {p.name for p in query.params} | placeholders(body))
    except sqlglot.errors.SqlglotError as e:
        raise TracedbError(f"{query.name}: cannot transpile to {dialect}: {str(e).splitlines()[0]}") from e
    return "\n".join(header + note + [";\n".join(out)]) + "\n"


def _param_type(query: CannedQuery, name: str) -> str:
    p = query.param(name)
    return p.type if p else "VARCHAR"


def _literal(value: Any, sql_type: str) -> exp.Expression:
    """A value as a SQL literal expression; sqlglot quotes and escapes it per dialect."""
    from sqlglot import exp

    if value is None:
        return exp.cast(exp.null(), exp.DataType.build(sql_type))
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise TracedbError(f"cannot inline the non-finite number {value!r}")
    if isinstance(value, datetime):
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), exp.DataType.build("TIMESTAMP"))
    if isinstance(value, (bool, int, float)):
        return exp.convert(value)
    return exp.Literal.string(str(value))


def _inline(trees: list[exp.Expression], query: CannedQuery, values: dict[str, Any]) -> list[exp.Expression]:
    from sqlglot import exp

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Placeholder) and node.name in values:
            return _literal(values[node.name], _param_type(query, node.name))
        return node

    return [t.transform(swap) for t in trees]


def _bound_note(query: CannedQuery, values: dict[str, Any]) -> list[str]:
    if not values:
        return []
    shown = ", ".join(f"{k}={'NULL' if v is None else repr(v) if isinstance(v, str) else v}" for k, v in values.items())
    return [f"-- inlined: {shown}"]


def _placeholders_for(trees: list[exp.Expression], query: CannedQuery, dialect: str):
    """Rewrite DuckDB's `$name` placeholders into the dialect's own; returns (trees, header note)."""
    from sqlglot import exp

    # Numbered placeholders follow the header's parameter order (then any others, sorted).
    order = [p.name for p in query.params]
    order += sorted({p.name for t in trees for p in t.find_all(exp.Placeholder) if p.name} - set(order))

    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Placeholder) or not node.name:
            return node
        name = node.name
        if dialect in NUMBERED:
            n = order.index(name) + 1
            if dialect == "postgres":
                return exp.Parameter(this=exp.Literal.number(n))
            return exp.Placeholder(this=str(n))
        if dialect == "clickhouse":
            p = query.param(name)
            typ = _CLICKHOUSE_TYPES[p.type if p else "VARCHAR"]
            if p is None or (not p.required and p.default is None):
                typ = f"Nullable({typ})"
            return exp.Placeholder(this=exp.var(name), kind=exp.DataType.build(typ, dialect="clickhouse"))
        if dialect == "bigquery":
            return exp.Parameter(this=exp.var(name))
        return node

    trees = [t.transform(swap) for t in trees]
    if dialect in NUMBERED and order:
        mark = NUMBERED[dialect]
        return trees, [f"-- placeholders: {', '.join(f'{mark}{i} {n}' for i, n in enumerate(order, 1))}"]
    return trees, []


def _positional(statements: list[str], dialect: str, names: set[str]) -> tuple[list[str], list[str]]:
    """`:name` (as generated) to `?`, in the order they appear in the text (which a tree
    walk does not give); the header note lists that order for EXECUTE ... USING."""
    import sqlglot
    from sqlglot.tokens import TokenType

    tokenizer = sqlglot.Dialect.get_or_raise(dialect).tokenizer_class()
    order: list[str] = []
    out = []
    for sql in statements:
        tokens = tokenizer.tokenize(sql)
        pieces, last = [], 0
        for colon, name in zip(tokens, tokens[1:]):
            if colon.token_type == TokenType.COLON and name.start == colon.end + 1 and name.text in names:
                pieces += [sql[last:colon.start], "?"]
                last = name.end + 1
                order.append(name.text)
        out.append("".join(pieces) + sql[last:])
    return out, ([f"-- placeholders, each ? in order: {', '.join(order)}"] if order else [])


def _portable_null_order(tree: exp.Expression, dialect: str) -> exp.Expression:
    """Spell DuckDB's null ordering inside window ORDER BYs as an extra sort key where the
    dialect has no NULLS FIRST/LAST there (BigQuery): `x` becomes `CASE WHEN x IS NULL
    THEN 1 ELSE 0 END, x`, which orders alike everywhere."""
    import sqlglot
    from sqlglot import exp

    d = sqlglot.Dialect.get_or_raise(dialect)
    if d.generator_class.NULL_ORDERING_SUPPORTED is True:
        return tree

    def native_nulls_first(desc: bool) -> bool:
        if d.NULL_ORDERING == "nulls_are_last":
            return False
        return (d.NULL_ORDERING == "nulls_are_small") != desc

    for order in list(tree.find_all(exp.Order)):
        if not isinstance(order.parent, exp.Window):
            continue
        keys = []
        for o in order.expressions:
            desc, nulls_first = bool(o.args.get("desc")), bool(o.args.get("nulls_first"))
            if nulls_first == native_nulls_first(desc):
                keys.append(o)
                continue
            is_null = exp.Case(ifs=[exp.If(this=exp.Is(this=o.this.copy(), expression=exp.null()),
                                           true=exp.Literal.number(1))], default=exp.Literal.number(0))
            keys.append(exp.Ordered(this=is_null, desc=nulls_first, nulls_first=native_nulls_first(nulls_first)))
            keys.append(exp.Ordered(this=o.this, desc=o.args.get("desc"), nulls_first=native_nulls_first(desc)))
        order.set("expressions", keys)
    return tree
