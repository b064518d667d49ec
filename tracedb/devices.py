"""Canonical device names: `TYPE:INDEX` (GPU:0, CPU:0), whatever the source wrote."""

from __future__ import annotations

import re

# `/device:GPU:0`, or the legacy `/gpu:0` of old TF traces, then `/stream:N` or `/memcpy`.
_TF = re.compile(
    r"/(?:device:(?P<type>[A-Za-z_]+)|(?P<legacy>cpu|gpu|tpu)):(?P<index>\d+)"
    r"(?:/stream:(?P<stream>\w+))?(?P<memcpy>/memcpy)?",
    re.I,
)
_COMPNODE = re.compile(r"^(?P<type>[a-zA-Z]+?)(?P<index>\d+|x)(?::\d+)?$")  # MegEngine: gpu0:0, cpu0:0, cpux
_PLAIN = re.compile(r"^(?P<type>[A-Za-z_]+)[: ]?(?P<index>\d+)$")


def canonical(type_name: str, index: int | str) -> str:
    return f"{type_name.upper()}:{int(index)}"


def match_tf_device(raw: str) -> tuple[str, str | None] | None:
    """TF device string -> (canonical device, stream tag), None if it names no TF device.

    The stream tag is None for `/job:...` devices, 'all' for `/stream:all`, 'memcpy' for
    `/memcpy`, else the stream number as a string.
    """
    m = _TF.search(raw)
    if not m:
        return None
    dev = canonical(m["type"] or m["legacy"], m["index"])
    if m["memcpy"]:
        return dev, "memcpy"
    return dev, m["stream"]


def parse_tf_device(raw: str) -> tuple[str, str | None]:
    """`match_tf_device`, with a string that names no TF device normalized as best we can."""
    return match_tf_device(raw) or (normalize(raw), None)


def normalize(raw: str | None, default_type: str = "CPU") -> str:
    """Best-effort canonical device for any source string."""
    if raw is None or raw == "":
        return f"{default_type}:0"
    m = _TF.search(raw)
    if m:
        return canonical(m["type"] or m["legacy"], m["index"])
    m = _COMPNODE.match(raw)
    if m:
        idx = 0 if m["index"] == "x" else m["index"]
        return canonical(m["type"], idx)
    m = _PLAIN.match(raw.strip())
    if m:
        return canonical(m["type"], m["index"])
    return raw.upper()
