"""Writing query results: an aligned text table, CSV, JSON, NDJSON (one JSON object a
line, for `jq` and log pipelines) or Parquet."""

from __future__ import annotations

import io
import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import IO

import pyarrow as pa

from tracedb.errors import TracedbError

FORMATS = ("table", "csv", "json", "ndjson", "parquet")


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


def text_table(table: pa.Table, max_width: int = 60) -> str:
    names = table.column_names
    rows = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
    rows = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in rows]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
               for t in table.schema.types]

    def line(cells):
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    out = [line(names), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(out) + "\n"


def _json_default(v):
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return str(v)


def write(table: pa.Table, fmt: str, output: Path | None = None, stream: IO[str] | None = None,
          max_width: int = 60) -> None:
    if fmt not in FORMATS:
        raise TracedbError(f"unknown format {fmt!r} (one of: {', '.join(FORMATS)})")
    if fmt == "parquet":
        if output is None:
            raise TracedbError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq  # only here: ~25 ms of start-up (issue 12 item 6)

        pq.write_table(table, output)
        return
    if fmt == "table":
        text = text_table(table, max_width)
    elif fmt == "json":
        text = json.dumps(table.to_pylist(), default=_json_default, indent=1) + "\n"
    elif fmt == "ndjson":
        text = "".join(json.dumps(row, default=_json_default) + "\n" for row in table.to_pylist())
    else:
        buf = io.BytesIO()
        # CSV has no lists: write them as JSON text.
        cols = [pa.array([json.dumps(v) if v is not None else None for v in c.to_pylist()])
                if pa.types.is_list(c.type) else c for c in table.columns]
        import pyarrow.csv as pacsv

        pacsv.write_csv(pa.Table.from_arrays(cols, names=table.column_names), buf)
        text = buf.getvalue().decode()
    if output is not None:
        output.write_text(text)
    else:
        (stream or sys.stdout).write(text)
