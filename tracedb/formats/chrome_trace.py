"""Generic Chrome-trace JSON (`{"traceEvents": [...]}` or a bare event array), e.g. the
output of TensorFlow's `timeline.Timeline(step_stats).generate_chrome_trace_format()`.

- `X` complete events, and `B`/`E` pairs matched per (pid, tid) stack, become rows; an
  `E` with no open `B` (a trace window that starts mid-event) is skipped, a `B` never
  closed becomes a row with NULL duration.
- `M` metadata events name processes/threads. An event whose process or thread name
  looks like a GPU stream is a `kernels` row (stream from the name); any other is a
  `nodes` row. GPU lanes: TF timeline's `/device:GPU:0/stream:12 Compute`, XProf's (JAX,
  TF2) process `/device:GPU:0` with thread `Stream #14(Compute)` (in its `*.trace.json.gz`
  and `perfetto_trace.json.gz`), and generic `stream 7` / `GPU 0`. TF's host-timed
  `/device:GPU:0 Compute` lane (no stream) holds ops: `nodes`.
- TF's `/stream:all` and `/memcpy` processes repeat the activity of the numbered streams,
  so they are skipped when the same device has numbered streams (each activity once).
- Copies are told from kernels by what the event says, not by its lane: a name or string
  arg naming a copy (`MEMCPYHtoD`, `Memcpy DtoH`), or tracedb's own `args.kind`. TF's
  timeline tool keeps only `op` of a stream row named `node:Op:MEMCPYDtoD` (the event is
  named `Op`), so there the one trace of the copy is its repeat on the `/memcpy` lane:
  an event that the same device's `/memcpy` lane repeats (same ts, dur, name, node) is a
  copy. On the TF StepStats seed's timeline that makes 729 kernels + 26 copies, as in
  the StepStats itself (name alone gives 739 + 16).
- Names: TF puts the op type in the event name and the node in `args.name` / `args.op`;
  node_name = args.name else the event name, op_type = args.op else the event name.
- `cuda_runtime` events (the CUDA runtime lane of tracedb's exports before the
  `tracedb_export` format: launch calls, whose link to their kernel is on the kernel)
  are not framework ops: skipped.
- Time: `ts`/`dur` are µs (absolute, there is no base time) -> integer ns exactly.

Two passes over the events: pass 1 collects the `M` names (they may come anywhere in the
file), pass 2 emits rows. A file of up to `jsonstream.WHOLE_DECODE_BYTES` is decoded once
(msgspec, `jsonstream.decode_whole`) and both passes walk the same events; a larger one
streams twice (`jsonstream.EventStream`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from tracedb.devices import canonical, match_tf_device
from tracedb.formats.base import COPY_KINDS, BatchBuilder, ReadContext, copy_kind, flush, text_head
from tracedb.formats.jsonstream import (DecodedTrace, EventStream, dumps_compact, gc_paused,
                                        located, need, num, rows_decoded_once, us_to_ns)

NAME = "chrome_trace"
DESCRIPTION = "Chrome-trace JSON (TF timeline, generic traceEvents), optionally gzipped"

_EVENT = re.compile(r'"ph"\s*:\s*"[A-Za-z]"')
_XPROF_STREAM = re.compile(r"^Stream #(\d+)")
_STREAM = re.compile(r"\bstream\s*:?\s*#?(\d+)", re.IGNORECASE)
_GPU = re.compile(r"\bGPU\b\s*:?\s*(\d+)?", re.IGNORECASE)
_BYTES = re.compile(r"(\d+) bytes")


_NODE_COLS = ("device", "device_raw", "node_name", "op_type", "start_ns", "duration_ns",
              "thread_id", "seq", "step", "params")
_KERNEL_COLS = ("device", "device_raw", "stream", "kind", "name", "node_name", "start_ns",
                "duration_ns", "bytes", "copy_kind", "step", "params")


def sniff(head: bytes) -> bool:
    text = text_head(head).lstrip()
    if text.startswith("{"):
        return '"traceEvents"' in text
    return text.startswith("[") and bool(_EVENT.search(text[:8192]))


class _Lane:
    """Where an event lands, decided once per (pid, tid) from the M names."""

    __slots__ = ("gpu", "device", "device_raw", "stream", "skip")

    def __init__(self, pname: str, tname: str, tid: Any, numbered: set[str]):
        raw = " / ".join(n for n in (pname, tname) if n)
        self.device_raw = raw or None
        self.skip = False
        self.stream = None
        tf = match_tf_device(raw)
        if tf:
            dev, stream_tag = tf
            # `/device:GPU:0 Compute` holds ops timed on the host: nodes, not kernels;
            # XProf's `/device:GPU:0` + thread `Stream #14(Compute)` is a GPU stream.
            xprof = _XPROF_STREAM.search(tname) if stream_tag is None else None
            self.gpu = dev.startswith("GPU:") and (stream_tag is not None or xprof is not None)
            if stream_tag and stream_tag.isdigit():
                self.stream = int(stream_tag)
            elif xprof:
                self.stream = int(xprof[1])
            elif self.gpu and stream_tag and dev in numbered:
                self.skip = True  # stream:all / memcpy repeat the numbered streams
        else:
            s, g = _STREAM.search(raw), _GPU.search(raw)
            self.gpu = bool(s or g)
            dev = canonical("GPU", g[1] if g and g[1] else 0) if self.gpu else "CPU:0"
            if s:
                self.stream = int(s[1])
        if self.gpu and self.stream is None and type(tid) is int:
            self.stream = tid
        self.device = dev


def _args(ev: dict) -> dict:
    """The event's args ({} where none); args that are no JSON object are an error
    (`jsonstream.located` words it with the event)."""
    args = ev.get("args") or {}
    if not isinstance(args, dict):
        raise TypeError(f"'args' is no JSON object: {str(args)[:60]}")
    return args


def _copy_key(device: str, ev: dict) -> tuple:
    args = _args(ev)
    return device, ev.get("ts"), ev.get("dur"), ev.get("name"), args.get("name")


def _event_key(ev: dict) -> tuple:
    """An X event without its device, small enough to keep for events of unnamed pids."""
    return _copy_key("", ev)[1:]


def _names(stream: EventStream) -> tuple[dict, dict, set[str], set[tuple]]:
    """Pass 1: process and thread names, devices with numbered streams, and the events of
    TF's `/memcpy` lanes (each a copy that also sits on a numbered stream)."""
    procs: dict[Any, str] = {}
    threads: dict[tuple, str] = {}
    maybe_copies: list[tuple[Any, tuple]] = []
    for ev in stream:
        if ev.get("ph") == "X" and "memcpy" in procs.get(ev.get("pid"), "memcpy"):
            # pid named /memcpy, or not named yet (TF writes the names first: none of these)
            maybe_copies.append((ev.get("pid"), _event_key(ev)))
        if ev.get("ph") == "M":
            name = _args(ev).get("name")
            if not isinstance(name, str):
                continue
            if ev.get("name") == "process_name":
                procs[ev.get("pid")] = name
            elif ev.get("name") == "thread_name":
                threads[(ev.get("pid"), ev.get("tid"))] = name
    numbered = set()
    for n in list(procs.values()) + list(threads.values()):
        tf = match_tf_device(n)
        if tf and tf[1] and tf[1].isdigit():
            numbered.add(tf[0])
    copies = set()
    for pid, key in maybe_copies:
        tf = match_tf_device(procs.get(pid, ""))
        if tf and tf[1] == "memcpy":
            copies.add((tf[0], *key))
    return procs, threads, numbered, copies


