"""The SQL library: canned queries and metrics as `.sql` files, their headers, includes
and parameter binding. Nothing here runs SQL (`tracedb.query` does); duckdb is imported
only to ask its parser which placeholders a text binds, and sqlglot only by `placeholders`.

Canned queries live one a file in `sql/`, metadata in a header comment:

    -- title: Top kernels
    -- description: One line saying what question it answers.
    -- param: run_id VARCHAR NULL Only this run (NULL: every run)
    -- param: limit BIGINT>=0 20 Rows to return
    -- scope: run_id

Parameters are DuckDB named placeholders (`$run_id`) bound at execution, never pasted
into the SQL. A parameter's default is a literal, `NULL`, or `REQUIRED`; a numeric type
may carry a lower bound (`BIGINT>0`, `DOUBLE>=0`) and a VARCHAR its allowed values
(`VARCHAR{time,flops}`), checked before anything runs. `-- scope: run_id` (or several
names: `-- scope: baseline candidate`) says the query reads only the rows of the runs
those parameters name, when all of them are given (`tracedb.snapshot.scope_to_runs`);
leave it out of a query that compares a run with the rest of the fleet.

Metrics live in `sql/metrics/`: the one definition of a figure, from raw rows, that
canned queries take in with a line `-- include: metrics/NAME.sql` (replaced by the file,
its header dropped; the metric's parameters become the query's, after its own, unless the
query declares them itself, alike) and that the ingest may store per run. A metric stored per run
declares it in its own header, and nowhere else:

    -- rollup: rollup_collectives
    -- columns: run_id device name instances ...
    -- rollup-filter: run_id device
    -- rollup-where: kind IS NOT DISTINCT FROM $kind
    -- reads: kernels
    -- needs: kernels

`rollup` names the table that holds the metric's rows for every run (the table
`rollup_<metric>` is written at ingest by the metric of that name, `tracedb.rollups`; a
metric may also name a table that a wider metric writes, as idle_gaps does
rollup_stream_time), `columns` the metric's output columns (a test checks them against
the metric's rows). The rollup serves a parameter as a filter on its rows:
`rollup-filter: p` is `($p IS NULL OR p = $p)`; `rollup-where:` any condition (naming
parameters or not: `changes IS NOT NULL` picks a wider table's rows of this metric).
Every other parameter is served at its default only: the value the ingest computed the
rollup with. So wherever the metric is included (or run itself), `CannedQuery.sql_for`
reads the rollup when the values allow and the metric's SQL on raw rows otherwise; the
two give the same rows (tests/test_metric_rollups.py runs both). `reads` names the source
tables the metric reads (the ingest hands the rollup writer those); `needs` those it
must have rows of to give any row (`a|b`: either; default: all it reads), else the
writer skips it. `rollup-sql: metrics/streamed/NAME.sql` (stream_overlap, stream_time,
collectives): the ingest computes the rollup with that text instead, DuckDB-only SQL
giving the same rows in bounded memory; the declaration stays the metric's file, the one
other engines get.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tracedb.errors import TracedbError
from tracedb.resources import sql_dir

if TYPE_CHECKING:
    import duckdb

TYPES = ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP")
_KEYS = ("title", "description", "param", "scope", "rollup", "columns", "rollup-filter", "rollup-where", "reads",
         "needs", "raw-if", "rollup-sql")
_HEADER = re.compile(rf"^--\s*({'|'.join(_KEYS)}):\s*(.*)$")
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
    line: str = ""  # its header line, as written (in the query's file or the metric's)

    @property
    def type_text(self) -> str:
        if self.choices:
            return f"{self.type}{{{','.join(self.choices)}}}"
        if self.minimum is None:
            return self.type
        return f"{self.type}{'>' if self.exclusive else '>='}{self.minimum:g}"


@dataclass(frozen=True)
class Rollup:
    """Where a metric's rows are stored per run (`-- rollup:`), and which parameter values
    that table serves (see the module docstring)."""

    table: str
    columns: tuple[str, ...]
    where: tuple[str, ...]  # conditions on the table's rows, ANDed
    serves: frozenset[str]  # parameters the conditions name: served at any value

    def select(self) -> str:
        """The metric's rows read from the table, for the values the conditions bind."""
        where = " AND ".join(f"({w})" for w in self.where)
        return f"SELECT {', '.join(self.columns)} FROM {self.table}" + (f" WHERE {where}" if where else "")


