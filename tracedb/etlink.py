"""The run-level step that joins a PyTorch execution trace to the Kineto trace beside it.

Readers parse one file each (maybe in worker processes), so the join is a key column of
`nodes` that both readers fill: `rf_id` with `process_id` (see tracedb/formats/chakra_et.py).
PyTorch 2.1+ writes the record-function id into both files and nothing is left to do here.
Older Kineto traces lack it: once a run's files are read, and before they are committed,
`link_run` pairs each such Kineto file's ops with the ops of the execution trace of the
same process by `chakra_et.match_ops` (name and thread order, anchored by autograd
sequence numbers) and rewrites that file's `nodes` parquet with the matched ET nodes'
`rf_id`: the same SQL join then serves both. Only a run holding both kinds of file pays
for it (one read and write of the Kineto file's nodes, in the ingesting process).

Shapes. A Kineto trace recorded without `record_shapes` has no `Input Dims`, so its
matrix ops and convolutions have no FLOPs, while the execution trace of the same ops has
every argument's shape, dtype and value. Once joined, each Kineto op without input shapes
takes its ET twin's (`input_shapes`, `input_dtypes`, and the scalar arguments as the
profiler's `Concrete Inputs`, which the convolution / attention rules read), `params`
says `"shapes_from": "execution_trace"`, and the file's FLOPs are worked out again
(`flops.annotate_nodes`): so `mfu`, `op_flops` and `roofline` count them like any op
recorded with its shapes, once (the ET's own rows never count).

Each file's `files.metadata` says how its ops were joined: `et_link` = {method
(`record_function_id` | `name_order`), the other file, `linked` (ops paired), `ops` (its
ops)}. A failure here costs the link, never the run: it is counted in the Kineto file's
`warnings` and the run lands unlinked.
"""

from __future__ import annotations

import json
from pathlib import Path
from tracedb import lake, storage
from tracedb.store import FileResult

_MARKER = "[pytorch|profiler|execution_"


def link_run(results: list[FileResult], store: storage.Storage) -> None:
    """Join the run's execution traces to its Kineto traces (module docstring)."""
    ets = [r for r in results if r.ok and r.format == "chakra_et" and _nodes_files(r)]
    kinetos = [r for r in results if r.ok and r.format == "kineto" and _nodes_files(r)]
    if not ets or not kinetos:
        return
    folder = store.local_path()
    if folder is None:
        for k in kinetos:
            k.warnings["execution trace not linked: the fallback join runs on a local warehouse only"] = 1
        return
    by_pid = {}
    for et in ets:
        by_pid.setdefault((et.metadata.get("execution_trace") or {}).get("pid"), et)
    for k in kinetos:
        try:
            _link_kineto(k, by_pid, folder)
        except Exception as e:  # noqa: BLE001 - the link is a bonus: the run lands without it
            k.warnings[f"execution trace not linked: {type(e).__name__}: {' '.join(str(e).split())}"] = 1


def _nodes_files(r: FileResult) -> list[lake.DataFile]:
    return [w for w in r.written if w.table == "nodes"]


