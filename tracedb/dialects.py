"""Canned queries printed for other engines (`tracedb query NAME --dialect spark`): the
DuckDB text transpiled by sqlglot, parameters either inlined as literals or written as
the engine's own placeholders.

With values (`--inline`, or any `--param`) the text is the one `tracedb query` would run
with them: an included metric reads its rollup where the rollup serves the values
(`tracedb.sqllib`). With placeholders the values are not known, so every metric is
computed from raw rows: the same rows for any values, on any engine that has the source
tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from tracedb.errors import TracedbError
from tracedb.sqllib import _HEADER, CannedQuery, bind, placeholders

if TYPE_CHECKING:
    from sqlglot import exp

DIALECTS = ("duckdb", "spark", "trino", "postgres", "bigquery", "snowflake", "databricks", "clickhouse")


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
    header = _header(query)
    values = None if params is None else bind(query, params)
    text = query.sql if values is None else query.sql_for(values)  # with values: rollups where they serve
    body = "\n".join(ln for ln in text.splitlines() if not _HEADER.match(ln.strip()))
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


def _header(query: CannedQuery) -> list[str]:
    """The query's header lines, with those of the parameters it takes from its metrics."""
    own = [ln for ln in query.sql.splitlines() if _HEADER.match(ln.strip())]
    first = [ln for ln in own if _HEADER.match(ln.strip())[1] in ("title", "description")]
    rest = [ln for ln in own if _HEADER.match(ln.strip())[1] not in ("title", "description", "param")]
    return first + [p.line for p in query.params if p.line] + rest


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
