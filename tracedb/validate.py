"""Validation policy: impossible values in a reader's rows are counted per file, never silently coerced.

Every batch a reader yields passes through `Validator.check` before it is written. What
it finds is counted by kind in the file's `warnings` (kept in `files.metadata` as
`{"warnings": {kind: rows}}` and printed by `tracedb ingest`); the policy per kind:

| kind | what | policy |
|---|---|---|
| `negative_duration` | `duration_ns < 0` in `nodes` / `kernels` | row kept, `duration_ns` set NULL (unknown); sums stay right |
| `unknown_device` | `device` not canonical `TYPE:INDEX` (e.g. `GPU:zero`, `ZERO`) | row kept, `device` = `UNKNOWN:0`, the source string stays in `device_raw` |
| `duplicate_event` | a timed `nodes` / `kernels` row equal to an earlier row of the same file in device, thread or stream, names, start and duration | row kept (a profiler may record two identical events); count it out with `files.metadata` |

Duplicates are found with a 64-bit hash per row (one multiply-xor pass per key column in
Arrow compute, a distinct count at the end of the file): 8 bytes a row. All checks
together cost ~0.3 µs a row (2.3 ms for the 10,866 rows of one rank of the Kineto H200
fixture, whose read takes ~115 ms; with numpy 2.0 ms). No numpy, so that `tracedb ingest`
imports pyarrow without it (`workers.arrow_without_pandas`): ~75 ms less CPU a process.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

UNKNOWN_DEVICE = "UNKNOWN:0"
# What was done with the rows of each kind (for messages).
POLICY = {
    "negative_duration": "duration_ns set NULL",
    "unknown_device": f"device set {UNKNOWN_DEVICE}, source string in device_raw",
    "duplicate_event": "kept",
}


def describe(warnings: dict[str, int]) -> str:
    """`3 duplicate_event (kept); 1 unknown_device (...)` for a one-line message."""
    return "; ".join(f"{n} {kind} ({POLICY.get(kind, 'kept')})" for kind, n in sorted(warnings.items()))
_CANONICAL = re.compile(r"^[A-Z][A-Z0-9_]*:\d{1,6}$")
_TIMED = ("nodes", "kernels")
# Columns that identify an event of a table (besides start_ns / duration_ns).
_KEYS = {
    "nodes": ("device", "thread_id", "node_name", "op_type", "start_ns", "duration_ns"),
    "kernels": ("device", "stream", "name", "node_name", "start_ns", "duration_ns"),
}
_MIX = 0x9E3779B97F4A7C15
_SHIFT = 29


class Validator:
    """One source file's checks; `warnings` counts rows per kind."""

    def __init__(self) -> None:
        self.warnings: dict[str, int] = {}
        self._hashes: dict[str, list[pa.Array]] = {t: [] for t in _TIMED}

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.warnings[kind] = self.warnings.get(kind, 0) + n

    def check(self, table: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        if "device" in names:
            batch = self._devices(batch)
        if table in _TIMED and "duration_ns" in names:
            batch = self._durations(batch)
            if all(k in names for k in _KEYS[table]):
                self._hashes[table].append(self._row_hashes(batch, _KEYS[table]))
        return batch

    def finish(self) -> dict[str, int]:
        """Count duplicates over the whole file; returns the warnings."""
        for table, parts in self._hashes.items():
            if parts:
                h = pa.chunked_array(parts, pa.uint64())
                self._count("duplicate_event", len(h) - pc.count_distinct(h).as_py())
            parts.clear()
        return dict(sorted(self.warnings.items()))

    def _devices(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        col = batch.column("device")
        bad = [d for d in pc.unique(col).to_pylist() if d is not None and not _CANONICAL.match(d)]
        if not bad:
            return batch
        mask = pc.is_in(col, pa.array(bad, col.type))
        self._count("unknown_device", pc.sum(mask).as_py() or 0)
        batch = _set(batch, "device", pc.if_else(mask, pa.scalar(UNKNOWN_DEVICE, col.type), col))
        if "device_raw" in batch.schema.names:
            raw = batch.column("device_raw")
            keep = pc.if_else(pc.and_(mask, pc.is_null(raw)), col, raw)
            batch = _set(batch, "device_raw", keep.cast(raw.type))
        return batch

    def _durations(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        col = batch.column("duration_ns")
        neg = pc.fill_null(pc.less(col, 0), False)
        n = pc.sum(neg).as_py() or 0
        if not n:
            return batch
        self._count("negative_duration", n)
        return _set(batch, "duration_ns", pc.if_else(neg, pa.scalar(None, col.type), col))

    @staticmethod
    def _row_hashes(batch: pa.RecordBatch, keys: tuple[str, ...]) -> pa.Array:
        timed = pc.is_valid(batch.column("start_ns"))
        if not pc.all(timed).as_py():
            batch = batch.filter(timed)
        mix, shift = pa.scalar(_MIX, pa.uint64()), pa.scalar(_SHIFT, pa.uint64())
        h = pa.repeat(pa.scalar(0, pa.uint64()), batch.num_rows)
        for k in keys:  # uint64 `multiply` wraps around, `shift_right` is logical
            h = pc.multiply(pc.bit_wise_xor(h, _column_ints(batch.column(k))), mix)
            h = pc.bit_wise_xor(h, pc.shift_right(h, shift))
        return h


def _column_ints(col: pa.Array) -> pa.Array:
    """A column as uint64s equal for equal values (strings through Python's hash)."""
    if pa.types.is_integer(col.type):
        return pc.fill_null(col.cast(pa.int64()), -(1 << 62) + 7).view(pa.uint64())
    enc = pc.dictionary_encode(col.cast(pa.string()))
    table = pa.array([hash(v) for v in enc.dictionary.to_pylist()] + [0x5EED], pa.int64()).view(pa.uint64())
    return table.take(pc.fill_null(enc.indices, len(enc.dictionary)))


def _set(batch: pa.RecordBatch, name: str, col: pa.Array) -> pa.RecordBatch:
    i = batch.schema.get_field_index(name)
    return batch.set_column(i, batch.schema.field(i), col) if hasattr(batch, "set_column") else \
        pa.RecordBatch.from_arrays([col if j == i else batch.column(j) for j in range(batch.num_columns)],
                                   schema=batch.schema)
