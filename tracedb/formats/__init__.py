"""Trace formats: one module each, found by sniffing content, never by file name.

Order matters: the first format whose `sniff` claims the head wins, so more specific
formats come before more general ones (Kineto before generic Chrome trace JSON).

Fallback (`read`): when the claiming reader yields no rows at all (or fails before
yielding any), the next format whose `sniff` also claims the file reads it; nothing was
written yet, so nothing is undone. When every candidate fails, the first one's error is
the file's error (it is the most specific reader's message).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pyarrow as pa

from tracedb.errors import TraceFormatError
from tracedb.formats.base import ReadContext, read_head

# Module names under tracedb.formats, most specific first. Adding a format = one module
# here plus one test file.
FORMAT_MODULES = [
    "tf_stepstats",
    "megengine",
    "kineto",
    "chrome_trace",
    "xspace",
    "node_dump",
    "node_list",
]


def all_formats() -> list[ModuleType]:
    mods = []
    for name in FORMAT_MODULES:
        try:
            mods.append(importlib.import_module(f"tracedb.formats.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"tracedb.formats.{name}":
                raise
    return mods


def get_format(name: str) -> ModuleType:
    for mod in all_formats():
        if mod.NAME == name:
            return mod
    raise TraceFormatError(f"unknown format {name!r}")


def detect(path: Path) -> ModuleType:
    """The format module that claims this file, or TraceFormatError."""
    head = read_head(path)
    if not head.strip():
        raise TraceFormatError("empty file")
    for mod in all_formats():
        if mod.sniff(head):
            return mod
    raise TraceFormatError(
        "unknown format (not one of: " + ", ".join(m.NAME for m in all_formats()) + ")"
    )


def candidates(path: Path) -> list[ModuleType]:
    """Every format whose sniff claims the file, most specific first."""
    head = read_head(path)
    return [mod for mod in all_formats() if head.strip() and mod.sniff(head)]


def read(path: Path, ctx: ReadContext, first: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Read with format `first`, falling back to the other claiming formats (see above).

    Sets `ctx.format` to the format whose rows were yielded. A fallback reader gets a
    fresh metadata dict, so a failed reader's run facts do not stick to the file.
    """
    order = [get_format(first)] + [m for m in candidates(path) if m.NAME != first]
    error: TraceFormatError | None = None
    for mod in order:
        attempt = ReadContext(ctx.run_id, ctx.source_file, ctx.file_ordinal)
        produced = False
        try:
            for table, batch in mod.read(path, attempt):
                if batch.num_rows == 0:
                    continue
                if not produced:
                    produced = True
                    ctx.format = mod.NAME
                    ctx.metadata.update(attempt.metadata)
                    attempt.metadata = ctx.metadata  # later updates land in ctx too
                    ctx.warnings.update(attempt.warnings)
                    attempt.warnings = ctx.warnings
                    if mod.NAME != first:
                        why = f"failed: {error}" if error else "found no rows"
                        ctx.warn(f"read by {mod.NAME}: {first} {why}")
                yield table, _with_format(batch, mod.NAME) if mod.NAME != first else batch
        except TraceFormatError as e:
            if produced:
                raise
            if mod is order[0]:
                error = e  # the sniffed reader's message; a fallback's own failure is no news
            continue
        if produced:
            return
    ctx.format = first
    if error:
        raise error


def _with_format(batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
    """A fallback reader's batch stamped with its own source_format (the writer's fill
    names the sniffed one)."""
    col = pa.array([name] * batch.num_rows, pa.string())
    if "source_format" in batch.schema.names:
        return batch.set_column(batch.schema.get_field_index("source_format"), "source_format", col)
    return batch.append_column("source_format", col)
