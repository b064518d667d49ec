"""CLI start-up: milliseconds each command spends beyond the bare interpreter (issue 12 item 6).

    python bench/bench_startup.py [--repeat 15]

Times, as wall clock of a fresh process and interleaved round-robin (the machine is shared,
so every command sees the same load):
  bare       python -c pass                                 (the baseline)
  --help     python -m tracedb.cli --help
  queries    python -m tracedb.cli queries
  query      python -m tracedb.cli query top_kernels --param run_id=r1 --format csv
             on a one-run warehouse built first (its snapshot already fresh)
  duckdb     python -c 'import duckdb'  (the floor of any query)
  +pyarrow   python -c 'import duckdb, pyarrow'  (the floor of a query that needs Arrow)
and prints, per command, the median and the best of (command - bare) over the rounds; the
issue's own measure, the command's imports (`python -X importtime`, every top-level import's
cumulative time summed, minus bare Python's, median of --imports-repeat runs); and the
costliest of those imports.
Bytecode is compiled first (into a private PYTHONPYCACHEPREFIX, as `pip install` does for
an installed package): with PYTHONDONTWRITEBYTECODE set, every run would compile
tracedb's modules from source (~40 ms).
Goal: <= 150 ms of start-up beyond bare Python for --help, queries and a one-run query
("measure with python -X importtime": the imports column); the wall column is the stricter
figure, with the query's own work (DuckDB's instance, the snapshot's ATTACH, the query).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "kineto_h200_fp32"
HEAVY = ("deltalake", "pandas", "duckdb", "pyarrow", "scipy", "sqlglot", "rich", "pydantic", "numpy")


def commands(wh: Path) -> dict[str, list[str]]:
    py, cli = sys.executable, [sys.executable, "-m", "tracedb.cli"]
    return {
        "bare": [py, "-c", "pass"],
        "--help": cli + ["--help"],
        "queries": cli + ["queries"],
        "query": cli + ["query", "top_kernels", "--param", "run_id=r1", "--format", "csv", "--warehouse", str(wh)],
        "duckdb": [py, "-c", "import duckdb"],
        "+pyarrow": [py, "-c", "import duckdb, pyarrow"],
    }


def wall(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    return time.perf_counter() - t


def importtime(cmd: list[str], env: dict) -> dict[str, float]:
    """`python -X importtime` of the command: each top-level import's cumulative ms."""
    err = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True,
                         cwd=ROOT).stderr
    found: dict[str, float] = {}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0].startswith("import time:") and parts[1].strip().isdigit() \
                and not parts[2].startswith("  "):  # top level: not indented under another import
            found[parts[2].strip()] = found.get(parts[2].strip(), 0.0) + int(parts[1]) / 1000
    return found


def heavy_imports(found: dict[str, float]) -> str:
    """The heavy packages among the top-level imports, with their cumulative ms."""
    heavy = {k: v for k, v in found.items() if k in HEAVY}
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(heavy.items(), key=lambda kv: -kv[1])) or "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--imports-repeat", type=int, default=5, help="`-X importtime` runs per command (median)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tracedb-startup-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        wh = tmp / "wh"
        subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(TRACE), "--run-id", "r1", "--quiet",
                        "--warehouse", str(wh)], env=env, check=True, cwd=ROOT)
        cmds = commands(wh)
        for cmd in cmds.values():  # the first query may publish the snapshot; bytecode gets written
            wall(cmd, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.repeat):
            for name, cmd in cmds.items():
                times[name].append(wall(cmd, env))
        bare = times["bare"]
        # The issue's own measure of start-up: the imports' time (`python -X importtime`), summed over
        # the top-level imports, beyond those of bare Python (site), median of --imports-repeat runs.
        imports = {name: [importtime(cmd, env) for _ in range(args.imports_repeat)] for name, cmd in cmds.items()}
        bare_imports = statistics.median(sum(f.values()) for f in imports["bare"])
        print(f"start-up beyond bare Python, {args.repeat} interleaved rounds, ms (load average "
              f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
        print("  wall: the whole command (imports and its work) minus bare Python's wall;")
        print("  imports: the sum of its top-level `python -X importtime` entries minus bare Python's (site)")
        print(f"{'command':10} {'median':>8} {'best':>8}  {'imports':>8}  {'bare median':>11}  heavy imports (cumulative ms)")
        for name, ts in times.items():
            extra = [t - b for t, b in zip(ts, bare)]
            own = statistics.median(sum(f.values()) for f in imports[name]) - bare_imports
            heavy = heavy_imports(imports[name][0]) if name != "bare" else ""
            print(f"{name:10} {statistics.median(extra) * 1e3:8.0f} {min(t for t in ts) * 1e3 - min(bare) * 1e3:8.0f}"
                  f"  {own:8.0f}  {statistics.median(bare) * 1e3:11.0f}  {heavy}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
