"""The readers' shared toolkit (formats/base.py): one varint decoder, one copy-kind table,
one batching idiom (issue 25 item 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracedb.formats import base, pbwire

FORMATS = Path(base.__file__).parent
# Rewritten on their own branch; they take these helpers later.
NOT_YET = {"kineto.py", "jsonstream.py"}


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32 + 5, 2**63 - 1, 2**64 - 1])
def test_varint_round_trips_the_encoder(value):
    enc = pbwire.varint_bytes(value)
    assert base.varint(b"\x01" + enc + b"\x02", 1) == (value, 1 + len(enc))


def test_varint_errors():
    with pytest.raises(IndexError):
        base.varint(b"\x80\x80", 0)  # cut
    with pytest.raises(IndexError):
        base.varint(b"\xff" * 11, 0)  # longer than 10 bytes
    with pytest.raises(ValueError, match="runs past"):
        list(base.wire_fields(b"\x0a\x05ab"))
    assert list(base.wire_fields(b"\x08\x96\x01\x12\x02hi")) == [(1, 0, 150), (2, 2, b"hi")]
    assert base.packed_ints(2, b"\x01\x96\x01") == [1, 150] and base.signed64(2**64 - 1) == -1


@pytest.mark.parametrize("text,kind", [
    ("HtoD", "HtoD"), ("h2d", "HtoD"), ("HOST_TO_DEVICE", "HtoD"), ("DEVICE_TO_HOST", "DtoH"),
    ("Memcpy DtoH (Device -> Pageable)", "DtoH"), ("MEMCPYDtoD", "DtoD"), ("MemcpyP2P", "PtoP"),
    ("memcpy_H2H", "HtoH"), ("Memcpy HtoA", "HtoA"), (1, "HtoD"), (8, "DtoD"), (12, "DtoH"),
    ("void gemm_kernel<float>", None), (None, None), (99, None),
])
def test_copy_kind_spellings(text, kind):
    assert base.copy_kind(text) == kind


def test_copy_kind_of_memory_sides():
    assert base.copy_kind_of_sides("pageable", "device") == "HtoD"
    assert base.copy_kind_of_sides("device", "pinned") == "DtoH"
    assert base.copy_kind_of_sides("device", None) is None


def test_no_reader_keeps_its_own_decoder_or_copy_table():
    """Varints are decoded by base.varint only (pbwire's streamed-element loop decodes a
    length inline, on purpose: bench/bench_stream.py); copy kinds are spelled in base only."""
    for path in sorted(FORMATS.glob("*.py")):
        if path.name in NOT_YET | {"base.py"}:
            continue
        text = path.read_text()
        decoders = len(re.findall(r"& 0x7F\) << shift", text))
        assert decoders == (1 if path.name == "pbwire.py" else 0), path.name
        assert not re.search(r'"H2D"|"HOST_TO_DEVICE"|8: "DtoD"', text), path.name


def test_append_returns_the_full_batch_only():
    b = base.BatchBuilder("steps", batch_rows=2)
    assert list(b.append({"device": "CPU:0", "step": 1})) == []
    full = list(b.append({"device": "CPU:0", "step": 2}))
    assert [(t, batch.num_rows) for t, batch in full] == [("steps", 2)] and len(b) == 0
    b.append({"device": "CPU:0", "step": 3})
    assert [batch.column("step").to_pylist() for _, batch in base.flush(b)] == [[3]]
