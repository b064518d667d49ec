"""The HTML report in a real headless browser (Debian's chromium): it renders at 1400 px,
the charts are in the rendered DOM (diverging bars with noise bands, trend lines with
their points, per-step distributions), and the page needs no network. The screenshot is
kept in the test's tmp folder and its path printed (pytest -s shows it)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest

from tracedb.report import build_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Skipped on a machine without the browser, but never in CI (`.ci/run` sets CI and installs
# it): there a missing chromium fails these tests instead of silently skipping them.
pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                reason="needs Debian's chromium (`.ci/run` installs it)")


def chromium(*args: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.fail("no chromium on the PATH: `.ci/run` installs Debian's chromium for the HTML report tests")
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def page(fleet_warehouse, tmp_path_factory):
    # slow_extra2 against the 5 nights before it: findings, noise bars, trends, distributions
    rep = build_report(fleet_warehouse, candidate=["slow_extra2"], history=5)
    assert rep.has_regression
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(rep.render("html"), encoding="utf-8")
    return path


def test_self_contained(page):
    doc = page.read_text()
    assert not re.search(r"https?://|\bsrc=|\bhref=|@import|url\(", doc)
    assert "<script" not in doc and "<link" not in doc


def test_renders_with_charts(page):
    run = chromium("--virtual-time-budget=2000", "--dump-dom", page.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert 'id="headline"' in dom and "Regression: GPU:0 GPU kernel time per step" in dom
    assert dom.count('class="chart bars"') == 1
    assert len(re.findall(r'<rect class="noise"', dom)) >= 5  # noise bands behind the bars
    assert dom.count('class="chart trend"') >= 3 and 'class="series"' in dom
    assert dom.count('class="chart dist"') >= 2 and len(re.findall(r'class="sample"', dom)) >= 25
    assert "<details>" in dom and "Device metrics" in dom


def test_screenshot_at_1400px(page):
    shot = page.with_suffix(".png")
    run = chromium("--window-size=1400,2600", f"--screenshot={shot}", page.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1400, 2600) and len(data) > 50_000  # a page, not a blank
    print(f"\nscreenshot of the HTML report: {shot}")
