"""Temporary folders of a tracedb process: a `--jobs N` pool's markers (`workers`), the
rollups' spill (`rollups.Writer`). Each is named `<prefix><pid>-<random>`, and making one
removes the folders of that prefix whose process is gone: an ingest killed with SIGKILL
cleans nothing up (the test suite's SIGKILLs left ~10 a run in the temp folder). Standard
library only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def folder(prefix: str) -> Path:
    """A new folder in the temp folder for this process, after removing dead processes'."""
    for old in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = old.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