def read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    return gc_paused(located(_read(path, ctx)))  # errors name the event (jsonstream.located)


def _read(path: Path, ctx: ReadContext) -> Iterator[tuple[str, pa.RecordBatch]]:
    # decoded once when small enough, else two streaming passes
    return rows_decoded_once(path, "exact", lambda whole: _rows(path, ctx, whole))


def _rows(path: Path, ctx: ReadContext, whole: DecodedTrace | None) -> Iterator[tuple[str, pa.RecordBatch]]:
    procs, threads, numbered, copies = _names(whole or EventStream(path))
    lanes: dict[tuple, _Lane] = {}
    open_b: dict[tuple, list] = {}
    nodes = BatchBuilder("nodes", columns=_NODE_COLS)
    kernels = BatchBuilder("kernels", columns=_KERNEL_COLS)
    stream = whole or EventStream(path)
    for i, ev in enumerate(stream):
        ph = ev.get("ph")
        if ph not in ("X", "B", "E") or ev.get("cat") == "cuda_runtime":
            continue
        key = (ev.get("pid"), ev.get("tid"))
        if ph == "B":
            open_b.setdefault(key, []).append((i, ev))
            continue
        if ph == "E":
            stack = open_b.get(key)
            if not stack:
                continue  # began before the trace window
            i, begin = stack.pop()
            start = us_to_ns(need(begin, "ts", i))
            dur = us_to_ns(need(ev, "ts", i)) - start
            if ev.get("args"):  # E may carry args too; they merge into the B's
                begin = {**begin, "args": {**_args(begin), **_args(ev)}}
            ev = begin
        else:
            start = us_to_ns(need(ev, "ts", i))
            dur = us_to_ns(need(ev, "dur", i))
        yield from _emit(ev, i, start, dur, key, lanes, procs, threads, numbered, copies, nodes, kernels)
    for key, stack in open_b.items():  # never closed: start known, duration not
        for i, ev in stack:
            yield from _emit(ev, i, us_to_ns(need(ev, "ts", i)), None, key, lanes, procs,
                             threads, numbered, copies, nodes, kernels)
    if stream.meta:
        ctx.metadata["chrome_trace"] = json.loads(json.dumps(stream.meta))
    yield from flush(nodes, kernels)