def _link_kineto(k: FileResult, by_pid: dict, root: Path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tracedb.formats import chakra_et

    for w in _nodes_files(k):
        table = pq.read_table(root / w.rel)
        pids = [p for p in pc.unique(table.column("process_id")).to_pylist() if p is not None]
        have_rf = table.column("rf_id").null_count < table.num_rows
        new_rf = table.column("rf_id").to_pylist()
        changed = False
        shapes = _Shapes(table)
        for pid in pids:
            et = by_pid.get(pid)
            if et is None:
                continue
            et_ops = _et_ops(et, root)
            mine = pc.equal(table.column("process_id"), pid)
            if have_rf:  # PyTorch 2.1+: the SQL join needs nothing; say how many ops it pairs
                ids = set(pc.filter(table.column("rf_id"), mine).to_pylist())
                linked = sum(1 for o in et_ops if o[4] in ids)
                _note(k, et, "record_function_id", linked, int(pc.sum(mine).as_py()), len(et_ops))
            else:
                kin_ops = _kineto_ops(table, pid)
                match = chakra_et.match_ops([o[:4] for o in et_ops], kin_ops)
                rf_of = {o[0]: o[4] for o in et_ops}
                for row, et_id in match.items():
                    new_rf[row] = rf_of[et_id]
                changed = changed or bool(match)
                _note(k, et, "name_order", len(match), len(kin_ops), len(et_ops))
            shapes.fill(pid, new_rf, _et_shapes(et, root))
        if changed:
            i = table.schema.get_field_index("rf_id")
            table = table.set_column(i, table.schema.field(i), pa.array(new_rf, pa.int64()))
        if shapes.filled:
            k.metadata.setdefault("et_link", {})["shapes_from_execution_trace"] = shapes.filled
            table = shapes.apply(table)
        if changed or shapes.filled:
            _rewrite(table, root, w)


class _Shapes:
    """The Kineto ops without input shapes take their ET twin's (module docstring)."""

    def __init__(self, table):
        self.pid = table.column("process_id").to_pylist()
        self.shapes = table.column("input_shapes").to_pylist()
        self.dtypes = table.column("input_dtypes").to_pylist()
        self.params = table.column("params").to_pylist()
        self.filled = 0

    def fill(self, pid: int, rf: list, et: dict[int, tuple]) -> None:
        for row, (p, r) in enumerate(zip(self.pid, rf)):
            if p != pid or r is None or self.shapes[row] or r not in et:
                continue
            shapes, dtypes, values = et[r]
            if not shapes or all(s is None for s in shapes):
                continue
            params = json.loads(self.params[row]) if self.params[row] else {}
            params["shapes_from"] = "execution_trace"
            params.setdefault("Concrete Inputs", [_concrete(v, d) for v, d in zip(values or (), dtypes or ())])
            self.shapes[row], self.dtypes[row] = shapes, dtypes
            self.params[row] = json.dumps(params, separators=(",", ":"))
            self.filled += 1

    def apply(self, table):
        """The table with the filled columns and every op's FLOPs worked out again."""
        import pyarrow as pa

        from tracedb import flops

        for name, values in (("input_shapes", self.shapes), ("input_dtypes", self.dtypes), ("params", self.params)):
            i = table.schema.get_field_index(name)
            table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
        for name in ("flops_counted", "flops_dtype"):  # worked out again from the new shapes
            i = table.schema.get_field_index(name)
            table = table.set_column(i, table.schema.field(i), pa.nulls(table.num_rows, table.schema.field(i).type))
        batch = table.combine_chunks().to_batches()
        return pa.Table.from_batches([flops.annotate_nodes(b) for b in batch], schema=table.schema) if batch else table


def _concrete(value: str | None, dtype: str | None) -> str:
    """An ET argument as the profiler's `Concrete Inputs` writes it: '' for a tensor, a
    scalar or list as text (`True`, `2`, `[1, 1]`)."""
    from tracedb import flops

    if value is None or dtype in flops.ELEMENT_BYTES or (dtype or "").startswith(("Tensor", "GenericList[Tensor")):
        return ""
    try:
        v = json.loads(value)
    except ValueError:
        return value
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, str):
        return v
    return json.dumps(v)


def _et_shapes(et: FileResult, root: Path) -> dict[int, tuple]:
    """rf_id -> (input shapes, input dtypes, input values) of the execution trace's ops."""
    import pyarrow.parquet as pq

    out = {}
    for w in _nodes_files(et):
        t = pq.read_table(root / w.rel, columns=["rf_id", "input_shapes", "input_dtypes", "inputs"])
        for rf, shapes, dtypes, values in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            if rf is not None:
                out[rf] = (shapes, dtypes, values)
    return out


def _note(k: FileResult, et: FileResult, method: str, linked: int, kineto_ops: int, et_ops: int) -> None:
    k.metadata["et_link"] = {"method": method, "execution_trace": et.rel, "linked": linked, "ops": kineto_ops}
    et.metadata["et_link"] = {"method": method, "kineto_trace": k.rel, "linked": linked, "ops": et_ops}


def _et_ops(et: FileResult, root: Path) -> list[tuple]:
    """(ET id, thread, name, seq_id, rf_id) of the execution trace's ops (markers left out)."""
    import pyarrow.parquet as pq

    out = []
    for w in _nodes_files(et):
        t = pq.read_table(root / w.rel, columns=["seq", "thread_id", "node_name", "params", "rf_id"])
        for seq, tid, name, params, rf in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            if name.startswith(_MARKER) or rf is None:
                continue
            out.append((seq, tid, name, json.loads(params).get("seq_id") if params else None, rf))
    return out


def _kineto_ops(table, pid: int) -> list[tuple]:
    """(row, thread, name, Sequence number, start, duration) of the process's Kineto ops."""
    cols = [table.column(c).to_pylist() for c in ("process_id", "thread_id", "node_name", "params",
                                                   "start_ns", "duration_ns")]
    out = []
    for row, (p, tid, name, params, start, dur) in enumerate(zip(*cols)):
        if p != pid:
            continue
        seq = json.loads(params).get("Sequence number") if params and "Sequence number" in params else None
        out.append((row, tid, name, seq, start, dur or 0))
    return out


def _rewrite(table, root: Path, w: lake.DataFile) -> None:
    """The nodes file again, written as `store.FileWriter` writes it, at the same path."""
    import pyarrow.parquet as pq

    from tracedb.store import dictionary_columns

    pq.write_table(table, root / w.rel, compression="zstd", write_page_checksum=True,
                   use_dictionary=dictionary_columns("nodes"))
    w.size, w.sha256 = lake.size_and_hash(root / w.rel)
