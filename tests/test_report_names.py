"""The report never prints two different kernel names alike (issue 24 item 7): a list of
names (new kernels in the headline, the findings) is shortened together. Names come
straight from the raw Kineto trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracedb.report import metrics as M
from tracedb.report.render import kernel_names, shorten, shorten_all

TRACE = Path(__file__).parent / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"


def _kernels(part: str) -> list[str]:
    with gzip.open(TRACE, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({e["name"] for e in events if e.get("cat") == "kernel" and part in e["name"]})


@pytest.mark.parametrize("part,count", [("multi_tensor_apply", 7), ("gemm", 5)])
def test_names_listed_together_stay_apart(part, count):
    names = _kernels(part)
    assert len(names) == count
    assert len({shorten(n, 40) for n in names}) < count  # shortened one by one, some print alike
    short = shorten_all(names, 40)
    assert len(set(short.values())) == count
    assert all(len(s) <= 48 for s in short.values())  # still short (a little wider only where needed)
    assert shorten_all(["aten::mm"], 40) == {"aten::mm": "aten::mm"}  # short names as they are


def test_headline_kernel_list_names_each_kernel_once():
    names = _kernels("multi_tensor_apply")
    m = M.Metric(M.KERNEL_SET, "GPU:0", "", "ns", extra={"new": [{"name": n} for n in names]})
    import re

    listed = re.findall("\x02(.*?)\x03", kernel_names(m, "new", n=len(names), code=lambda s: f"\x02{s}\x03"))
    assert len(listed) == len(set(listed)) == len(names)