@dataclass
class CannedQuery:
    name: str
    sql: str  # the whole text on raw rows: every include expanded to the metric's SQL
    title: str = ""
    description: str = ""
    params: list[Param] = field(default_factory=list)
    path: Path | None = None
    has_header: bool = False
    scope: tuple[str, ...] = ()  # `-- scope:` parameters naming the only runs it reads
    rollup: Rollup | None = None  # a metric stored per run
    reads: tuple[str, ...] = ()  # `-- reads:` source tables
    needs: tuple[tuple[str, ...], ...] = ()  # `-- needs:` each entry: rows of one of these tables
    text: str = ""  # the file as written (includes not expanded)
    rollup_sql: str = ""  # `-- rollup-sql:` the text the ingest computes the rollup with ("": `sql`)
    _variants: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # texts by choice

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def served(self, values: dict[str, Any]) -> bool:
        """Whether the rollup holds this metric's rows for these values: every parameter it
        does not filter on has its default (the value the ingest computed it with)."""
        return self.rollup is not None and all(
            values.get(p.name, p.default) == p.default for p in self.params if p.name not in self.rollup.serves)

    def sql_for(self, values: dict[str, Any], rollups: bool = True) -> str:
        """The text to run with these values: the metric itself, or each metric it
        includes, read from its rollup where the rollup serves the values, else computed
        from raw rows (`sql`; always with rollups=False). Both give the same rows; the
        rollup costs a few files."""
        if not rollups:
            return self.sql
        if self.served(values):
            return self.rollup.select()
        if "included" not in self._variants:
            self._variants["included"] = included(self.text, self.name) if self.text else []
        key = tuple(sorted({m.name for m in self._variants["included"] if m.served(values)}))
        if not key:
            return self.sql
        if key not in self._variants:
            self._variants[key] = expand_includes(self.text, str(self.path or self.name),
                                                  choose=lambda m: m.name in key)
        return self._variants[key]


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


def _header(text: str, name: str, path: Path | None) -> CannedQuery:
    """A file's header fields (its includes not expanded)."""
    where = str(path or name)
    q = CannedQuery(name=name, sql="", path=path, text=text)
    lines: dict[str, list[str]] = {}
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
            q.params[-1].line = line.strip()
        elif key in ("title", "description"):
            setattr(q, key, value)
        else:
            lines.setdefault(key, []).append(value)
    if "raw-if" in lines:
        raise TracedbError(f"{where}: `-- raw-if:` is gone: the metric's own header declares its rollup "
                           "(`-- rollup:`, see tracedb.sqllib)")
    words = {k: tuple(w for v in vs for w in re.split(r"[\s,]+", v) if w) for k, vs in lines.items()}
    q.scope = words.get("scope", ())
    q.reads = words.get("reads", ())
    q.needs = tuple(tuple(w.split("|")) for w in words.get("needs", q.reads))
    if "rollup" in lines:
        q.rollup = _rollup(q, words, lines, where)
        if "rollup-sql" in words:
            q.rollup_sql = _rollup_sql(words["rollup-sql"], where)
    elif any(k in lines for k in ("columns", "rollup-filter", "rollup-where", "rollup-sql")):
        raise TracedbError(f"{where}: rollup columns or conditions without a `-- rollup:` table")
    return q


