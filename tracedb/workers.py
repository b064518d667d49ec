"""Worker processes for `tracedb ingest --jobs N` (see `tracedb.ingest`'s docstring).

`tracedb ingest` forks its workers from itself, once it has imported the readers and
before it starts a thread (`ForkPoint`); anywhere else they fork from a forkserver that
imported the readers once (PRELOAD). Either way a worker starts in a few ms: `spawn`
re-imported tracedb, pyarrow, duckdb and protobuf in every worker (~1 s each on the
loaded 2-core machine), which made `--jobs 2` slower than `--jobs 1` on 24 small runs.
Not any caller may fork: one that already runs DuckDB, OpenBLAS or delta-rs threads
could hand a child one of their locks, held. This module imports only the
standard library (and tracedb.timing).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tracedb import scratch, timing

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

# multiprocessing and concurrent.futures.process are imported where a pool is made or
# waited on: a `--jobs 1` ingest, which makes none, saves their ~8-13 ms of import.

# What the forkserver imports before forking workers: the readers and what they use.
PRELOAD = ["tracedb.ingest"] + [f"tracedb.formats.{m}" for m in (
    "tf_stepstats", "megengine", "kineto", "chakra_et", "chrome_trace", "nsys", "xspace", "node_dump", "node_list",
    "tracedb_export")]
# Imported first: tells the forkserver's pyarrow that pandas is absent (arrow_without_pandas).
NO_PANDAS = "tracedb.arrow_no_pandas"


def preload() -> list[str]:
    return [NO_PANDAS] + PRELOAD


def arrow_without_pandas() -> None:
    """Make this process's pyarrow treat pandas as not installed, unless pandas is imported
    already. pyarrow imports pandas (when installed) on a process's first conversion of
    Python values, a reader's first table or the lake's first row: 0.19-0.40 s of CPU on
    2 cores, paid once by `tracedb ingest` (before its first read with --jobs 1) and once
    by the forkserver (while the caller starts). Only for tracedb's own ingest processes,
    which never hand Arrow data to pandas: in a user's process pyarrow's `to_pandas` would
    then fail. pyarrow looks for pandas once per process, so refusing the import (as when
    pandas is missing) for one conversion settles it; a later `import pandas` works.

    Likewise numpy, where neither pyarrow nor numpy is imported yet: pyarrow imports numpy
    with itself (~75 ms of CPU: 100 instead of 175 ms for pyarrow, its compute and parquet
    modules), and an ingest needs none (`tracedb.validate` hashes rows with Arrow compute;
    Delta Lake, DuckDB and the readers take Arrow data or Python values). pyarrow looks for
    numpy once, at its import: a later `import numpy` works, but that pyarrow's
    numpy conversions (`to_numpy`, arrays from numpy values) then fail."""
    import sys

    if "pandas" in sys.modules:
        return
    names = ("pandas",) if "pyarrow" in sys.modules or "numpy" in sys.modules else ("pandas", "numpy")
    refuse = _Refuse(names)
    sys.meta_path.insert(0, refuse)
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401 - these try numpy at their import too
        import pyarrow.parquet  # noqa: F401

        pa.array([0])  # with numpy, pyarrow's first conversion looks for pandas;
        pa.table(pa.record_batch({"a": [0]}))  # without, its first table() of non-dict data
    finally:
        sys.meta_path.remove(refuse)


class _Refuse:
    """An import finder that refuses some packages, as if they were not installed."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def context():
    """The forkserver context the workers fork from. Its server and its preload list are
    the process's own (one per process, shared with every other user of "forkserver"), so
    a library call leaves the preload list as it is: in a notebook the workers import the
    readers as their first task arrives. `tracedb ingest` sets it (`preload_forkserver`)."""
    import multiprocessing

    return multiprocessing.get_context("forkserver")


def preload_forkserver() -> None:
    """Let the forkserver import the readers once, before it forks the workers, so each
    worker starts ready to read: only in tracedb's own process (the CLI's `ingest`). The
    list is the process's (multiprocessing keeps one forkserver a process), and it holds
    `arrow_no_pandas`: a user's process whose forkserver had imported it would fork
    children whose pyarrow cannot convert to pandas."""
    import multiprocessing

    multiprocessing.get_context("forkserver").set_forkserver_preload(preload())


def cores() -> int:
    """The cores this process may use (`--jobs`' default, the rollups' threads)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def native_threads() -> int | None:
    """This process's threads, native ones included (None: unknown, not Linux)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


class ForkPoint:
    """Where `tracedb ingest` forks its workers itself instead of using the forkserver.

    The forkserver is a fresh interpreter that imported the readers (`preload()`); the
    workers fork from it. `tracedb ingest` imports the same (`prepare`, which it needs
    anyway to read with --jobs 1) before it starts any thread; a fork of it is then as
    safe as a fork of the forkserver (pyarrow's import starts two native threads there and
    here, jemalloc's background thread and one more, idle in both), and it saves the
    forkserver's interpreter start and imports (~0.25 s of CPU beside the caller's own on
    2 cores) and its handshake, so the first read starts ~0.45 s earlier
    (bench/bench_jobs.py --phases). `ok()` holds while no thread was started since: the
    ingest forks its workers before its lake, DuckDB, delta-rs or progress-bar threads start.
    Anywhere else (a user's process, a process that imported a library with its own thread
    pools, any thread started since) the workers come from the forkserver."""

    threads: int | None = None  # native threads at `prepare`, where forking is safe
    # Imported, these run native thread pools (DuckDB, delta-rs's runtime, OpenBLAS): a fork
    # could inherit one of their locks, held.
    THREADED = ("duckdb", "deltalake", "numpy")

    @classmethod
    def prepare(cls) -> None:
        import importlib
        import sys

        for name in preload():
            importlib.import_module(name)
        quiet = threading.active_count() == 1 and not any(m in sys.modules for m in cls.THREADED)
        cls.threads = native_threads() if quiet else None

    @classmethod
    def ok(cls) -> bool:
        return cls.threads is not None and threading.active_count() == 1 and native_threads() == cls.threads


