"""Every canned query gives the same rows on the schema-8 layout as on the layout of
schema 7 (issue 22).

Schema 8 keeps a table's rows in files of many runs (an ingest group's, or merged by
compaction), ordered by run_id, and its views read the files as a `read_parquet` list (two:
with the live-ingest filter, the files that may hold dead rows (schema 9); without, the
others). Schema 7 kept one folder a
run and device (Hive partitions) and views over the live files' list. Here the rows of a
lake built by today's ingest (groups of runs in one file, a run re-ingested so that its
old rows stay in a group file, a run removed, a compaction) are also written out, each
run's live rows only, in schema 7's layout, and views are made over them the way schema 7
made them (Hive partitioning, `run_id` and `device` from the paths). Every canned query,
for the fleet and for three of the runs (rotating through the library, so that every run
is checked by many queries), must return the same table (values, types, order) from
both.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import scenario
from tracedb import catalog, schema, sqllib
from tracedb import query as q
from tracedb.api import Warehouse
from tracedb.ingest import ingest
from tracedb.lake import Lake

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def fleet_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The schema-8 lake, and the same live rows in schema 7's folder layout beside it."""
    base = tmp_path_factory.mktemp("layouts")
    runs = base / "runs"
    group = {"kineto_a": "kineto_h200_fp32", "tf_a": "tf_stepstats_gpu_streams", "mge_a": "megengine_graph_profile",
             "tf_b": "tf_stepstats_gpu_streams", "gone": "node_shape_dump"}
    for run_id, name in group.items():  # one ingest: one file a table holds these five runs
        (runs / run_id).mkdir(parents=True)
        src = scenario(name)
        (runs / run_id / src.name).symlink_to(src.resolve())
    wh = base / "wh"
    assert ingest([runs], wh).ok
    for name in ("hta_nccl_allreduce", "hta_nccl_two_ranks"):
        assert ingest([DATA / name], wh, run_id=name).ok
    # tf_b again, as a Kineto run: its old rows stay in the group's files, hidden
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="tf_b").ok
    Warehouse(wh).rm("gone")  # its rows stay too, until compaction
    assert ingest([scenario("megengine_graph_profile")], wh, run_id="mge_b").ok
    lake = Lake(wh)
    assert any(r["run_id"] != r["run_hi"] for r in lake.add_actions("kernels").to_pylist())  # files of many runs
    old = base / "hive"
    _write_hive(lake, old)
    return wh, old


@pytest.fixture(scope="module")
def seed_pair(seed_warehouse, tmp_path_factory) -> tuple[Path, Path]:
    """The seed warehouse (every shipped trace, a run each) in both layouts."""
    old = tmp_path_factory.mktemp("seed_hive")
    _write_hive(Lake(seed_warehouse), old)
    return seed_warehouse, old


@pytest.fixture(params=["seed", "fleet"])
def lake_pair(request):
    return request.getfixturevalue(f"{request.param}_pair")


def _write_hive(lake: Lake, out: Path) -> None:
    """Each run's live rows of each data table, one file a run and device under
    `<table>/run_id=<id>/device=<dev>/`, without those columns (schema 7's files)."""
    published = lake.published()
    for table in schema.TABLES:
        for path in lake.live_files(table)[0]:
            rows = pq.read_table(lake.root / path)
            for run, live in published.items():
                mine = rows.filter(pc.and_(pc.equal(rows.column("run_id"), run), pc.equal(rows.column("ingest_id"), live)))
                for device in sorted(set(mine.column("device").to_pylist())):
                    part = mine.filter(pc.equal(mine.column("device"), device)).drop_columns(["run_id", "device"])
                    folder = (out / table / f"run_id={urllib.parse.quote(run, safe='')}"
                              / f"device={urllib.parse.quote(device, safe='')}")
                    folder.mkdir(parents=True, exist_ok=True)
                    pq.write_table(part, folder / f"part-{len(list(folder.iterdir()))}.parquet")


