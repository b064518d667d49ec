"""The report's settings from a file, so a nightly job's command line stays short.

Either `[tool.tracedb.report]` in a `pyproject.toml`, or `[report]` in a `tracedb.toml`
(or a bare table at its top level); the CLI looks in the current folder (tracedb.toml
first) unless `--config FILE` names one; options given on the command line win over the
file. Every key is checked: an unknown key, a wrong type or a value out of range is a
one-line error naming the file and the key.

    [tool.tracedb.report]
    confidence = 0.99            # headline and device metrics
    fdr = 0.01                   # per-kernel / per-op / per-rank metrics (Benjamini-Hochberg)
    test = "t"                   # or "mann-whitney"
    min_effect_pct = 0.5
    gate_host = false
    ignore = ["*nccl*", "Memset*"]          # kernel / op-type names (glob) left out
    [tool.tracedb.report.min_effect]         # per metric kind, % (points for shares)
    gpu_kernel_time = 1.0
    [tool.tracedb.report.gating]             # per metric kind: gates or is only shown
    copy_bytes = false
    host_step_time = true
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from tracedb.errors import TracedbError
from tracedb.report import metrics as M
from tracedb.report.stats import Settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILES = ("tracedb.toml", "pyproject.toml")
_SCALARS = {f.name: f.type for f in dataclasses.fields(Settings)
            if f.name not in ("min_effect", "gating", "ignore", "source")}


def find(folder: Path) -> Path | None:
    """The settings file of a folder: tracedb.toml, else a pyproject.toml with the table."""
    t = folder / "tracedb.toml"
    if t.is_file():
        return t
    p = folder / "pyproject.toml"
    if p.is_file() and _table(p) is not None:
        return p
    return None


def _table(path: Path) -> dict | None:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise TracedbError(f"{path}: cannot read the settings file: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise TracedbError(f"{path}: not valid TOML: {e}") from e
    if path.name == "pyproject.toml":
        return doc.get("tool", {}).get("tracedb", {}).get("report")
    return doc.get("report", doc)


def _number(path, key, value, typ):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (typ == "int" and not isinstance(value, int)):
        raise TracedbError(f"{path}: {key} must be {'an integer' if typ == 'int' else 'a number'}, not {value!r}")
    return value


def load(path: Path, base: Settings | None = None, check: bool = True) -> Settings:
    """Settings from `path`, over `base` (defaults when None); their types are checked
    here, their ranges too unless check=False (the CLI checks after its options override
    the file's values: `build_report` does)."""
    path = Path(path)
    table = _table(path)
    if table is None:
        raise TracedbError(f"{path}: no [tool.tracedb.report] table")
    if not isinstance(table, dict):
        raise TracedbError(f"{path}: the report settings must be a table")
    values = dataclasses.asdict(base or Settings())
    for key, value in table.items():
        where = f"{path}: {key}"
        if key in ("min_effect", "gating"):
            if not isinstance(value, dict):
                raise TracedbError(f"{where} must be a table of metric kinds")
            for kind, v in value.items():
                if kind not in M.KINDS:
                    raise TracedbError(f"{where}.{kind}: unknown metric kind (kinds: {', '.join(M.KINDS)})")
                if key == "gating" and not isinstance(v, bool):
                    raise TracedbError(f"{where}.{kind} must be true or false, not {v!r}")
                if key == "min_effect":
                    _number(path, f"{key}.{kind}", v, "float")
            values[key] = {**values[key], **value}
        elif key == "ignore":
            if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
                raise TracedbError(f"{where} must be a list of glob patterns (strings)")
            values[key] = list(value)
        elif key in _SCALARS:
            typ = str(_SCALARS[key])
            if "bool" in typ:
                if not isinstance(value, bool):
                    raise TracedbError(f"{where} must be true or false, not {value!r}")
            elif "str" in typ:
                if not isinstance(value, str):
                    raise TracedbError(f"{where} must be a string, not {value!r}")
            else:
                value = _number(path, key, value, "int" if "int" in typ else "float")
            values[key] = value
        else:
            raise TracedbError(f"{where}: unknown setting (settings: {', '.join([*_SCALARS, 'min_effect', 'gating', 'ignore'])})")
    values["source"] = str(path)
    settings = Settings(**values)
    if check:
        settings.check()
    return settings
