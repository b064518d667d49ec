"""Finding runs: which folders and files of the paths given to `tracedb ingest` are runs.

The contract's rules (`tracedb ingest` row of docs/contract):

- A trace file given as PATH is a run named after its stem (`--run-id` renames it).
- A folder given with `--run-id` is one run of every file below it.
- Otherwise every folder below PATH that directly holds trace files (or a `run.json`)
  is one run, its id the folder's path relative to PATH (`models/bert/run1`); a file
  lying directly in PATH is a run named after its stem. A TensorBoard/XProf log folder
  `<logdir>/plugins/profile/<session>/` gives one run per session, named as TensorBoard
  lists it: `<logdir>/<session>` with `plugins/profile` dropped.
- A log dir's sessions belong to the run folder around them: the nearest folder at or
  above `<logdir>` (PATH at most) that holds a `run.json` is one run with its own files
  and every session below it. So a nightly job's `night4/run.json` beside the log dir
  `jax.profiler.trace` wrote (`night4/plugins/profile/<session>/`) is the one run
  `night4` with its labels, all its sessions' files in it
  (`plugins/profile/<session>/host.xplane.pb`), and `tracedb ingest night4/` gives the
  same run `night4` (PATH's own name). A log dir with no `run.json` at or above it keeps
  one run per session. Only session folders are taken in so: any other folder below a
  run folder that directly holds trace files stays a run of its own, as above.
- Renderings of one profile count once: in a folder with `<host>.xplane.pb`, the
  `<host>.trace.json[.gz]` and `perfetto_trace.json[.gz]` that XProf writes beside it
  are JSON renderings of the same XSpace (the XSpace is the richest: it also holds
  allocations and exact ps times), and a TF `step.pb` beside a `step.pbtxt` of the same
  stem and format is the same RunMetadata twice (the binary one is kept), and an Nsight
  Systems report `<stem>.nsys-rep` (or `.qdrep`) beside its SQLite export `<stem>.sqlite`
  is the same profile (the export is read; the report alone is an error naming the
  `nsys export` command). Skipped files are listed on the run (`RunSpec.skipped`) with
  the reason, so the CLI can say so.
- A file that no reader claims (a README, a log, a config, any JSON or binary that is no
  trace, an empty file) is no trace of its run: the ingest skips it with a warning and
  lists it in `files` (status `skipped`), and it never keeps its run from landing. Which
  files those are is known only from their content (`tracedb.formats.detect`), so
  discovery alone cannot say; `drop_unclaimed` sniffs them for `--dry-run`, and the
  ingest sniffs them in its workers. A file named as PATH is the exception: the user said
  it is a trace, so no reader claiming it is its error (`RunSpec.named`).

Walking the tree: symlinked folders are followed, but a folder is entered once per walk
(by its device and inode), so `self -> .` and `up -> ..` links end instead of looping, and
one file reached by two names is read once per run. A folder or file that cannot be
listed or opened is an error of the run that holds it (`RunSpec.errors`), never skipped
silently. Names that are not UTF-8 (a Linux file name is bytes) are shown and stored
with the bad bytes escaped (`caf\\xe9.json`), while the file itself is still read.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tracedb.errors import TracedbError

RUN_LABELS = "run.json"
# Hive partitioning reads a partition folder named this as NULL: such a run would lose its id.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
PROFILE_DIR = ("plugins", "profile")
_XSPACE = ".xplane.pb"
_JSON_RENDERING = re.compile(r"^(?P<host>.+)\.trace\.json(\.gz)?$")
_PERFETTO = re.compile(r"^perfetto_trace\.json(\.gz)?$")
_NSYS_REPORTS = (".nsys-rep", ".qdrep")


@dataclass
class RunSpec:
    run_id: str
    root: Path  # folder the run's file paths are relative to
    files: list[Path]
    labels_file: Path | None = None
    # (file, why it is not read): renderings of a profile already read, repeated links.
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    # (folder or file, message): what could not be listed; the run is not complete.
    errors: list[tuple[Path, str]] = field(default_factory=list)
    named: bool = False  # a trace file given as PATH: it must be read, never skipped as no trace

    def rel(self, path: Path) -> str:
        """The file's path as recorded in the warehouse: relative to the run root, printable."""
        inside = path.is_relative_to(self.root) and path != self.root
        return safe_name(path.relative_to(self.root).as_posix() if inside else path.name)

    @property
    def size_bytes(self) -> int:
        total = 0
        for p in self.files:
            try:
                total += p.stat().st_size
            except OSError:
                pass
        return total


