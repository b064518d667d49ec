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
import re
import sys
from dataclasses import dataclass
from datetime import date, datetime, timezone
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


# What a terminal would act on rather than print: C0 and C1 controls (ESC starts ANSI/OSC
# sequences: colours, cursor moves, window titles, hyperlinks), DEL, and the Unicode
# bidirectional controls that reorder what is shown. Each prints as an escape (`\x1b`,
# `\n`, `\u202e`); a backslash doubles, so two different texts never print the same.
_UNSAFE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
EPOCH_NS = 10**17  # an `_ns` column whose every value is past this (1973) holds epoch times


def visible(text: str) -> str:
    """Text as a terminal should show it: control and bidi characters as escapes."""
    def escape(m: re.Match) -> str:
        c = m[0]
        return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")

    return _UNSAFE.sub(escape, text)


def terminal_width(stream: IO[str] | None = None) -> int | None:
    """The width to fit a table to: $COLUMNS, else the terminal's, else None (not a
    terminal: nothing is cut)."""
    import os
    import shutil

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError, OSError):
        pass
    return None


def cut(text: str, width: int, head_share: float = 0.5) -> str:
    """`text` in at most `width` characters, cut in the middle (`head…tail`)."""
    if len(text) <= width:
        return text
    head = round((width - 1) * head_share)
    tail = width - 1 - head
    return text[:head] + "…" + (text[len(text) - tail:] if tail else "")


