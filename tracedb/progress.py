"""What `tracedb ingest` shows while it works, fed by `Warehouse.ingest`'s callbacks.

- On a terminal: the runs found, then a `rich` progress bar (runs and files done, MB read
  of the total, rate, time left), then a summary table.
- Not on a terminal (a nightly job's log): the runs found, one line per run as it lands,
  and a one-line summary.
- `--quiet`: only errors.

Errors always go to stderr as `error: <file>: <message>`, one line each; warnings (a
guessed rank, a file skipped as no trace) as `warning: ...`.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from tracedb import discover

# rich is imported only on a terminal: a nightly job's log (and --quiet) never draws a bar,
# and the import is ~29 ms of `tracedb ingest`'s start-up (python -X importtime).

MAX_LISTED = 20  # runs listed before an ingest; --dry-run lists all


def found_lines(runs: list[discover.RunSpec], limit: int | None = None) -> list[str]:
    """A header line, then what `discover.describe` says of each run (up to `limit` runs)."""
    files = sum(len(r.files) for r in runs)
    mb = sum(r.size_bytes for r in runs) / 1e6
    head = f"found {len(runs)} run(s), {files} file(s), {mb:.1f} MB"
    shown = runs if limit is None else runs[:limit]
    lines = [head] + ["  " + line for line in discover.describe(shown)]
    if len(shown) < len(runs):
        lines.append(f"  ... and {len(runs) - len(shown)} more run(s) (--dry-run lists them all)")
    return lines


class IngestReporter:
    """Progress for one ingest: pass its methods as `on_plan`, `on_file`, `on_run`."""

    def __init__(self, quiet: bool = False, verbose: bool = False, out: IO[str] | None = None,
                 err: IO[str] | None = None):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.tty = self.err.isatty() and not quiet
        self.console = None
        if self.tty:
            from rich.console import Console

            self.console = Console(file=self.err, highlight=False, soft_wrap=True)
        self.progress = None  # a rich Progress while the bar is drawn
        self.sizes: dict[str, int] = {}
        self.started = time.perf_counter()
        self.n_runs = self.runs_done = self.n_files = self.files_done = 0

    # ---- callbacks --------------------------------------------------------------------

    def on_plan(self, runs: list[discover.RunSpec]) -> None:
        self.n_runs = len(runs)
        self.n_files = sum(len(r.files) for r in runs)
        for r in runs:
            for p in r.files:
                try:
                    self.sizes[discover.display(p)] = p.stat().st_size
                except OSError:
                    pass
        if self.quiet:
            return
        for line in found_lines(runs, MAX_LISTED):
            print(line, file=self.out, flush=True)
        if self.tty:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.progress = Progress(
                TextColumn("[bold]ingest"), BarColumn(),
                TextColumn("{task.fields[runs]} runs, {task.fields[files]} files"),
                DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                console=self.console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task(
                "ingest", total=max(sum(self.sizes.values()), 1), runs=self._of(0, self.n_runs),
                files=self._of(0, self.n_files))

    def on_file(self, f) -> None:
        if f.error:
            self._say(f"error: {f.path}: {f.error}", err=True)
        elif getattr(f, "skipped", None):
            self._say(f"warning: {f.path}: skipped: {f.skipped}", err=True)
        elif f.warning or getattr(f, "warnings", None) or f.metadata.get("warnings"):
            for text in _warnings(f):
                self._say(f"warning: {f.path}: {text}", err=True)
        elif self.verbose:
            rows = ", ".join(f"{n} {t}" for t, n in f.rows.items() if n)
            self._say(f"  {f.path} [{f.format}]: {rows} ({f.seconds:.2f}s)", err=True)
        if f.path in self.sizes:  # a discovery error is no file of the plan
            self.files_done += 1
        if self.progress:
            self.progress.update(self.task, advance=self.sizes.get(f.path, 0),
                                 files=self._of(self.files_done, self.n_files))

    def on_run(self, r) -> None:
        self.runs_done += 1
        if r.run_error:
            self._say(f"error: {r.run_error[0]}: {r.run_error[1]}", err=True)
        if self.progress:
            self.progress.update(self.task, runs=self._of(self.runs_done, self.n_runs))
        elif not self.quiet:
            self._say(run_line(r))

    def finish(self, summary) -> None:
        """Stop the bar and print the summary (a table on a terminal)."""
        if self.progress:
            self.progress.stop()
        if self.quiet:
            return
        seconds = time.perf_counter() - self.started
        if self.tty:
            self._table(summary, seconds)
        else:
            rows = sum(sum(r.rows.values()) for r in summary.runs)
            files = sum(len(r.files) for r in summary.runs)
            skipped = sum(len(r.skipped) for r in summary.runs)
            runs = sum(1 for r in summary.runs if r.files or r.run_error)  # not the folders of only stray files
            print(f"ingested {runs} run(s), {files} file(s), {rows} rows, "
                  + (f"{skipped} file(s) skipped as no trace, " if skipped else "")
                  + f"{len(summary.errors)} error(s) in {seconds:.1f}s", file=self.out)

    # ---- helpers ----------------------------------------------------------------------

    @staticmethod
    def _of(done: int, total: int) -> str:
        return f"{done}/{total}"

    def _say(self, text: str, err: bool = False) -> None:
        if self.progress:
            self.progress.console.print(text, markup=False)
        else:
            print(text, file=self.err if err else self.out, flush=True)

    def _table(self, summary, seconds: float) -> None:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"ingested in {seconds:.1f}s", title_justify="left")
        for col in ("run", "files", "nodes", "kernels", "tensors", "allocations", "errors", "seconds"):
            t.add_column(col, justify="left" if col == "run" else "right")
        for r in summary.runs:
            ok = sum(1 for f in r.files if f.ok)
            rows = r.rows
            t.add_row(r.run_id, f"{ok}/{len(r.files)}", *(str(rows[k]) for k in ("nodes", "kernels", "tensors", "allocations")),
                      str(len(r.errors)), f"{r.seconds:.2f}")
        Console(file=self.out, highlight=False).print(t)


def _warnings(f) -> list[str]:
    """A guessed rank, and the validator's counts of odd values (`tracedb.validate`)."""
    out = [f.warning] if f.warning else []
    counts = getattr(f, "warnings", None) or f.metadata.get("warnings")
    if counts:
        from tracedb.validate import describe

        out.append(describe(counts))
    return out


def run_line(r) -> str:
    """`run: 2/2 files, 577 nodes, 755 kernels (0.31s)`: a run as it lands, with the time
    its files took to read (`RunSummary.seconds`) and the files skipped as no trace."""
    skipped = getattr(r, "skipped", [])
    if not r.files and skipped and not r.run_error:
        return f"{r.run_id}: no trace files, {len(skipped)} skipped: not a run"
    rows = ", ".join(f"{n} {t}" for t, n in r.rows.items() if n)
    ok = sum(1 for f in r.files if f.ok)
    extra = f", {len(skipped)} skipped" if skipped else ""
    return f"{r.run_id}: {ok}/{len(r.files)} files{extra}, {rows or 'no rows'} ({r.seconds:.2f}s)"
