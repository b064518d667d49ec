"""Trace formats: one module each, found by sniffing content, never by file name.

Order matters: the first format whose `sniff` claims the head wins, so more specific
formats come before more general ones (Kineto before generic Chrome trace JSON).

Sniffing imports the format modules lazily, in that order, up to the first that claims
the head (and a read imports only its format, the others only for a fallback): the JSON
formats come first because they are the common case and the cheapest to import. The TF
reader and XSpace import protobuf and the generated message modules, ~18 ms of CPU a
process that a Kineto ingest never used (they came first, and every sniff imported every
format). Moving the JSON formats ahead changes no claim: they claim only a head whose
text starts with `{` or `[` (after whitespace); TF text starts with a field name or a
`#` comment, and a TF binary head (first byte 0x0A) is claimed only with a `/`-led
device string at byte 4 or 6, which a JSON head could hold only inside its first key;
such a head, were it both, went to the JSON reader by fallback before anyway. Nsight
Systems' SQLite export (and its `.nsys-rep` report) opens with a magic header no other
format claims; it is sniffed before the TF text reader, which reads text heads.

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

from tracedb.errors import NotATraceError, TraceFormatError
from tracedb.formats.base import ReadContext, read_head

# Module names under tracedb.formats, most specific first. Adding a format = one module
# here plus one test file.
FORMAT_MODULES = [
    "megengine",
    "kineto",
    "chakra_et",  # after Kineto: a Kineto trace's sniff need not import it (neither claims the other)
    "chrome_trace",
    "nsys",
    "tf_stepstats",
    "xspace",
    "node_dump",
    "node_list",
]


def _load(name: str) -> ModuleType | None:
    """The format module `name` (imported on first use), None where it is not installed."""
    try:
        return importlib.import_module(f"tracedb.formats.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"tracedb.formats.{name}":
            raise
        return None


def all_formats() -> list[ModuleType]:
    return [mod for mod in map(_load, FORMAT_MODULES) if mod is not None]


def get_format(name: str) -> ModuleType:
    mod = _load(name) if name in FORMAT_MODULES else None
    if mod is None or mod.NAME != name:
        raise TraceFormatError(f"unknown format {name!r}")
    return mod


def _claiming(head: bytes) -> Iterator[ModuleType]:
    """The formats whose sniff claims this head, most specific first, each imported as
    its turn comes."""
    if head.strip():
        for name in FORMAT_MODULES:
            mod = _load(name)
            if mod is not None and mod.sniff(head):
                yield mod


def detect(path: Path) -> ModuleType:
    """The format module that claims this file; NotATraceError when none does (an empty
    file, or no format's head), TraceFormatError when the head cannot be read."""
    head = read_head(path)
    if not head.strip():
        raise NotATraceError("empty file")
    for mod in _claiming(head):
        return mod
    raise NotATraceError(
        "unknown format (not one of: " + ", ".join(m.NAME for m in all_formats()) + ")"
    )


def candidates(path: Path) -> list[ModuleType]:
    """Every format whose sniff claims the file, most specific first."""
    return list(_claiming(read_head(path)))


def _order(path: Path, first: str) -> Iterator[ModuleType]:
    """Format `first`, then the other claiming formats (sniffed only if it is needed)."""
    yield get_format(first)
    for mod in _claiming(read_head(path)):
        if mod.NAME != first:
            yield mod


def read(path: Path, ctx: ReadContext, first: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Read with format `first`, falling back to the other claiming formats (see above).

    Sets `ctx.format` to the format whose rows were yielded. A fallback reader gets a
    fresh metadata dict, so a failed reader's run facts do not stick to the file.
    """
    error: TraceFormatError | None = None
    for k, mod in enumerate(_order(path, first)):
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
            if k == 0:
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