def distinct_cut(values: list[str], width: int) -> tuple[int, dict[str, str]]:
    """How each value prints in a column `width` wide, no two different values alike
    (seven `multi_tensor_apply_kernel<...>` must stay seven): cut in the middle, or at
    another place; values that still collide show, between head and tail, the part where
    each differs from the others. Wider only if that cannot tell them apart."""
    distinct = sorted(set(values))
    longest = max(map(len, distinct), default=0)
    w = width
    while w < longest:
        shown = _cuts(distinct, w)
        if shown is not None:
            return w, shown
        w += max(1, (longest - w) // 16)
    return longest, {v: v for v in distinct}


def _cuts(distinct: list[str], w: int) -> dict[str, str] | None:
    for share in (0.5, 0.35, 0.65, 0.2, 0.8):
        shown = {v: cut(v, w, share) for v in distinct}
        if len(set(shown.values())) == len(distinct):
            return shown
    for _ in range(4):  # values that still collide: show where each parts from those it collides with
        groups: dict[str, list[str]] = {}
        for v in distinct:
            groups.setdefault(shown[v], []).append(v)
        clashes = [g for g in groups.values() if len(g) > 1]
        if not clashes:
            return shown
        for group in clashes:
            for v in group:
                shown[v] = _window(v, w, max(_common_prefix(v, u) for u in group if u != v))
    return shown if len(set(shown.values())) == len(distinct) else None


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _window(text: str, w: int, at: int) -> str:
    """`head…part…tail` in `w` characters, the part showing text[at] (where it differs)."""
    if len(text) <= w or w < 9:
        return cut(text, w)
    head = tail = (w - 2) // 4
    room = w - 2 - head - tail
    start = min(max(head, at - room // 3), len(text) - tail - room)
    return text[:head] + "…" + text[start:start + room] + "…" + text[len(text) - tail:]


def _ns_display(names: list[str], numeric: list[bool], columns: list[list]) -> dict[int, str]:
    """Columns shown in readable units: an integer or float `X_ns` column becomes `X_ms`
    (ms, ns-exact), or `X_utc` (UTC time to the microsecond) when it holds epoch times."""
    shown = {}
    for i, (name, num) in enumerate(zip(names, numeric)):
        vals = [v for v in columns[i] if v is not None]
        if num and name.endswith("_ns") and vals and all(isinstance(v, (int, float)) for v in vals):
            epoch = all(v >= EPOCH_NS for v in vals)
            shown[i] = name[:-3] + ("_utc" if epoch else "_ms")
    return shown


def _ms(v) -> str:
    """ns as ms: to the microsecond (a profiler's usual resolution), to the ns below 1 µs."""
    text = f"{v / 1e6:.{3 if abs(v) >= 1000 else 6}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _utc(v) -> datetime:
    return datetime.fromtimestamp(int(v) // 1000 / 1e6, tz=timezone.utc)


def text_table(table: Result, width: int | None = None) -> str:
    """An aligned table for a terminal: control characters escaped (`visible`), `_ns`
    columns in ms or UTC time, and, given a width, text cut in the middle to fit it
    without two different values printing the same; a result too wide for that prints
    one block per row (`column | value`)."""
    names = [visible(n) for n in table.column_names]
    # by position: a repeated column name (`SELECT 1 AS a, 2 AS a`) keeps both columns
    values = list(table.rows) if isinstance(table, Rows) else list(zip(*(c.to_pylist() for c in table.columns)))
    numeric = _numeric(table)
    columns = [[r[i] for r in values] for i in range(len(names))]
    shown = _ns_display(table.column_names, numeric, columns)
    days = {_utc(v).date() for i, new in shown.items() if new.endswith("_utc") for v in columns[i] if v is not None}
    clock = "%H:%M:%S.%f" if len(days) == 1 else "%Y-%m-%d %H:%M:%S.%f"  # one day: named in the note
    for i, new in shown.items():
        names[i] = new
        fmt = (lambda v: _utc(v).strftime(clock)) if new.endswith("_utc") else _ms
        columns[i] = [None if v is None else fmt(v) for v in columns[i]]
    cells = [[visible(_cell(v)) for v in col] for col in columns]
    natural = [max([len(n)] + [len(c) for c in col]) for n, col in zip(names, cells)]
    widths, sep = _fit(names, cells, numeric, natural, width)
    note = []
    if shown:
        import textwrap

        on = f" on {days.pop()}" if len(days) == 1 else ""
        text = f"(*_ms: the query's *_ns in ms; *_utc: its epoch *_ns as UTC time{on}; csv and json give the ns)"
        note = textwrap.wrap(text, width) if width else [text]
    count = [f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})"]
    if widths is None:
        return "\n".join(_vertical(names, cells, width) + note + count) + "\n"
    cut_to = {i: distinct_cut(cells[i], widths[i])[1] for i in range(len(names)) if widths[i] < natural[i]}
    rows = [[cut_to[i][cells[i][r]] if i in cut_to else cells[i][r] for i in range(len(names))]
            for r in range(len(values))]

    def line(row):
        return sep.join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)).rstrip()

    out = [line(names), sep.join("-" * w for w in widths)] + [line(r) for r in rows]
    return "\n".join(out + note + count) + "\n"


def _fit(names, cells, numeric, natural, width) -> tuple[list[int] | None, str]:
    """Column widths and separator within `width`: two spaces apart, or one when that
    fits better; the widest text columns narrowed first (to their header, at least 8),
    numbers never; then widened again where narrowing would make two values print the
    same. None: the table cannot fit (print it a row at a time)."""
    widths = list(natural)
    gaps = len(widths) - 1
    if width is None or sum(widths) + 2 * gaps <= width:
        return widths, "  "
    if sum(widths) + gaps <= width:
        return widths, " "
    floor = [w if num else min(w, max(len(n), 8)) for w, n, num in zip(natural, names, numeric)]
    sep = "  " if sum(floor) + 2 * gaps <= width else " "
    over = sum(widths) + len(sep) * gaps - width
    while over > 0:
        i = max(range(len(widths)), key=lambda j: widths[j] - floor[j])
        if widths[i] <= floor[i]:
            return None, sep
        step = min(over, widths[i] - floor[i], max(1, (widths[i] - floor[i]) // 4))
        widths[i] -= step
        over -= step
    for i, w in enumerate(widths):
        if w < natural[i]:
            widths[i] = distinct_cut(cells[i], w)[0]
    return (widths if sum(widths) + len(sep) * gaps <= width else None), sep


def _vertical(names: list[str], cells: list[list[str]], width: int) -> list[str]:
    """One block per row, `column | value`, values cut to the width (never alike)."""
    key = max(map(len, names), default=0)
    room = max(width - key - 3, 8)
    shown = [distinct_cut(col, room)[1] for col in cells]
    out = []
    for r in range(len(cells[0]) if cells else 0):
        out.append(f"-[ row {r + 1} ]".ljust(min(width, key + 3 + 8), "-"))
        out += [f"{n.ljust(key)} | {how[col[r]]}" for n, col, how in zip(names, cells, shown)]
    return out


def runs_for_terminal(table: pa.Table, labels: tuple[str, ...] = ("model", "commit", "hardware", "started_at")) -> pa.Table:
    """`tracedb runs` as a terminal table: timestamps to the second (UTC), and the label
    columns no run has left out, so that it fits 100 columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = [n for n in table.column_names if n not in labels or table.column(n).null_count < table.num_rows]
    table = table.select(keep)
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            seconds = pc.cast(table.column(i), pa.timestamp("s", "UTC"), safe=False)  # Arrow's %S has the fraction
            col = pc.strftime(seconds, "%Y-%m-%d %H:%M:%S")
            table = table.set_column(i, f.name, col)
    return table


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


# A spreadsheet (Excel, LibreOffice, Google Sheets) opening a CSV runs a cell that starts
# with one of these as a formula (`=cmd|' /c calc'!A1`, `=HYPERLINK(...)`); the full-width
# forms too in some. `safe=True` (--safe-csv) prefixes such a text cell with `'`, which
# the spreadsheet shows as text; the plain CSV keeps every value exactly.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_safe(text: str) -> str:
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_rows(rows: Rows, safe: bool = False, header: bool = True) -> str:
    """CSV of `Rows`, byte for byte what pyarrow.csv.write_csv writes for the same result
    (safe: formula-like text cells prefixed with `'`, as `_csv_arrow` does; header=False:
    the rows only, for a result's later batches)."""
    cells = [_CSV_CELL[k] for k in rows.kinds]
    if safe:
        cells = [(lambda v: _csv_quote(spreadsheet_safe(v))) if k == "text" else f for f, k in zip(cells, rows.kinds)]
    lines = [",".join(_csv_quote(spreadsheet_safe(n) if safe else n) for n in rows.names)] if header else []
    lines += [",".join("" if v is None else f(v) for f, v in zip(cells, r)) for r in rows.rows]
    return "\n".join(lines) + "\n" if lines else ""


def _csv_arrow(table: pa.Table, safe: bool = False, header: bool = True) -> str:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    # CSV has no lists: write them as JSON text.
    cols = [pa.array([json.dumps(v) if v is not None else None for v in c.to_pylist()])
            if pa.types.is_list(c.type) else c for c in table.columns]
    names = table.column_names
    if safe:
        cols = [pa.array([None if v is None else spreadsheet_safe(v) for v in c.to_pylist()], type=c.type)
                if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) else c for c in cols]
        names = [spreadsheet_safe(n) for n in names]
    pacsv.write_csv(pa.Table.from_arrays(cols, names=names), buf, pacsv.WriteOptions(include_header=header))
    return buf.getvalue().decode()


def write(table: Result, fmt: str, output: Path | None = None, stream: IO[str] | None = None,
          width: int | None | str = "auto", safe_csv: bool = False) -> None:
    """Write a result in a format (FORMATS) to `output` or `stream` (stdout).
    width: the line width a table is fit to; "auto": the terminal's (`terminal_width`),
    none for a file. safe_csv: CSV for spreadsheets (`spreadsheet_safe`)."""
    if fmt == "table":
        text = text_table(table, (None if output is not None else terminal_width(stream)) if width == "auto" else width)
        if output is not None:
            output.write_text(text)
        else:
            (stream or sys.stdout).write(text)
        return
    with Writer(fmt, output, stream, safe_csv) as w:
        w(table)


# Formats a `Writer` can write a batch at a time (a text table needs every row first, to
# size its columns).
STREAMED = ("csv", "json", "ndjson", "parquet")


class Writer:
    """Writes a result a batch at a time (`Writer(fmt, output)(batch)` for each batch, then
    `close()`; or `with`): what `tracedb query` does for the formats in STREAMED, so a
    fleet-wide result of millions of rows needs the memory of one batch, not of the whole
    result (a per-launch query over 50,000 runs held 12.6 GB as Python rows).
    The bytes equal those of `write` given the whole result at once. A file (`output`) is
    written beside its place and moved there by `close()`, so a failed query leaves no
    half-written file; `abort()` (or leaving the `with` block by an exception) removes it."""

    def __init__(self, fmt: str, output: Path | None = None, stream: IO[str] | None = None, safe_csv: bool = False):
        if fmt not in STREAMED:
            raise TracedbError(f"unknown format {fmt!r} (one of: {', '.join(f for f in FORMATS if f != 'table')})"
                               if fmt not in FORMATS else f"format {fmt} is not written a batch at a time")
        if fmt == "parquet" and output is None:
            raise TracedbError("--format parquet needs --output FILE")
        self.fmt, self.output, self.safe_csv = fmt, output, safe_csv
        self.rows = 0
        self._started = False  # the first batch (which writes the header) is written
        self._parquet = None
        self._part = None if output is None else output.with_name(f".{output.name}.part")
        if fmt == "parquet":
            self._out = None
        elif self._part is not None:
            self._out = open(self._part, "w", encoding="utf-8", newline="")
        else:
            self._out = stream or sys.stdout

    def __call__(self, batch: Result) -> None:
        """Write one batch (Rows or an Arrow table); the first one also writes the header."""
        first, self._started = not self._started, True
        if self.fmt == "parquet":
            self._write_parquet(batch)
        elif self.fmt == "csv":
            self._out.write(csv_rows(batch, self.safe_csv, first) if isinstance(batch, Rows)
                            else _csv_arrow(batch, self.safe_csv, first))
        elif self.fmt == "ndjson":
            self._out.write("".join(json.dumps(row, default=_json_default) + "\n" for row in batch.to_pylist()))
        else:  # json: one array, as json.dumps(rows, indent=1) writes it
            rows = batch.to_pylist()
            if rows:
                items = (" " + json.dumps(row, default=_json_default, indent=1).replace("\n", "\n ") for row in rows)
                self._out.write(("[\n" if self.rows == 0 else ",\n") + ",\n".join(items))
        self.rows += batch.num_rows

    def _write_parquet(self, batch: Result) -> None:
        import pyarrow.parquet as pq  # only here: ~25 ms of start-up (issue 12 item 6)

        if isinstance(batch, Rows):
            raise TypeError("Parquet needs an Arrow table (query with output='arrow')")
        if self._parquet is None:
            self._schema = batch.schema
            self._parquet = pq.ParquetWriter(self._part, batch.schema)
        elif batch.schema != self._schema:  # a later batch's HUGEINT beyond int64 (Decimal)
            batch = batch.cast(self._schema)
        self._parquet.write_table(batch)

    def close(self) -> None:
        """Finish the result (a JSON array's end) and move a file into place."""
        if self.fmt == "json":
            self._out.write("\n]\n" if self.rows else "[]\n")
        self._finish()
        if self._part is not None and self._part.exists():
            self._part.replace(self.output)

    def abort(self) -> None:
        """Leave no file behind (a failed or interrupted query)."""
        self._finish()
        if self._part is not None:
            self._part.unlink(missing_ok=True)

    def _finish(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        elif self._out is None:  # Parquet without a batch
            return
        elif self._part is not None:
            self._out.close()
        else:
            self._out.flush()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


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
