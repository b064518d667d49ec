"""Writing query results: an aligned text table, CSV, JSON, NDJSON (one JSON object a
line, for `jq` and log pipelines) or Parquet.

A result is an Arrow table or, on `tracedb query`'s fast path, `Rows`: DuckDB's own
Python values, for results whose every column prints the same either way (numbers, text,
booleans, lists of them; `tracedb.query.fetch` decides). Writing `Rows` imports no
pyarrow (with numpy ~110 ms, most of a one-run query's start-up: issue 12 item 6), and
gives byte-identical output: the CSV cells follow pyarrow's CSV writer, which
tests/test_startup.py checks value by value.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Union

from tracedb.errors import TracedbError

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "ndjson", "parquet")
KINDS = ("text", "int", "float", "bool", "list")  # of a `Rows` column


@dataclass
class Rows:
    """A query result as plain Python values (DuckDB's fetchall), with each column's kind
    (KINDS): what the text formats need, without pyarrow."""

    names: list[str]
    kinds: list[str]
    rows: list[tuple]

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    @property
    def column_names(self) -> list[str]:
        return list(self.names)

    def to_pylist(self) -> list[dict]:
        """Row dicts as pyarrow's Table.to_pylist builds them (a repeated name: last value wins)."""
        names = self.names
        return [dict(zip(names, r)) for r in self.rows]


Result = Union["pa.Table", Rows]


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")) or abs(v) >= 1e15:
            return f"{v:.6g}"
        if v == int(v):
            return str(int(v))
        return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"  # ns averages: no exponent
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)


def _numeric(table: Result) -> list[bool]:
    if isinstance(table, Rows):
        return [k in ("int", "float") for k in table.kinds]
    import pyarrow as pa

    return [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            for t in table.schema.types]


def text_table(table: Result, max_width: int = 60) -> str:
    names = table.column_names
    # by position: a repeated column name (`SELECT 1 AS a, 2 AS a`) keeps both columns
    values = table.rows if isinstance(table, Rows) else zip(*(c.to_pylist() for c in table.columns))
    rows = [[_cell(v) for v in row] for row in values]
    rows = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in rows]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    numeric = _numeric(table)

    def line(cells):
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(names), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(out) + "\n"


def _json_default(v):
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return str(v)


def _csv_quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def csv_double(v: float) -> str:
    """A float64 as pyarrow's CSV writer prints it: the shortest digits that read back
    (Python's repr has the same), in decimal notation for decimal exponents -6..9 and as
    d.ddde+N otherwise (double-conversion's ToShortest with those bounds); `nan`, `inf`."""
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    text = repr(v)
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exp = text.lstrip("-").partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + int(exp or 0)  # position of the decimal point in digits
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    if not digits:
        return sign + "0"
    e = point - 1
    if -6 <= e < 10:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return sign + digits + "0" * (point - len(digits))
        return f"{sign}{digits[:point]}.{digits[point:]}"
    tail = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{tail}e{'+' if e > 0 else '-'}{abs(e)}"


_CSV_CELL = {
    "text": _csv_quote,
    "int": str,  # a HUGEINT beyond int64 comes as a Decimal: its digits, as Arrow's decimal128
    "float": csv_double,
    "bool": lambda v: "true" if v else "false",
    "list": lambda v: _csv_quote(json.dumps(v)),  # CSV has no lists: JSON text, as below
}


def csv_rows(rows: Rows) -> str:
    """CSV of `Rows`, byte for byte what pyarrow.csv.write_csv writes for the same result."""
    cells = [_CSV_CELL[k] for k in rows.kinds]
    lines = [",".join(_csv_quote(n) for n in rows.names)]
    lines += [",".join("" if v is None else f(v) for f, v in zip(cells, r)) for r in rows.rows]
    return "\n".join(lines) + "\n"


def _csv_arrow(table: pa.Table) -> str:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    # CSV has no lists: write them as JSON text.
    cols = [pa.array([json.dumps(v) if v is not None else None for v in c.to_pylist()])
            if pa.types.is_list(c.type) else c for c in table.columns]
    pacsv.write_csv(pa.Table.from_arrays(cols, names=table.column_names), buf)
    return buf.getvalue().decode()


def write(table: Result, fmt: str, output: Path | None = None, stream: IO[str] | None = None,
          max_width: int = 60) -> None:
    if fmt not in FORMATS:
        raise TracedbError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})")
    if fmt == "parquet":
        if output is None:
            raise TracedbError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq  # only here: ~25 ms of start-up (issue 12 item 6)

        if isinstance(table, Rows):
            raise TypeError("Parquet needs an Arrow table (query with output='arrow')")
        pq.write_table(table, output)
        return
    if fmt == "table":
        text = text_table(table, max_width)
    elif fmt == "json":
        text = json.dumps(table.to_pylist(), default=_json_default, indent=1) + "\n"
    elif fmt == "ndjson":
        text = "".join(json.dumps(row, default=_json_default) + "\n" for row in table.to_pylist())
    else:
        text = csv_rows(table) if isinstance(table, Rows) else _csv_arrow(table)
    if output is not None:
        output.write_text(text)
    else:
        (stream or sys.stdout).write(text)
