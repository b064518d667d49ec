"""Canned queries: one `.sql` file each in `sql/`, metadata in a header comment.

    -- title: Top kernels
    -- description: One line saying what question it answers.
    -- param: run_id VARCHAR NULL Only this run (NULL: every run)
    -- param: limit BIGINT>=0 20 Rows to return

Parameters are DuckDB named placeholders (`$run_id`) bound at execution, never pasted
into the SQL. A parameter's default is a literal, `NULL`, or `REQUIRED`; a numeric type
may carry a lower bound (`BIGINT>0`, `DOUBLE>=0`) and a VARCHAR its allowed values
(`VARCHAR{time,flops}`), checked before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from tracedb import catalog
from tracedb.errors import TracedbError
from tracedb.resources import sql_dir

TYPES = ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP")
DIALECTS = ("duckdb", "spark", "trino", "postgres", "bigquery", "snowflake", "databricks", "clickhouse")
_HEADER = re.compile(r"^--\s*(title|description|param):\s*(.*)$")
# `name TYPE DEFAULT description`; TYPE may carry a lower bound (BIGINT>0, BIGINT>=0) or,
# for VARCHAR, the allowed values (VARCHAR{time,flops,memory}).
_PARAM = re.compile(
    r"^(?P<name>[A-Za-z_]\w*)\s+(?P<type>[A-Z]+)(?:\{(?P<choices>[\w,.-]+)\})?"
    r"(?P<cmp>>=?)?(?P<bound>-?\d+(?:\.\d+)?)?"
    r"\s+(?P<default>'[^']*'|\S+)\s*(?P<doc>.*)$"
)
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


def parse(text: str, name: str, path: Path | None = None) -> CannedQuery:
    q = CannedQuery(name=name, sql=text, path=path)
    where = str(path or name)
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
        else:
            setattr(q, key, value)
    return q


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
    try:
        tree = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise TracedbError(f"SQL does not parse: {str(e).splitlines()[0]}") from e
    return {p.name for t in tree if t for p in t.find_all(exp.Placeholder) if p.name}


def bind(query: CannedQuery, given: dict[str, Any]) -> dict[str, Any]:
    """Validate parameters against the header and return the values to bind."""
    used = placeholders(query.sql)
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


def execute(con: duckdb.DuckDBPyConnection, query: CannedQuery, values: dict[str, Any]) -> pa.Table:
    """Run a query with values from `bind` (validated, typed) on an open connection."""
    try:
        return _plain_numbers(catalog.query_arrow(con, query.sql, values))
    except duckdb.Error as e:
        raise TracedbError(f"{query.name}: {type(e).__name__}: {str(e).splitlines()[0]}") from e


def _plain_numbers(table: pa.Table) -> pa.Table:
    """DuckDB sums BIGINTs into HUGEINT (Arrow decimal128): give integers back as int64
    and other decimals as float64, so CSV/JSON/pandas see numbers."""
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            target = pa.int64() if f.type.scale == 0 else pa.float64()
            try:
                col = table.column(i).cast(target)
            except pa.ArrowInvalid:  # beyond int64: keep the exact decimal
                continue
            table = table.set_column(i, pa.field(f.name, target), col)
    return table


def run_query(spec: str | CannedQuery, params: dict[str, Any] | None = None,
              warehouse: Path | None = None, output: str = "arrow"):
    """Run a canned query (name, .sql path or CannedQuery) on a warehouse.

    Returns an Arrow table; output="pandas" or "polars" converts when installed.
    """
    query = spec if isinstance(spec, CannedQuery) else load(spec)
    values = bind(query, params or {})  # parameter errors first, before the warehouse is opened
    con = catalog.connect(warehouse)
    try:
        table = execute(con, query, values)
    finally:
        con.close()
    if output == "pandas":
        return table.to_pandas()
    if output == "polars":
        import polars

        return polars.from_arrow(table)
    return table


# Trino has no exact median (only approx_percentile; sqlglot writes DuckDB's median() as
# PERCENTILE_CONT, which Trino lacks): the mean of the middle one or two sorted values.
# array_sort puts NULLs last, so positions up to count(x) hold the non-NULL values.
_TRINO_MEDIAN = (
    "CASE WHEN count(__arg__) = 0 THEN NULL ELSE"
    " (CAST(element_at(array_sort(array_agg(__arg__)), (count(__arg__) + 1) / 2) AS DOUBLE)"
    " + CAST(element_at(array_sort(array_agg(__arg__)), count(__arg__) / 2 + 1) AS DOUBLE)) / 2 END"
)


def _for_dialect(tree: exp.Expression, dialect: str) -> exp.Expression:
    """Rewrite DuckDB aggregates that sqlglot would pass to `dialect` unchanged or wrong."""
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


def transpile(query: CannedQuery, dialect: str) -> str:
    """The query's SQL for another engine (header kept), via sqlglot; errors on anything
    sqlglot cannot express in that dialect."""
    if dialect not in DIALECTS:
        raise TracedbError(f"unknown dialect {dialect!r} (one of: {', '.join(DIALECTS)})")
    lines = query.sql.splitlines()
    header = [ln for ln in lines if _HEADER.match(ln.strip())]
    body = "\n".join(ln for ln in lines if not _HEADER.match(ln.strip()))
    try:
        out = [_for_dialect(tree, dialect).sql(dialect=dialect, pretty=True,
                                               unsupported_level=sqlglot.ErrorLevel.RAISE)
               for tree in sqlglot.parse(body, read="duckdb") if tree is not None]
    except sqlglot.errors.SqlglotError as e:
        raise TracedbError(f"{query.name}: cannot transpile to {dialect}: {str(e).splitlines()[0]}") from e
    return "\n".join(header + [";\n".join(out)]) + "\n"
