"""Compaction's streaming merge (`lake.merge_files`, issue 22): the rows of several files
in run order, written as the in-memory merge writes them, without holding them in memory
(at 20,000 runs the in-memory merge of ten kernels files, 48 MB of Parquet, passed 15 GB).

The oracle is Python's stable sort on (run_id, device) of the inputs' rows read with
pyarrow, in input order, less the rows whose (run_id, ingest_id) is not kept; the memory
test merges, in a fresh process, files whose repeated names decode to ~40 times their
Parquet size and reads the child's peak RSS from the kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracedb import lake, storage

TABLE = "nodes"  # the seed lake's table whose runs have several devices (TF: CPU and GPU streams)


def _oracle(tables: list[pa.Table], keep: set[tuple[str, str]] | None) -> pa.Table:
    data = pa.concat_tables(tables)
    runs, devices = data.column("run_id").to_pylist(), data.column("device").to_pylist()
    ingests = data.column("ingest_id").to_pylist()
    rows = [i for i in range(data.num_rows) if keep is None or (runs[i], ingests[i]) in keep]
    return data.take(pa.array(sorted(rows, key=lambda i: (runs[i], devices[i])), pa.int64()))


def _inputs(seed_warehouse, tmp_path) -> list[str]:
    """The seed lake's TABLE files (each in run order), a copy of one with its rows
    reversed (out of order: several devices of runs interleaved) and a slice of another."""
    lk = lake.Lake(seed_warehouse)
    out = []
    for i, rel in enumerate(lk.add_actions(TABLE).column("path").to_pylist()):
        t = pq.read_table(seed_warehouse / rel, schema=lake.file_schema(TABLE))
        for name, part in ((f"in{i}", t), (f"rev{i}", t.take(pa.array(range(t.num_rows - 1, -1, -1)))),
                           (f"half{i}", t.slice(0, t.num_rows // 2))):
            pq.write_table(part, tmp_path / f"{name}.parquet")
            out.append(f"{name}.parquet")
    return out


def _way(monkeypatch, way: str) -> None:
    """Merge by cursors, or in memory (`lake._merge_in_memory`: few rows a run), whatever the inputs."""
    if way == "cursors":
        monkeypatch.setattr(lake, "MERGE_IN_MEMORY_ROWS", 0)
    else:
        monkeypatch.setattr(lake, "MERGE_IN_MEMORY_RUN_ROWS", 1 << 40)


@pytest.mark.parametrize("way, passes", [("cursors", lake.MERGE_PASSES), ("cursors", 1), ("memory", 1)])
def test_a_streamed_merge_writes_the_rows_and_row_groups_of_a_stable_sort(seed_warehouse, tmp_path, monkeypatch,
                                                                           way, passes):
    _way(monkeypatch, way)
    monkeypatch.setattr(lake, "ROW_GROUP_ROWS", 250)
    monkeypatch.setattr(lake, "MERGE_BATCH_ROWS", 101)  # batches cut across runs and row groups
    monkeypatch.setattr(lake, "MERGE_PASSES", passes)  # 1: an out-of-order file is sorted whole
    sources = _inputs(seed_warehouse, tmp_path)
    tables = [pq.read_table(tmp_path / s) for s in sources]
    data = pa.concat_tables(tables)
    pairs = sorted(set(zip(data.column("run_id").to_pylist(), data.column("ingest_id").to_pylist())))
    assert len({r for r, _ in pairs}) >= 3 and len(set(data.column("device").to_pylist())) >= 2
    keep = set(pairs[1:])  # one run's rows dropped, as a superseded ingest's are
    f = lake.merge_files(storage.open_storage(tmp_path), TABLE, sources, "out.parquet",
                         pa.array([f"{r}\x00{i}" for r, i in keep]))
    want = _oracle(tables, keep)
    got = pq.ParquetFile(tmp_path / f.rel)
    assert got.read().equals(want)
    assert [got.metadata.row_group(g).num_rows for g in range(got.metadata.num_row_groups)] == \
        [min(250, want.num_rows - s) for s in range(0, want.num_rows, 250)]
    runs = want.column("run_id").to_pylist()
    assert (f.rows, f.run_id, f.run_hi, f.device, f.device_hi) == (
        want.num_rows, runs[0], runs[-1], min(want.column("device").to_pylist()),
        max(want.column("device").to_pylist()))


@pytest.mark.parametrize("way", ["cursors", "memory"])
def test_a_merge_that_keeps_no_row_writes_no_file(seed_warehouse, tmp_path, monkeypatch, way):
    _way(monkeypatch, way)
    sources = _inputs(seed_warehouse, tmp_path)[:2]
    assert lake.merge_files(storage.open_storage(tmp_path), TABLE, sources, "out.parquet",
                            pa.array([], pa.string())) is None
    assert not (tmp_path / "out.parquet").exists()


# The child's peak RSS from its own memory map (VmHWM): getrusage's ru_maxrss keeps the
# forked parent's (the test's rows) across exec.
_CHILD = """
import sys
from pathlib import Path
from tracedb import lake, storage
f = lake.merge_files(storage.open_storage(sys.argv[1]), "kernels", sys.argv[2:], "out.parquet")
hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
print(f.rows, int(hwm.split()[1]) * 1024)
"""


def test_a_merge_holds_a_batch_of_each_file_not_their_rows(tmp_path):
    """Four files of 400 k kernel rows whose 400-byte names repeat: ~2 MB of Parquet, ~880 MB
    of rows in memory (the in-memory merge's peak RSS: 2.6 GB; streamed: ~300 MB, of which
    ~60 MB is Python and the imports, ~70 MB a row group of 128 k rows)."""
    sch = lake.file_schema("kernels")
    n, files = 400_000, []
    for i in range(4):
        cols = {f.name: pa.nulls(n, f.type) for f in sch}
        cols |= {"run_id": pa.array([f"run{i}{j:02d}" for j in range(40) for _ in range(n // 40)]),
                 "device": pa.repeat("GPU:0", n), "ingest_id": pa.repeat("i", n),
                 "name": pa.repeat("void at::native::elementwise_kernel<128, 4>" * 9 + str(i), n)}
        pq.write_table(pa.table(cols, schema=sch), tmp_path / f"f{i}.parquet")
        files.append(f"f{i}.parquet")
    in_memory = sum(pq.read_table(tmp_path / f).nbytes for f in files)
    assert in_memory > 800 << 20
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), *files], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent)
    rows, peak = map(int, out.stdout.split())
    assert rows == 4 * n
    assert peak < 450 << 20, f"peak RSS {peak >> 20} MB merging {in_memory >> 20} MB of rows"
    got = pq.read_table(tmp_path / "out.parquet", columns=["run_id"]).column("run_id").to_pylist()
    assert got == sorted(got)


def test_rows_by_run_gives_each_live_runs_rows_in_run_order(seed_warehouse, tmp_path, monkeypatch):
    """`lake.rows_by_run` (migration 0015's read): the rows of several files of overlapping
    run ranges, run by run in run order, each run's rows of its named ingest only (the
    oracle: the inputs' rows read with pyarrow, filtered in Python); a file whose rows are
    not in run order is refused."""
    from collections import Counter

    monkeypatch.setattr(lake, "RUN_BATCH_ROWS", 101)  # batches cut across runs
    lk = lake.Lake(seed_warehouse)
    sources = []
    for i, rel in enumerate(lk.add_actions(TABLE).column("path").to_pylist()):
        t = pq.read_table(seed_warehouse / rel, schema=lake.file_schema(TABLE))
        for name, part in ((f"in{i}", t), (f"half{i}", t.slice(t.num_rows // 3, t.num_rows // 2))):
            pq.write_table(part, tmp_path / f"{name}.parquet")
            sources.append(f"{name}.parquet")
    data = pa.concat_tables([pq.read_table(tmp_path / s) for s in sources])
    runs = sorted(set(data.column("run_id").to_pylist()))
    assert len(runs) >= 3
    live = {r: i for r, i in zip(data.column("run_id").to_pylist(), data.column("ingest_id").to_pylist())}
    live.pop(runs[1])  # a run not asked for
    live[runs[-1]] = "another-ingest"  # a run whose rows here are of a superseded ingest

    columns = ("run_id", "device", "node_name", "duration_ns")
    pieces = list(lake.rows_by_run(storage.open_storage(tmp_path), TABLE, sources, columns, live))
    order = [r for r, _, _ in pieces]
    assert order == sorted(order)  # run order, each run's pieces together
    assert all(p.column_names == list(columns) for _, _, p in pieces)
    got = Counter(tuple(row.values()) for _, _, p in pieces for row in p.to_pylist())
    cols = (data.column(c).to_pylist() for c in (*columns, "ingest_id"))
    want = Counter((r, d, n, ns) for r, d, n, ns, i in zip(*cols) if live.get(r) == i)
    assert got == want and {k[0] for k in want} == set(runs) - {runs[1], runs[-1]}

    # the inputs' rows reversed in one file: several runs, out of order
    pq.write_table(data.take(pa.array(range(data.num_rows - 1, -1, -1))), tmp_path / "rev.parquet")
    with pytest.raises(lake.NotInRunOrder):
        list(lake.rows_by_run(storage.open_storage(tmp_path), TABLE, ["rev.parquet"], columns, live))
