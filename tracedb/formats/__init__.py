"""Trace formats: one module each, found by sniffing content, never by file name.

Order matters: the first format whose `sniff` claims the head wins, so more specific
formats come before more general ones (Kineto before generic Chrome trace JSON).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from tracedb.errors import TraceFormatError
from tracedb.formats.base import read_head

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