def _rollup(q: CannedQuery, words: dict, lines: dict, where: str) -> Rollup:
    (table, *more) = words["rollup"] or ("",)
    if more or not re.fullmatch(r"rollup_\w+", table):
        raise TracedbError(f"{where}: `-- rollup:` names one table rollup_<name>, got {lines['rollup']!r}")
    if not words.get("columns"):
        raise TracedbError(f"{where}: a metric with a rollup lists its output columns (`-- columns:`)")
    conditions = [f"${p} IS NULL OR {p} = ${p}" for p in words.get("rollup-filter", ())] + lines.get("rollup-where", [])
    serves = frozenset(n for c in conditions for n in re.findall(r"\$(\w+)", c))
    unknown = sorted(n for n in serves if q.param(n) is None)
    if unknown:
        raise TracedbError(f"{where}: the rollup's conditions name {', '.join(unknown)}, not a parameter of the metric")
    return Rollup(table, words["columns"], tuple(conditions), serves)


def _library_file(rel: Path) -> Path | None:
    """The SQL library's file at `rel` (relative, inside the library, a .sql file that
    exists), else None."""
    target = sql_dir() / rel
    if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".sql" or not target.is_file():
        return None
    return target


def _rollup_sql(names: tuple[str, ...], where: str) -> str:
    """The text of a metric's `-- rollup-sql:` file (a library file, no includes)."""
    target = _library_file(Path(names[0])) if len(names) == 1 else None
    if target is None:
        raise TracedbError(f"{where}: `-- rollup-sql:` names one file of the SQL library ({sql_dir()}), got {' '.join(names)!r}")
    return target.read_text()


def expand_includes(text: str, where: str, choose: Callable[[CannedQuery], bool] | None = None,
                    _chain: tuple[str, ...] = ()) -> str:
    """The text with each `-- include: metrics/NAME.sql` line replaced by that library file
    (header comments dropped; its own includes expanded, a file including itself an error).
    `choose(metric)` true: an included metric with a rollup is read from it instead."""
    def fragment(m: re.Match) -> str:
        rel = Path(m[1])
        target = _library_file(rel)
        if target is None:
            raise TracedbError(f"{where}: include {m[1]!r}: no such file in the SQL library ({sql_dir()})")
        if rel.as_posix() in _chain:
            raise TracedbError(f"{where}: include {m[1]!r} includes itself ({' -> '.join((*_chain, rel.as_posix()))})")
        text = target.read_text()
        if choose is not None:
            metric = _header(text, rel.stem, target)
            if metric.rollup is not None and choose(metric):
                return metric.rollup.select()
        body = [ln for ln in text.splitlines() if not _HEADER.match(ln.strip())]
        return expand_includes("\n".join(body).strip("\n"), where, choose, (*_chain, rel.as_posix()))

    return _INCLUDE.sub(fragment, text)


def included(text: str, where: str) -> list[CannedQuery]:
    """The headers of the library files a text includes, directly or through others."""
    found: list[CannedQuery] = []
    expand_includes(text, where, choose=lambda m: found.append(m))
    return found


def parse(text: str, name: str, path: Path | None = None) -> CannedQuery:
    """A query or metric file: its header, its text on raw rows (includes expanded), and
    the parameters of the metrics it includes that it does not declare itself."""
    where = str(path or name)
    q = _header(text, name, path)
    q.sql = expand_includes(text, where)
    for metric in included(text, where) if q.has_header else ():
        for p in metric.params:  # a metric's parameters are the query's, declared there once
            mine = q.param(p.name)
            if mine is None and q.rollup is not None:  # `served` reads the metric's own header
                raise TracedbError(f"{where}: a metric with a rollup declares its parameters; {p.name} is "
                                   f"{metric.name}'s only")
            if mine is None:
                q.params.append(p)
            elif (mine.type_text, mine.default, mine.required) != (p.type_text, p.default, p.required):
                raise TracedbError(f"{where}: parameter {p.name} is {mine.type_text} {mine.default!r} here "
                                   f"but {p.type_text} {p.default!r} in the metric {metric.name} it includes")
    unknown = [n for n in q.scope if q.param(n) is None or q.param(n).type != "VARCHAR"]
    if unknown:
        raise TracedbError(f"{where}: scope names {', '.join(unknown)}, not a VARCHAR parameter of the query")
    return q


