"""Each xdist worker's timeline from a suite run's per-test log
(`TRACEDB_TEST_CPU_LOG=/tmp/cpu.jsonl python -m pytest -n 2`, tests/conftest.py): per
worker, the modules in the order it ran them (start, wall, CPU), its busy and idle time
from its first test's start to its last test's end, and when each worker ended, so the
tail that one worker runs alone shows. Usage: python bench/suite_timeline.py LOG [--modules]."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str, modules: bool = False) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "start" in r]  # logs before the worker/start fields: nothing to place
    if not rows:
        sys.exit("no record has a start time: a log written before tests/conftest.py logged it")
    t0 = min(r["start"] for r in rows)
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_worker[r["worker"] or "main"].append(r)
    ends = {}
    for worker, tests in sorted(by_worker.items()):
        tests.sort(key=lambda r: r["start"])
        first, end = tests[0]["start"], max(r["start"] + r["wall"] for r in tests)
        busy = sum(r["wall"] for r in tests)
        cpu = sum(r["cpu"] for r in tests)
        ends[worker] = end - t0
        print(f"{worker}: {len(tests)} tests, from {first - t0:7.1f} s to {end - t0:7.1f} s; "
              f"in tests {busy:7.1f} s (CPU {cpu:7.1f} s), between tests {end - first - busy:6.1f} s")
        if modules:
            mods: dict[str, list[float]] = {}
            for r in tests:
                m = mods.setdefault(r["test"].split("::")[0], [r["start"] - t0, 0.0, 0.0])
                m[1] += r["wall"]
                m[2] += r["cpu"]
            for name, (at, wall, c) in mods.items():
                print(f"    {at:7.1f} s  {name:55s} wall {wall:7.1f}  CPU {c:7.1f}")
    if len(ends) > 1:
        last = sorted(ends.values())
        print(f"the last worker ran alone for its final {last[-1] - last[-2]:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1], "--modules" in sys.argv[2:])