def _schema7_connection(wh: Path, old: Path) -> duckdb.DuckDBPyConnection:
    """The views as schema 7's snapshot made them: the metadata tables from the snapshot,
    each data view a read of its Hive files' list."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{wh / 'catalog.duckdb'}' AS snap (READ_ONLY)")
    for name in ("runs", "files", "ingest_log", "acceptances"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM snap.main.{name}")
    for table, sch in schema.TABLES.items():
        files = sorted(str(p) for p in (old / table).rglob("*.parquet")) if (old / table).is_dir() else []
        cols = ", ".join(f'"{f.name}"' for f in sch)
        if files:
            listed = "[" + ", ".join(f"'{f}'" for f in files) + "]"
            body = (f"SELECT {cols} FROM read_parquet({listed}, hive_partitioning = true, "
                    "hive_types = {'run_id': VARCHAR, 'device': VARCHAR})")
        else:
            body = f"SELECT {cols} FROM snap.main.{table} WHERE false"
        con.execute(f"CREATE VIEW {table} AS {body}")
    return con


RUNS_A_QUERY = 3  # besides the fleet; rotating, so that every run is checked by a third of the queries


def _param_sets(cq, runs: list[str], turn: int):
    """The fleet and `RUNS_A_QUERY` of the runs (the query's `turn` in the library picks
    which: over the library every run is checked by many queries, every query on several
    runs), with the query's defaults (and the other order_by choices)."""
    names = {p.name for p in cq.params}
    orders = cq.param("order_by").choices if "order_by" in names else [None]
    mine = [runs[(turn * RUNS_A_QUERY + i) % len(runs)] for i in range(RUNS_A_QUERY)]
    for run in ([None, *mine] if "run_id" in names else [None]):
        for order in orders:
            values = {"run_id": run} if "run_id" in names else {}
            if order:
                values["order_by"] = order
            yield values


def test_every_canned_query_gives_the_same_rows_on_both_layouts(lake_pair):
    wh, old = lake_pair
    new_con, old_con = catalog.connect(wh), _schema7_connection(*lake_pair)
    runs = [r for (r,) in new_con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
    assert "gone" not in runs and len(runs) >= 7
    nonempty, checked = 0, set()
    for turn, cq in enumerate(sqllib.list_queries()):
        if any(p.required and p.name != "run_id" for p in cq.params):
            continue  # needs a value this fleet has no meaning for (compare_runs' pair is below)
        for values in _param_sets(cq, runs, turn):
            checked.add(values.get("run_id"))
            bound = sqllib.bind(cq, values)
            got, want = q.execute(new_con, cq, bound), q.execute(old_con, cq, bound)
            assert got.schema == want.schema, (cq.name, values)
            assert got.equals(want), (cq.name, values)
            nonempty += got.num_rows > 0
    assert nonempty > 60 and checked == {None, *runs}  # (> 80 when every query ran on every run)
    for table in schema.TABLES:  # and the views themselves, row for row
        cols = ", ".join(f'"{f.name}"' for f in schema.TABLES[table])
        sql = f"SELECT {cols} FROM {table} ORDER BY ALL"
        assert new_con.execute(sql).fetchall() == old_con.execute(sql).fetchall(), table


def test_a_one_run_query_scans_only_the_row_groups_that_can_hold_the_run(lake_pair):
    """The plan of a one-run query over each data view scans the row groups whose run_id
    statistics hold the run, none other, whatever else the lake holds (the files' own
    statistics, read here with pyarrow), plus every row group of `runs` when the live
    filter applies."""
    import re

    wh, _ = lake_pair
    con = catalog.connect(wh)
    lake = Lake(wh)
    runs_groups = sum(pq.ParquetFile(wh / p).metadata.num_row_groups for p in lake.add_actions("runs").column("path").to_pylist())
    dead = {Path(p).name for p in lake.dead_row_files()}
    for run in [r["run_id"] for r in Lake(wh).read_table("runs").to_pylist()][:4]:
        for table in ("kernels", "nodes"):
            holding, total, filtered = 0, 0, False
            for path in lake.live_files(table)[0]:
                meta = pq.ParquetFile(wh / path).metadata
                col = meta.schema.to_arrow_schema().get_field_index("run_id")
                for g in range(meta.num_row_groups):
                    st = meta.row_group(g).column(col).statistics
                    holding += st.min <= run <= st.max
                total += meta.num_row_groups
                filtered |= Path(path).name in dead
            plan = con.execute(f"EXPLAIN ANALYZE SELECT count(*) FROM {table} WHERE run_id = ?", [run]).fetchall()[0][1]
            scans = [(int(a), int(b)) for a, b in re.findall(r"Row Groups Scanned: *(\d+) */ *(\d+)", plan)]
            want = (holding + (runs_groups if filtered else 0), total + (runs_groups if filtered else 0))
            assert (sum(a for a, _ in scans), sum(b for _, b in scans)) == want, (run, table, scans, want)
            assert holding < total or total == 1, (run, table)  # some row group is skipped