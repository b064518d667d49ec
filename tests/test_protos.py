"""The committed *_pb2.py files are what regenerate.py makes from our .proto files."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_matches_protos(tmp_path, monkeypatch):
    protoc = pytest.importorskip("grpc_tools.protoc")
    monkeypatch.chdir(ROOT)
    protos = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("tracedb/proto/*.proto"))
    assert len(protos) >= 7
    assert protoc.main(["protoc", "-I", ".", f"--python_out={tmp_path}", *protos]) == 0
    for proto in protos:
        generated = tmp_path / proto.replace(".proto", "_pb2.py")
        committed = ROOT / proto.replace(".proto", "_pb2.py")
        assert generated.read_text() == committed.read_text(), f"{committed} is stale: run python tracedb/proto/regenerate.py"
