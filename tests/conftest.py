from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def _bytecode_outside_the_tree() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (this sandbox sets it), every process of the
    suite compiled its modules from source: each xdist worker re-ran pytest's assertion
    rewrite of every test module (~9 s of CPU a worker), each `tracedb` process the
    package (~0.1 s; the suite starts hundreds). Bytecode goes instead to a folder of
    the system's temporary folder, one per checkout (PYTHONPYCACHEPREFIX, as
    bench/bench_jobs.py does), never beside the sources; this process, the xdist workers
    it starts and their subprocesses all use it. An installed tracedb has its bytecode."""
    import hashlib
    import sys
    import tempfile

    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    key = hashlib.sha256(str(Path(__file__).resolve().parent).encode()).hexdigest()[:12]
    prefix = str(Path(tempfile.gettempdir()) / f"tracedb-tests-pycache-{key}")
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False


_bytecode_outside_the_tree()

# Scenario folder -> its trace file, for tests that need one file of a kind.
SCENARIOS = {
    "tf_runmetadata_text": "000_6b18107121892edf.txt",
    "tf_stepstats_gpu_streams": "001_5e9237699abafb68.txt",
    "node_shape_dump": "002_11cf062b29f34b60.txt",
    "node_name_list": "003_5bf2854c930b1b8f.txt",
    "megengine_graph_profile": "004_825e28a4f520ddc2.txt",
    "kineto_h200_fp32": "kineto_h200_fp32.json.gz",
    "xspace_jax_h200": "jax_h200.xplane.pb",
}


def scenario(name: str) -> Path:
    return DATA / name / SCENARIOS[name]


@pytest.fixture(scope="session")
def moto_server() -> str:
    """The endpoint URL of moto's S3 server, one process for the whole session (under
    `pytest -n 2`, one per worker, each on its own free port; tests that use it make their
    own bucket or prefix)."""
    from s3server import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


@pytest.fixture(scope="session")
def seed_warehouse(tmp_path_factory) -> Path:
    """One warehouse holding every real trace we ship, one run per scenario, mixed formats.

    Run ids are the scenario names (tf_runmetadata_text, kineto_h200_fp32, ...). Built once
    per test session (`shared_warehouse`, for both xdist workers); tests must not modify it.
    """
    from tracedb.ingest import ingest

    def build(wh: Path) -> None:
        for name in SCENARIOS:
            summary = ingest([scenario(name)], wh, run_id=name)
            assert summary.ok, summary.errors

    return shared_warehouse(tmp_path_factory, "seed", build)


def shared_warehouse(tmp_path_factory, name: str, build) -> Path:
    """A read-only warehouse built once per test session: under `pytest -n 2` the workers'
    temp folders share a parent, where the first worker to ask builds it under an fcntl
    lock while the other waits, then both read it (a failed build is retried by the next)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    wh, done = root / f"shared-{name}" / "wh", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(wh.parent, ignore_errors=True)
            build(wh)
            done.touch()
    return wh


def data_files(wh: Path) -> list[str]:
    """Parquet files of the data tables (not the metadata tables), relative to the warehouse."""
    from tracedb import schema

    return sorted(p.relative_to(wh).as_posix() for t in schema.TABLES for p in (wh / t).rglob("*.parquet"))


def typed_rows(con, sql: str, values: dict) -> tuple[list[str], list[tuple]]:
    """A rollup text's result on `con` with the parameters it names bound from `values`:
    its column types, and its rows sorted (the rollup memory tests compare a streamed text
    with its declaration this way)."""
    from tracedb import sqllib

    used = sqllib.bound_names(sql)
    cur = con.execute(sql, {k: v for k, v in values.items() if k in used})
    rows = cur.fetchall()
    return [str(d[1]) for d in cur.description], sorted(rows, key=repr)


def _fleet(tmp_path_factory, name: str) -> Path:
    from tracedb.ingest import ingest

    def build(wh: Path) -> None:
        summary = ingest([DATA / name], wh)
        assert summary.ok, summary.errors

    return shared_warehouse(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def fleet_warehouse(tmp_path_factory) -> Path:
    """tests/data/fleet_dev ingested: day1..day4 (one CNN, 4 processes), slow_extra2, mem512,
    run ids the folder names, labels from each run.json (model cnn4, started_at day by day)."""
    return _fleet(tmp_path_factory, "fleet_dev")


@pytest.fixture(scope="session")
def mlp_warehouse(tmp_path_factory) -> Path:
    """tests/data/fleet_mlp ingested: night1..night4 (an MLP, 4 processes, H200),
    slow_extra_linear and mem256; the report was tuned without it."""
    return _fleet(tmp_path_factory, "fleet_mlp")


# The modules that take longest, longest first (a module's total in `--durations=0`; the S3
# whole flow ~200 s of CPU, the 100 `tracedb check` processes ~100 s). They run before the
# others, so that under `pytest -n 2` (pyproject: --dist loadscope, a module whole on one
# worker) the two workers start on the long ones and end together on short ones; the rest
# keep their order.
SLOWEST_FIRST = [
    "test_object_storage.py", "test_lake_faults.py", "test_streaming.py", "test_spark.py",
    "test_object_storage_faults.py", "test_json_reader_oracle.py", "test_lake.py", "test_migrations.py",
    "test_queries_fleet_shapes.py", "test_layout_equivalence.py", "test_ingest.py", "test_report_gate.py", "test_export.py",
    "test_report_fleet.py", "test_metric_rollups.py", "test_dialects.py", "test_run_scope.py",
    "test_bad_input.py", "test_multirank.py", "test_flops.py", "test_object_storage_errors.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module stays whole


# -- opt-in: each test's CPU, for sizing the suite (TRACEDB_TEST_CPU_LOG=<file>) -----------

def _cpu_now() -> float:
    """This process's CPU, its waited-for children's, and its live children's with what
    they have waited for: the moto server (a child that lives all session), the forkserver
    of in-process parallel ingests (its workers' CPU reaches this process only when the
    forkserver exits, which once put ~150 s of ingests on two 1-second tests), a subprocess
    still running. A child read live at a test's start and reaped during it counts its
    difference, once."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    for pid in _live_children():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
        except (OSError, ValueError):
            pass
    return total


def _live_children() -> set[int]:
    """This process's children now (any of its threads may have started one)."""
    out = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            out.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            pass
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get("TRACEDB_TEST_CPU_LOG")
    if not log:
        yield
        return
    import json
    import time

    # worker and start (epoch seconds): each xdist worker's timeline, its idle gaps and
    # which worker ends last (bench/suite_timeline.py)
    start, wall, cpu = time.time(), time.monotonic(), _cpu_now()
    yield
    with open(log, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
                            "cpu": round(_cpu_now() - cpu, 3), "start": round(start, 3),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")
