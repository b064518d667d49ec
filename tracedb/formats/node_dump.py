"""Node/shape dumps: one graph node a line, `name, input..., output, DEVTYPE, INDEX`.

    conv1/Conv2D, (128x3x224x224), (11x11x3x64), (128x64x56x56), GPU, 0
    ConstantFolding/.../ShapeN-matshapes-1, ^conv1/weights/read, ^Variable/read, (int32 4x1), GPU, 0
    conv1/Conv2D:Conv2D, (no input), (no output), GPU, 0
    edge_177_...:MEMCPYDtoH, (no input), (output 256 bytes), GPU, 0

Inputs are shapes `(AxBxC)`, dtype-qualified shapes `(int32 4x1)`, control inputs `^name`,
or `(no input)`; the output is one shape, `(no output)`, or `(output N bytes)` (kept as
`params.output_bytes`). Dims are kept in the order the dump wrote them. `input_dtypes` /
`output_dtypes` line up with the shapes (NULL entries where the dump gave no dtype) and are
NULL when the line gives none at all. Nodes are untimed; `seq` is the 0-based line order
among nodes; `op_type` is NULL (the dump does not say).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.devices import canonical
from tracedb.errors import TraceFormatError
from tracedb.formats.base import HEAD_BYTES, BatchBuilder, ReadContext, lines, open_trace, text_head

NAME = "node_dump"
DESCRIPTION = "node/shape dump: `name, input shapes..., output shape, DEVTYPE, INDEX` per line"

_SHAPE = re.compile(r"\((?:(?P<dtype>[a-z][a-z0-9_]*) )?(?P<dims>\d+(?:x\d+)*)\)")
_BYTES = re.compile(r"\(output (?P<n>\d+) bytes\)")
_LINE = re.compile(
    r"^(?P<name>[^\s,()^][^,]*?)"
    r"(?P<fields>(?:, (?:\^[^\s,]+|\([^()]*\)))+)"
    r", (?P<devtype>[A-Za-z_]+), (?P<index>\d+)$"
)
_SNIFF_LINES = 20


def sniff(head: bytes) -> bool:
    lines = text_head(head).splitlines()
    if len(head) >= HEAD_BYTES:
        lines = lines[:-1]  # may be cut in the middle
    lines = [ln.strip() for ln in lines if ln.strip()][:_SNIFF_LINES]
    return bool(lines) and all(_LINE.match(ln) for ln in lines)


def _shape(tok: str) -> tuple[list[int], str | None] | None:
    m = _SHAPE.fullmatch(tok)
    return ([int(d) for d in m["dims"].split("x")], m["dtype"]) if m else None


def _parse(line: str, lineno: int) -> dict[str, Any]:
    m = _LINE.match(line)
    if not m:
        raise TraceFormatError(f"node dump line {lineno}: not `name, inputs..., output, DEVTYPE, INDEX`: {line[:80]!r}")
    *ins, out = m["fields"][2:].split(", ")
    shapes, dtypes, controls = [], [], []
    for tok in ins:
        if tok.startswith("^"):
            controls.append(tok[1:])
        elif tok != "(no input)":
            parsed = _shape(tok)
            if parsed is None:
                raise TraceFormatError(f"node dump line {lineno}: bad input {tok!r}")
            shapes.append(parsed[0])
            dtypes.append(parsed[1])
    row: dict[str, Any] = {
        "node_name": m["name"].strip(),
        "device": canonical(m["devtype"], m["index"]),
        "device_raw": f"{m['devtype']}, {m['index']}",
        "input_shapes": shapes,
        "input_dtypes": dtypes if any(dtypes) else None,
        "control_inputs": controls,
    }
    if out != "(no output)":
        if (b := _BYTES.fullmatch(out)) is not None:
            row["params"] = json.dumps({"output_bytes": int(b["n"])})
        elif (parsed := _shape(out)) is not None:
            row["output_shapes"] = [parsed[0]]
            row["output_dtypes"] = [parsed[1]] if parsed[1] else None
        else:
            raise TraceFormatError(f"node dump line {lineno}: bad output {out!r}")
    return row


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    nodes = BatchBuilder("nodes")
    seq = 0
    lineno = 0
    try:
        with open_trace(path) as f:
            for lineno, raw in enumerate(lines(f), 1):
                line = raw.decode("utf-8").strip()
                if not line:
                    continue
                row = _parse(line, lineno)
                row["seq"] = seq
                seq += 1
                yield from nodes.append(row)
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"node dump line {lineno}: not UTF-8 text") from e
    except (OSError, EOFError) as e:  # truncated gzip shows up mid-iteration
        raise TraceFormatError(f"node dump: truncated or corrupt file after line {lineno}: {e}") from e
    yield from nodes.flush()