def _emit(ev, i, start, dur, key, lanes, procs, threads, numbered, copies, nodes, kernels):
    lane = lanes.get(key)
    if lane is None:
        lane = lanes[key] = _Lane(procs.get(key[0], ""), threads.get(key, ""), key[1], numbered)
    if lane.skip:
        return
    name = need(ev, "name", i)
    args = _args(ev)
    node = args.get("name") if isinstance(args.get("name"), str) else None
    op = args.get("op") if isinstance(args.get("op"), str) else None
    # `args.step` is how tracedb's export keeps steps through a round trip.
    step = num(args.get("step"))
    step = int(step) if step is not None and step == int(step) else None
    extra = {k: v for k, v in args.items() if k not in ("name", "op", "step")}
    if ev.get("cat") is not None:
        extra["cat"] = ev["cat"]
    params = dumps_compact(extra) if extra else None
    if lane.gpu:
        label = " ".join(str(v) for v in (name, *args.values()) if isinstance(v, str))
        copy = copy_kind(label) if re.search(r"memcpy|HtoD|DtoH|DtoD", label, re.IGNORECASE) else None
        kind = args.get("kind")  # tracedb's own export says what each activity is
        if kind not in ("kernel", "memcpy", "memset"):
            kind = "memcpy" if copy or "memcpy" in label.lower() else (
                "memset" if "memset" in label.lower() else "kernel")
            if kind == "kernel" and copies and _copy_key(lane.device, ev) in copies:
                kind = "memcpy"  # TF timeline: repeated on the device's /memcpy lane
        if args.get("copy_kind") in COPY_KINDS:
            copy = args["copy_kind"]
        nbytes = num(args.get("bytes")) if kind != "kernel" else None  # copies and sets only
        if nbytes is None and kind != "kernel":
            m = _BYTES.search(label)
            nbytes = int(m[1]) if m else None
        yield from kernels.append((
            lane.device, lane.device_raw, lane.stream, kind, name, node, start, dur,
            int(nbytes) if nbytes is not None else None,
            copy,
            step, params,
        ))
    else:
        tid = key[1]
        yield from nodes.append((
            lane.device, lane.device_raw, node or name, op or name, start, dur,
            tid if type(tid) is int else None, i, step, params,
        ))