def safe_name(name: str) -> str:
    """A file name as valid UTF-8 text: bytes that are not UTF-8 (which Python keeps as
    lone surrogates) become `\\xNN` escapes; anything else is unchanged."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def display(path: Path) -> str:
    """A path as printable text (see `safe_name`)."""
    return safe_name(str(path))


def run_name(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return safe_name(Path(name).stem)


def natural_key(name: str) -> list:
    """step_2 before step_10: a file's ordinal among its format's files is its step."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _excluded(path: Path, base: Path, exclude: tuple[str, ...]) -> bool:
    """Dot-files, run.json, and what --exclude names: a glob matched on the file name or on
    any trailing part of its path below the folder given (`logs/*` skips `r1/logs/a.csv`)."""
    if path.name.startswith(".") or path.name == RUN_LABELS:
        return True
    rel = path.relative_to(base).as_posix() if path.is_relative_to(base) else path.name
    parts = rel.split("/")
    tails = ["/".join(parts[i:]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(t, g) for g in exclude for t in tails)


@dataclass
class _Folder:
    path: Path
    files: list[Path]
    subdirs: list[Path]
    error: str | None = None


class _Walker:
    """os.walk with symlinks followed, each folder entered once, and errors kept."""

    def __init__(self, base: Path, exclude: tuple[str, ...]):
        self.base = base
        self.exclude = exclude
        self.seen_dirs: set[tuple[int, int]] = set()
        self.skipped: list[tuple[Path, str]] = []  # (path, why)

    def enter(self, folder: Path) -> bool:
        """Mark a folder visited; False when it was already (a link loop or an alias)."""
        try:
            st = folder.stat()
        except OSError:
            return True  # listing it will report the error
        key = (st.st_dev, st.st_ino)
        if folder.is_symlink() and folder.parent.resolve().is_relative_to(folder.resolve()):
            # `up -> ..`: a link to a folder that holds it (outside the walk too) loops.
            self.skipped.append((folder, f"symlink loop: {safe_name(os.readlink(folder))} holds this folder"))
            return False
        if key in self.seen_dirs:
            target = os.readlink(folder) if folder.is_symlink() else None
            why = f"symlink to {safe_name(target)}: a folder already read" if target else "already read"
            self.skipped.append((folder, why))
            return False
        self.seen_dirs.add(key)
        return True

    def list(self, folder: Path) -> _Folder:
        files, subdirs = [], []
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            return _Folder(folder, [], [], f"cannot read folder: {e.strerror or e}")
        for e in entries:
            if e.name.startswith("."):
                continue
            path = folder / e.name
            try:
                is_dir = e.is_dir()  # follows symlinks
                is_file = not is_dir and e.is_file()
            except OSError as err:
                if e.is_symlink():  # e.g. a link to itself
                    self.skipped.append((path, f"broken symlink: {err.strerror or err}"))
                else:
                    files.append(path)  # reading it will name the error
                continue
            if is_dir:
                subdirs.append(path)
            elif is_file:
                if not _excluded(path, self.base, self.exclude) or path.name == RUN_LABELS:
                    files.append(path)
            elif e.is_symlink():
                self.skipped.append((path, "broken symlink"))
            else:  # a FIFO or socket: reading it could block forever
                self.skipped.append((path, "not a regular file"))
        return _Folder(folder, files, subdirs)

    def walk(self, top: Path):
        """Folders below top (top first), each once."""
        if not self.enter(top):
            return
        stack = [top]
        while stack:
            folder = self.list(stack.pop())
            yield folder
            for d in reversed(folder.subdirs):
                if self.enter(d):
                    stack.append(d)


def _dedupe_files(files: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """One file reached by several names (hard or symbolic links) is read once."""
    seen: dict[tuple[int, int], Path] = {}
    kept, skipped = [], []
    for p in files:
        try:
            st = p.stat()
        except OSError:
            kept.append(p)  # reading it will name the error
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen and stat.S_ISREG(st.st_mode):
            skipped.append((p, f"same file as {display(seen[key].name)}"))
            continue
        seen[key] = p
        kept.append(p)
    return kept, skipped


def _renderings(files: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Drop the files that render a profile another file of the same folder holds."""
    by_dir: dict[Path, dict[str, Path]] = {}
    for p in files:
        by_dir.setdefault(p.parent, {})[p.name] = p
    drop: dict[Path, str] = {}
    for names in by_dir.values():
        xspaces = sorted(n for n in names if n.endswith(_XSPACE))
        for n, p in names.items():
            m = _JSON_RENDERING.match(n)
            if m and f"{m['host']}{_XSPACE}" in names:
                drop[p] = f"a JSON rendering of {m['host']}{_XSPACE}, which is read instead"
            elif _PERFETTO.match(n) and xspaces:
                drop[p] = f"a Perfetto rendering of {', '.join(xspaces)}, which is read instead"
        drop.update(_nsys_reports(names))
        for n, p in names.items():
            stem, ext = _split_ext(n)
            if ext in (".pbtxt", ".pbtxt.gz"):
                twin = next((names[stem + e] for e in (".pb", ".pb.gz") if stem + e in names), None)
                if twin is not None and _same_format(p, twin):
                    drop[p] = f"the text form of {twin.name}, which is read instead"
    kept = [p for p in files if p not in drop]
    return kept, [(p, drop[p]) for p in files if p in drop]


def _nsys_reports(names: dict[str, Path]) -> dict[Path, str]:
    """The Nsight Systems reports (`<stem>.nsys-rep`) of one folder whose SQLite export
    (`<stem>.sqlite`, sniffed as nsys) lies beside them, with why each is skipped."""
    drop: dict[Path, str] = {}
    for n, p in names.items():
        if n.endswith(_NSYS_REPORTS):
            export = names.get(n.rsplit(".", 1)[0] + ".sqlite")
            if export is not None and _format_of(export) == "nsys":
                drop[p] = f"the Nsight Systems report that {export.name} was exported from, which is read instead"
    return drop


def _split_ext(name: str) -> tuple[str, str]:
    for ext in (".pbtxt.gz", ".pb.gz", ".pbtxt", ".pb"):
        if name.endswith(ext):
            return name[: -len(ext)], ext
    return name, ""


def _format_of(p: Path) -> str | None:
    from tracedb import formats
    from tracedb.errors import TraceFormatError

    try:
        return formats.detect(p).NAME
    except (TraceFormatError, OSError):
        return None


def _same_format(a: Path, b: Path) -> bool:
    fmt = _format_of(a)
    return fmt is not None and fmt == _format_of(b)


def _finish(run: RunSpec, found: list[Path], walker_skipped: list[tuple[Path, str]]) -> RunSpec:
    labels = [p for p in found if p.name == RUN_LABELS and p.parent == run.root]
    found = [p for p in found if p.name != RUN_LABELS]
    files, skipped = _dedupe_files(found)
    files, rendered = _renderings(files)
    run.files = sorted(files, key=lambda p: natural_key(run.rel(p)))
    run.labels_file = labels[0] if labels else None
    run.skipped = walker_skipped + skipped + rendered
    return run


def _whole_folder(folder: Path, run_id: str, exclude: tuple[str, ...]) -> RunSpec:
    """Every file below the folder, as one run (`--run-id` on a folder)."""
    walker = _Walker(folder, exclude)
    run = RunSpec(run_id, folder, [])
    found = []
    for f in walker.walk(folder):
        found += f.files
        if f.error:
            run.errors.append((f.path, f.error))
    return _finish(run, found, walker.skipped)


def _session_run_id(rel: Path) -> str:
    """`<logdir>/plugins/profile/<session>` -> `<logdir>/<session>`, as TensorBoard lists it."""
    parts = list(rel.parts)
    for i in range(len(parts) - 2):
        if tuple(parts[i:i + 2]) == PROFILE_DIR:
            parts = parts[:i] + parts[i + 2:]
            break
    return safe_name("/".join(parts))


def _session_owners(folders: list[_Folder], base: Path) -> dict[Path, Path]:
    """Each XProf session folder (`<logdir>/plugins/profile/<session>`) that has a run
    folder around it, with that folder: the nearest at or above `<logdir>` that holds a
    `run.json` (the walk starts at base, so none above base counts)."""
    marked = {f.path for f in folders if any(p.name == RUN_LABELS for p in f.files)}
    owners = {}
    for f in folders:
        rel = f.path.relative_to(base).parts
        if len(rel) >= 3 and rel[-3:-1] == PROFILE_DIR:
            logdir = f.path.parents[2]
            top = next((d for d in (logdir, *logdir.parents) if d in marked), None)
            if top is not None:
                owners[f.path] = top
    return owners


def _folder_run_id(folder: Path, base: Path) -> str:
    """A run folder's id: its path below base (XProf's `plugins/profile` dropped), or, for
    base itself, the folder's own name."""
    if folder == base:
        name = safe_name(base.resolve().name)
        if not name:
            raise TracedbError(f"{display(base)}: holds {RUN_LABELS}, so it is one run, but has no name to give it; "
                               "pass --run-id")
        return name
    return _session_run_id(folder.relative_to(base))


def _runs_below(base: Path, exclude: tuple[str, ...]) -> list[RunSpec]:
    """Every folder below base that directly holds files is a run, or, for an XProf
    session, part of the run of the run folder around it; loose files in base are runs too."""
    walker = _Walker(base, exclude)
    folders = list(walker.walk(base))
    owner = _session_owners(folders, base)
    tops = set(owner.values())  # run folders that take in sessions (walked before them)
    runs: list[RunSpec] = []
    by_folder: dict[Path, RunSpec] = {}  # every folder's run
    grouped: dict[Path, tuple[RunSpec, list[Path]]] = {}  # run folder -> (run, files below it)
    orphan_errors: list[tuple[Path, str]] = []
    for f in folders:
        if f.error:
            orphan_errors.append((f.path, f.error))
        top = owner.get(f.path) or (f.path if f.path in tops else None)
        if top is not None:
            if top not in grouped:
                grouped[top] = (RunSpec(_folder_run_id(top, base), top, []), [])
                runs.append(grouped[top][0])
            grouped[top][1].extend(f.files)
            by_folder[f.path] = grouped[top][0]
        elif f.path == base:
            loose = {p.name: p for p in f.files if p.name != RUN_LABELS}
            reports = _nsys_reports(loose)  # one run per export, not one more per report
            for p in loose.values():
                if p not in reports:
                    run = _finish(RunSpec(run_name(p), base, []), [p], [])
                    run.skipped += [(r, why) for r, why in reports.items()
                                    if r.name.rsplit(".", 1)[0] + ".sqlite" == p.name]
                    runs.append(run)
        elif f.files:
            rel = f.path.relative_to(base)
            runs.append(_finish(RunSpec(_session_run_id(rel), f.path, []), f.files, []))
            by_folder[f.path] = runs[-1]
    for run, found in grouped.values():
        _finish(run, found, [])
    # A folder that could not be listed belongs to its run folder, else to the nearest run
    # above it, else it is reported as a run of its own (it may have been one).
    for path, msg in orphan_errors:
        owner_run = by_folder.get(path) or max(
            (r for r in runs if r.files and path.is_relative_to(r.root) and r.root != base),
            key=lambda r: len(r.root.parts), default=None)
        if owner_run is None:
            rid = _session_run_id(path.relative_to(base)) if path != base else run_name(path)
            owner_run = RunSpec(rid, path, [])
            runs.append(owner_run)
        owner_run.errors.append((path, msg))
    # Links skipped by the walk are noted on the run whose folder holds the link.
    for path, why in walker.skipped:
        owner_run = by_folder.get(path.parent) or next((r for r in runs if r.root == path.parent), None)
        if owner_run is not None:
            owner_run.skipped.append((path, why))
    return sorted(runs, key=lambda r: r.run_id)


def check_run_id(run_id: str, where: str = "--run-id") -> None:
    """Refuse run ids the warehouse cannot keep: empty or blank, and Hive's NULL."""
    if not run_id.strip():
        raise TracedbError(f"{where}: a run id cannot be empty or blank")
    if run_id == HIVE_NULL:
        raise TracedbError(f"{where}: {HIVE_NULL!r} cannot be a run id (Hive partitioning reads it as NULL); "
                           "rename the folder or pass --run-id")


def discover_runs(paths: list[Path], run_id: str | None = None, exclude: tuple[str, ...] = ()) -> list[RunSpec]:
    """The runs in `paths`, by the rules in the module docstring. TracedbError when a path
    is missing, holds no trace files, or two runs would get the same id."""
    if run_id is not None:
        check_run_id(run_id)
    if run_id is not None and len(paths) != 1:
        raise TracedbError("--run-id needs exactly one PATH (a trace file or one run folder)")
    runs: list[RunSpec] = []
    for path in paths:
        if not path.exists():
            raise TracedbError(f"{display(path)}: no such file or folder")
        if path.is_file():
            runs.append(RunSpec(run_id or run_name(path), path.parent, [path], named=True))
        elif run_id is not None:
            runs.append(_whole_folder(path, run_id, tuple(exclude)))
        else:
            runs += _runs_below(path, tuple(exclude))
    seen: dict[str, RunSpec] = {}
    for r in runs:
        check_run_id(r.run_id, f"run {r.run_id!r} ({display(r.root)})")
        if r.run_id in seen:
            raise TracedbError(f"two runs would be named {r.run_id!r}: {display(seen[r.run_id].root)} and {display(r.root)}")
        seen[r.run_id] = r
    if not any(r.files or r.errors or r.labels_file for r in runs):
        raise TracedbError(f"no trace files found in {', '.join(display(p) for p in paths)}")
    return runs


def not_a_trace(error: Exception | str) -> str:
    """Why a file no reader claims is skipped, as listed and recorded (`files.error`)."""
    return "not a trace: " + ("empty file" if str(error) == "empty file" else "no reader claims it")


def drop_unclaimed(runs: list[RunSpec]) -> list[RunSpec]:
    """Move the files no reader claims (`formats.detect`: only their heads are read) from
    each run's files to its skipped ones, as the ingest will skip them: `--dry-run`."""
    from tracedb import formats
    from tracedb.errors import NotATraceError, TraceFormatError

    for run in runs:
        if run.named:
            continue
        kept = []
        for p in run.files:
            try:
                formats.detect(p)
            except NotATraceError as e:
                run.skipped.append((p, not_a_trace(e)))
                continue
            except (TraceFormatError, OSError):
                pass  # claimed or not, reading it will be its error
            kept.append(p)
        run.files = kept
    return runs


def describe(runs: list[RunSpec]) -> list[str]:
    """What was found, one line per run plus one per skipped file or error: printed before
    an ingest starts, and all that `--dry-run` prints."""
    lines = []
    for r in runs:
        mb = r.size_bytes / 1e6
        none = "" if r.files or r.errors or not r.skipped else \
            (": no trace files (an error: it holds run.json)" if r.labels_file else ": no trace files, not a run")
        lines.append(f"{r.run_id}: {len(r.files)} file(s), {mb:.1f} MB in {display(r.root)}{none}")
        for p, why in r.skipped:
            lines.append(f"  skipped {r.rel(p) if p.is_relative_to(r.root) else display(p)}: {why}")
        for p, msg in r.errors:
            lines.append(f"  error: {display(p)}: {msg}")
    return lines


_RANK_NAMES = (re.compile(r"rank[_-]?(\d+)", re.I), re.compile(r"_(\d+)\.pt\.trace\.json(\.gz)?$"))


def fallback_ranks(paths: list[Path], taken: set[int] | frozenset[int] = frozenset()) -> list[tuple[int, str | None]]:
    """A rank for each of several PyTorch traces of one run, used where a trace's own
    `distributedInfo` names none: from the file name (`rank3`, `worker_3.pt.trace.json`)
    when every name gives a distinct one, else by file position, with a warning. Never
    one of `taken`, the ranks the run's other traces name themselves: two traces that do
    not share a rank never share one."""
    from_names = []
    for p in paths:
        m = next((m for rx in _RANK_NAMES if (m := rx.search(p.name))), None)
        from_names.append(int(m[1]) if m else None)
    if None not in from_names and len(set(from_names)) == len(paths) and not taken & set(from_names):
        return [(r, None) for r in from_names]
    free = [r for r in range(len(paths) + len(taken)) if r not in taken][:len(paths)]
    others = f", none that another trace of the run names ({', '.join(map(str, sorted(taken)))})" if taken else ""
    return [(r, f"no rank in the trace or its file name: rank {r} by file order, one per file{others}")
            for r in free]
