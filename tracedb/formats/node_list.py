"""Plain node-name lists: one graph node name a line, nothing else.

Rows are `nodes` in file order (`seq`, 0-based among non-empty lines), untimed, with no
op type or shapes. The list says nothing about placement, so `device` is `UNKNOWN:0`
(canonical TYPE:INDEX form, and a value no real device has, so such nodes never mix with
CPU:0 / GPU:0 rows) and `device_raw` is NULL.

This is the last-resort format, so `sniff` is strict: UTF-8 text, at least two lines,
every line of the head one token of name characters `[A-Za-z0-9_./:-]` with a letter in it
(no spaces, commas, quotes or braces: JSON, protobuf text and CSV never pass).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from tracedb.errors import TraceFormatError
from tracedb.formats.base import HEAD_BYTES, BatchBuilder, ReadContext, lines, open_trace, text_head

NAME = "node_list"
DESCRIPTION = "plain list of graph node names, one a line"
DEVICE = "UNKNOWN:0"

_NAME = re.compile(r"[A-Za-z0-9_./:-]*[A-Za-z][A-Za-z0-9_./:-]*")


def sniff(head: bytes) -> bool:
    lines = text_head(head).split("\n")
    if len(head) >= HEAD_BYTES:
        lines = lines[:-1]  # may be cut in the middle
    names = [ln.rstrip("\r") for ln in lines if ln.strip()]
    return len(names) >= 2 and all(_NAME.fullmatch(n) for n in names)


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    nodes = BatchBuilder("nodes")
    seq = lineno = 0
    try:
        with open_trace(path) as f:
            for lineno, raw in enumerate(lines(f), 1):
                name = raw.decode("utf-8").strip()
                if not name:
                    continue
                if not _NAME.fullmatch(name):
                    raise TraceFormatError(f"node list line {lineno}: not a node name: {name[:80]!r}")
                yield from nodes.append({"device": DEVICE, "node_name": name, "seq": seq})
                seq += 1
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"node list line {lineno}: not UTF-8 text") from e
    except (OSError, EOFError) as e:  # truncated gzip shows up mid-iteration
        raise TraceFormatError(f"node list: truncated or corrupt file after line {lineno}: {e}") from e
    yield from nodes.flush()