def scoped_runs(query: CannedQuery, values: dict[str, Any]) -> list[str] | None:
    """The runs a query reads alone with these values (its `-- scope:` parameters, all
    given), or None: it may read every run."""
    runs = [values.get(n) for n in query.scope]
    return runs if runs and None not in runs else None


def list_queries() -> list[CannedQuery]:
    return [parse(p.read_text(), p.stem, p) for p in sorted(sql_dir().glob("*.sql"))]


def list_metrics() -> list[CannedQuery]:
    """Every metric of the library (`sql/metrics/`)."""
    return [parse(p.read_text(), p.stem, p) for p in sorted((sql_dir() / "metrics").glob("*.sql"))]


@functools.lru_cache(maxsize=None)
def stored_rollups() -> dict[str, CannedQuery]:
    """Rollup table -> the metric whose rows it holds (`rollup_<metric>`), as declared by
    the metrics' headers: what the ingest writes, and the tables the schema must hold."""
    return {m.rollup.table: m for m in list_metrics() if m.rollup and m.rollup.table == f"rollup_{m.name}"}


# What inline SQL starts with (`tracedb query "SELECT ..."`, as `duckdb -c`): a statement
# keyword, a parenthesis or a comment, then the rest (a name or a path has no space).
INLINE_SQL = re.compile(r"\s*(?:\(|--|/\*|(?:select|with|from|values|describe|show|summarize|explain|pivot|unpivot|table)\b)"
                        r"[\s\S]*\s", re.IGNORECASE)


def load(spec: str) -> CannedQuery:
    """A canned query by name, a path to a .sql file, '-' for stdin, or the SQL itself
    (INLINE_SQL: a statement with a space in it that is not a file's path)."""
    if spec == "-":
        import sys

        return parse(sys.stdin.read(), "stdin")
    path = Path(spec)
    if path.suffix == ".sql" and path.is_file():
        return parse(path.read_text(), path.stem, path)
    canned = sql_dir() / f"{spec}.sql"
    if re.fullmatch(r"[A-Za-z0-9_]+", spec) and canned.is_file():
        return parse(canned.read_text(), spec, canned)
    if INLINE_SQL.match(spec) and not path.exists():
        return parse(spec, "sql")
    if path.suffix == ".sql":
        raise TracedbError(f"{spec}: no such file")
    names = ", ".join(q.name for q in list_queries())
    raise TracedbError(f"no canned query named {spec!r} (known: {names}); or give a path to a .sql file, "
                      "SQL itself (\"SELECT ...\"), or - for stdin")


def placeholders(sql: str) -> set[str]:
    """Names of the `$name` placeholders sqlglot finds in the SQL."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        raise TracedbError(f"SQL does not parse: {str(e).splitlines()[0]}") from e
    return {p.name for t in tree if t for p in t.find_all(exp.Placeholder) if p.name}


def bound_names(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> set[str]:
    """Names of the placeholders DuckDB will bind: its own parser's answer, which costs no
    sqlglot import on the `tracedb query` path (~150 ms, issue 12 item 6). `con`: parse
    with that connection rather than DuckDB's default one (another instance, ~15 ms)."""
    names = _NAMES.get(sql)
    if names is None:
        import duckdb

        try:
            names = frozenset(n for st in (con or duckdb).extract_statements(sql) for n in st.named_parameters)
        except duckdb.Error as e:
            raise TracedbError(f"SQL does not parse: {str(e).splitlines()[0]}") from e
        if len(_NAMES) >= 512:  # ad-hoc SQL in a long session: bounded
            _NAMES.clear()
        _NAMES[sql] = names
    return set(names)


# A text -> the placeholders DuckDB binds in it: the parser's answer, whichever connection
# parses; a canned query is bound again at each run (`bind`, `query.execute`).
_NAMES: dict[str, frozenset[str]] = {}


def bind(query: CannedQuery, given: dict[str, Any], con: duckdb.DuckDBPyConnection | None = None) -> dict[str, Any]:
    """Validate parameters against the header and return the values to bind."""
    used = bound_names(query.sql, con)
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

