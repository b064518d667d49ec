"""Every column of the nsys reader's runtime_calls and annotations, and every kernel's
params, against an oracle worked out from the export with SQL (tests/rawtrace.py:
correlated subqueries for the enclosing range, the launched activities and the step; the
params as the module docstring spells them), on both real exports and on the nvFuser
export with its NVTX ranges and calls varied (payloads, colors, categories, domains,
start/end ranges, ranges left open or ended on another thread, step ranges, return
values, event classes, a backtrace row): the reader makes these columns from whole
columns, once per distinct value, so each varied field must still land on its own row.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

import rawtrace
from rawtrace import NSYS_NVFUSER, NSYS_SAXPY
from tracedb.formats import nsys
from tracedb.formats.base import ReadContext


def _read(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list] = {}
    for table, batch in nsys.read(path, ReadContext("run", path.name)):
        out.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b).to_pylist() for t, b in out.items()}


def _varied(tmp_path: Path) -> Path:
    """The nvFuser export with its NVTX rows and runtime calls varied row by row."""
    path = tmp_path / "varied.sqlite"
    shutil.copyfile(NSYS_NVFUSER, path)
    con = sqlite3.connect(path)
    ranges = [r for (r,) in con.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start")]
    for i, rowid in enumerate(ranges):
        sets = {0: "color = -16711936 + ?1, category = 3, int64Value = ?1 * 1000",
                1: "doubleValue = ?1 / 8.0, rangeId = ?1, endGlobalTid = globalTid + 1, eventType = 60",
                2: "domainId = 5, category = 3, uint32Value = ?1",
                3: "\"end\" = NULL",
                4: "jsonText = '{\"k\": ' || ?1 || '}', category = 4, floatValue = 0.5",
                5: "domainId = 7, text = 'range ' || ?1, textId = NULL",
                }.get(i % 9)
        if sets:
            con.execute(f"UPDATE NVTX_EVENTS SET {sets} WHERE rowid = ?2", (i, rowid))
    last = -1  # step ranges, one after another (steps do not nest)
    for i, rowid in enumerate(ranges[6::9]):
        start, end = con.execute("SELECT start, \"end\" FROM NVTX_EVENTS WHERE rowid = ?", (rowid,)).fetchone()
        if start > last:
            con.execute("UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE rowid = ?", (f"step {i}", rowid))
            last = end
    (t0, gtid), = con.execute("SELECT min(start), globalTid FROM NVTX_EVENTS")
    for dt, kind, text, domain, category in ((-9, 75, "my domain", 5, None), (-8, 33, "cat in 5", 5, 3),
                                             (-7, 33, "global cat", 0, 3), (-6, 33, "cat four", 0, 4)):
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, domainId, category, globalTid) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (t0 + dt, kind, text, domain, category, gtid))
    calls = [r for (r,) in con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start")]
    for i, rowid in enumerate(calls[::3]):
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET returnValue = ?, eventClass = ?, callchainId = ? "
                    "WHERE rowid = ?", (i % 4, (0, 1, 0, 5)[i % 4], i if i % 5 == 0 else None, rowid))
    launch = con.execute("SELECT correlationId, start, end, globalTid, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                         "WHERE correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL) "
                         "AND callchainId IS NULL LIMIT 1").fetchone()
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (correlationId, start, end, globalTid, nameId, eventClass, "
                "returnValue, callchainId) VALUES (?, ?, ?, ?, ?, 67, 0, 4242)", launch)
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> list[tuple[Path, int | None]]:
    return [(NSYS_NVFUSER, None), (NSYS_SAXPY, 0), (_varied(tmp_path_factory.mktemp("nsys")), None)]


def _only(rows: list[dict], like: list[dict]) -> list[dict]:
    keys = like[0].keys() if like else ()
    return [{k: r[k] for k in keys} for r in rows]


def test_runtime_calls_every_column(exports):
    for path, rank in exports:
        want = rawtrace.nsys_call_rows(path, rank)
        got = _only(_read(path)["runtime_calls"], want)
        assert len(got) == len(want) > 50
        for g, w in zip(got, want):
            assert g == w, path.name
    varied = rawtrace.nsys_call_rows(exports[2][0], None)
    assert {r["category"] for r in varied} == {"cuda_runtime", "cuda_driver"}
    assert len({r["step"] for r in varied}) >= 3 and sum(r["node_name"] is not None for r in varied) > 500
    assert sum('"return_value"' in (r["params"] or "") for r in varied) > 100
    assert sum('"callchain_id":4242' in (r["params"] or "") for r in varied) == 1  # the backtrace row's


def test_annotations_every_column(exports):
    for path, rank in exports:
        want = rawtrace.nsys_annotation_rows(path, rank)
        got = _only(_read(path)["annotations"], want)
        assert len(got) == len(want) > 20
        for g, w in zip(got, want):
            assert g == w, path.name
    params = [json.loads(r["params"]) for r in rawtrace.nsys_annotation_rows(exports[2][0], None)]
    assert {p.get("payload_type") for p in params} == {None, "int64", "double", "uint32", "json"}
    assert {p.get("nvtx_category") for p in params} == {None, "cat in 5", "global cat", "cat four"}
    assert {p.get("domain") for p in params} == {None, "my domain", "domain 7"}
    assert sum("end_thread_id" in p for p in params) > 10 and sum("range_id" in p for p in params) > 10
    assert len({r["step"] for r in rawtrace.nsys_annotation_rows(exports[2][0], None)}) > 10


def test_kernel_params(exports):
    for path, _ in exports:
        want = sorted((s, json.dumps({k: v for k, v in zip(
            ("short_name", "mangled_name", "context_id", "launch_type", "grid_id", "local_memory_per_thread",
             "local_memory_total", "shared_memory_executed", "graph_node_id"), r) if v is not None},
            separators=(",", ":"))) for s, *r in rawtrace.nsys_sql(path, """
                SELECT k.start, sn.value, mn.value, contextId, launchType, gridId, localMemoryPerThread,
                       localMemoryTotal, sharedMemoryExecuted, graphNodeId
                FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds sn ON sn.id = k.shortName
                LEFT JOIN StringIds mn ON mn.id = k.mangledName"""))
        base = rawtrace.nsys_base(path)
        got = sorted((r["start_ns"] - base, r["params"]) for r in _read(path)["kernels"] if r["kind"] == "kernel")
        assert got == want and len(got) >= 5


def test_a_call_takes_the_step_of_a_long_range_that_many_shorter_ones_started_inside(tmp_path):
    """Step ranges may overlap (a data-loader thread's "step N" ranges inside the training
    loop's): a call belongs to the latest-starting step range of its process that holds it.
    The reader looked back only 16 ranges, so a call after 20 short ranges that started
    (and ended) inside a long one got no step instead of the long range's."""
    path = tmp_path / "overlapping_steps.sqlite"
    shutil.copyfile(NSYS_NVFUSER, path)
    con = sqlite3.connect(path)
    (t0, t1, gtid), = con.execute("SELECT min(start), max(\"end\"), min(globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    rows = [(t0 - 40, t1 + 10, "step 1000", gtid)]  # the long one
    rows += [(t0 - 30 + i, t0 - 29 + i, f"step {2000 + i}", gtid + 1) for i in range(20)]  # 20 short ones, before the calls
    con.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", text, eventType, globalTid) VALUES (?, ?, ?, 59, ?)", rows)
    con.commit()
    con.close()
    want = rawtrace.nsys_call_rows(path, None)
    got = _only(_read(path)["runtime_calls"], want)
    assert [g["step"] for g in got] == [w["step"] for w in want]
    assert {w["step"] for w in want} == {1000}  # every call is inside the long range, after the short ones
