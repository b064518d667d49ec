"""Where the top-level `sql/` and `migrations/` folders are: in a wheel they are packaged
as `tracedb/_sql` and `tracedb/_migrations` (pyproject force-include); in a source
checkout (editable install, tests) they sit beside the package."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / f"_{name}", _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tracedb installation is missing its {name}/ folder")


def sql_dir() -> Path:
    return _find("sql")


def migrations_dir() -> Path:
    return _find("migrations")
