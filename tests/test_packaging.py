"""sql/ and migrations/ reach an installed wheel, not only a source checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_carries_sql_and_migrations(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    [wheel] = tmp_path.glob("tracedb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for sql in ROOT.glob("sql/*.sql"):
        assert f"tracedb/_sql/{sql.name}" in names
    for mig in ROOT.glob("migrations/0*"):
        assert f"tracedb/_migrations/{mig.name}" in names
    # Unpacked away from the checkout, the package finds its own copies.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from tracedb import sqllib, migrate, resources;"
            "print(resources.sql_dir()); print(len(sqllib.list_queries())); print(migrate.latest())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == str(site / "tracedb" / "_sql")
    assert int(out[1]) == len(list(ROOT.glob("sql/*.sql")))
    assert int(out[2]) == len(list(ROOT.glob("migrations/0*")))
