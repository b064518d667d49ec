"""A merge too large to gather at once (`lake.GATHER_BYTES`) writes the same file, row
group by row group (issue 22: compaction of a 20,000-run lake failed with "offset
overflow while concatenating arrays" once a merge's kernel names passed 2 GiB).

The oracle orders the rows with Python's stable sort on (run_id, device), as the merge
promises: a run's rows keep their order."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tracedb import lake, storage


def _merge(wh, tmp_path, parts, monkeypatch, gather_bytes: int) -> pa.Table:
    monkeypatch.setattr(lake, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(lake, "GATHER_BYTES", gather_bytes)
    f = lake.write_merged(storage.open_storage(tmp_path), "kernels", parts, f"kernels/m{gather_bytes}.parquet", "i")
    out = pq.ParquetFile(tmp_path / f.rel)
    assert out.metadata.num_row_groups == -(-sum(p.num_rows for p in parts) // 50)
    assert (f.run_id, f.run_hi, f.rows) == (min(r for p in parts for r in p.column("run_id").to_pylist()),
                                            max(r for p in parts for r in p.column("run_id").to_pylist()),
                                            sum(p.num_rows for p in parts))
    return out.read()


def test_a_merge_gathered_a_row_group_at_a_time_writes_the_same_rows(seed_warehouse, tmp_path, monkeypatch):
    lk = lake.Lake(seed_warehouse)
    parts = [pq.read_table(seed_warehouse / p) for p in lk.add_actions("kernels").column("path").to_pylist()]
    parts += [p.slice(0, p.num_rows // 2) for p in parts]  # the same runs again: each run's rows from two parts
    data = pa.concat_tables(parts)
    runs, devices = data.column("run_id").to_pylist(), data.column("device").to_pylist()
    assert len(set(runs)) >= 3 and data.num_rows > 500
    want = data.take(pa.array(sorted(range(data.num_rows), key=lambda i: (runs[i], devices[i]))))
    one = _merge(seed_warehouse, tmp_path, parts, monkeypatch, lake.GATHER_BYTES)
    groups = _merge(seed_warehouse, tmp_path, parts, monkeypatch, 0)
    assert groups.schema.equals(one.schema) and groups.schema.field("name").type == pa.string()
    assert groups.equals(want) and one.equals(want)