def _worker_init(env: dict, caller: int) -> None:
    # The forkserver keeps the environment of its own start; the caller's may have changed
    # (a worker forked from the caller has it already).
    os.environ.clear()
    os.environ.update(env)
    threading.Thread(target=_exit_with, args=(caller,), daemon=True).start()
    from tracedb import process

    process.own()  # a worker process is tracedb's: its reads may pause and freeze the GC
    if os.environ.get("TRACEDB_TIMING"):  # the worker's whole life (tasks, their transfer, waits)
        from multiprocessing import util

        life = timing.phase("worker")
        life.__enter__()
        util.Finalize(life, life.__exit__, args=(None, None, None), exitpriority=100)


def _exit_with(caller: int) -> None:
    """Exit when the ingesting process is gone (SIGKILL, OOM kill). A pool worker waits for
    tasks forever, and its parent is the forkserver or the killed caller (nothing tells
    it): without this it would outlive the caller, holding its stdout/stderr open (a shell
    or `subprocess.run(capture_output=True)` waiting for them would hang) and the
    forkserver alive. A killed caller stays a zombie until reaped, hence its state, not just its pid."""
    stat = Path(f"/proc/{caller}/stat")
    while True:
        time.sleep(0.5)
        try:
            if not stat.exists():
                os.kill(caller, 0)  # no /proc (not Linux): the pid alone
            elif stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                os._exit(1)
        except (ProcessLookupError, FileNotFoundError):
            os._exit(1)
        except OSError:
            pass


def _in_worker(fn, arg, marker: str):
    """Run one task; its marker file names the task while it runs, so a task whose
    process died is known (the marker stays)."""
    Path(marker).touch()
    try:
        path = getattr(arg, "path", None)
        if path is not None:  # TRACEDB_CRASH_AT="reading <file name>": a worker dying mid-read
            from tracedb import faults

            faults.step(f"reading {path.name}")
        with timing.phase(fn.__name__.strip("_")):
            return fn(arg)
    finally:
        Path(marker).unlink(missing_ok=True)


MARKERS_PREFIX = "tracedb-ingest-"  # a pool's marker folder (`scratch.folder`)


@dataclass
class _Task:
    fn: Callable
    arg: object
    dead: Callable  # the task's result when it kills its worker
    future: object = None


class Workers:
    """The --jobs worker processes: tasks by key, results by key, surviving a worker's death."""

    def __init__(self, n: int):
        self.n = n
        self.markers = scratch.folder(MARKERS_PREFIX)
        self.tasks: dict[str, _Task] = {}
        self.done: dict[str, object] = {}  # results of tasks re-run after a worker died
        self.forked = ForkPoint.ok()
        self.pool = self._pool(n, self.forked)

    def _pool(self, n: int, fork: bool = False) -> ProcessPoolExecutor:
        """A pool forked from this process now (`ForkPoint`), or from the forkserver; a pool
        rebuilt after a worker died comes from the forkserver (this process runs threads)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork") if fork else context()
        pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init,
                                   initargs=(dict(os.environ), os.getpid()))
        if fork:
            pool.submit(int)  # under fork the first task forks every worker: now, before any thread starts
        return pool

    def submit(self, key: str, fn: Callable, arg, dead: Callable) -> None:
        task = self.tasks[key] = _Task(fn, arg, dead)
        task.future = self.pool.submit(_in_worker, fn, arg, str(self.markers / key))

    def ready(self, key: str) -> bool:
        """Whether `result(key)` would return without waiting."""
        return key in self.done or self.tasks[key].future.done()

    def result(self, key: str):
        from concurrent.futures.process import BrokenProcessPool

        with timing.phase("wait"):
            while key not in self.done:
                try:
                    return self.tasks[key].future.result()
                except BrokenProcessPool:
                    self._recover()
            return self.done[key]

    def _recover(self) -> None:
        """A worker died: every unfinished task goes to a new pool, except those that were
        running (their markers remain), each re-run alone: one that dies again is the culprit."""
        self.pool.shutdown(wait=True)  # after this every future of the broken pool is settled
        from concurrent.futures.process import BrokenProcessPool

        running = {m.name for m in self.markers.iterdir()}
        for m in self.markers.iterdir():
            m.unlink()
        broken = [k for k, t in self.tasks.items()
                  if k not in self.done and isinstance(t.future.exception(), BrokenProcessPool)]
        self.pool = self._pool(self.n)
        for key in broken:
            if key not in running:
                self.tasks[key].future = self.pool.submit(_in_worker, self.tasks[key].fn, self.tasks[key].arg,
                                                          str(self.markers / key))
        for key in broken:
            if key in running:
                self.done[key] = self._alone(key)

    def _alone(self, key: str):
        from concurrent.futures.process import BrokenProcessPool

        task = self.tasks[key]
        solo = self._pool(1)
        try:
            return solo.submit(_in_worker, task.fn, task.arg, str(self.markers / f"solo-{key}")).result()
        except BrokenProcessPool:
            return task.dead()
        finally:
            solo.shutdown(wait=True)
            (self.markers / f"solo-{key}").unlink(missing_ok=True)

    def finished(self) -> list:
        """Results of every task that finished (for cleaning up after an interruption)."""
        out = list(self.done.values())
        for t in self.tasks.values():
            f = t.future
            if f.done() and not f.cancelled() and f.exception() is None:
                out.append(f.result())
        return out

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)
        shutil.rmtree(self.markers, ignore_errors=True)
