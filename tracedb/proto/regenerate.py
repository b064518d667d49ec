"""Regenerate the committed *_pb2.py files from every tracedb/proto/*.proto.

`python tracedb/proto/regenerate.py` (needs grpcio-tools). Protos are compiled from the
repo root so their imports, and the generated `from tracedb.proto import ..._pb2`, are
package-relative.
"""

import os
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    os.chdir(ROOT)
    protos = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("tracedb/proto/*.proto"))
    return protoc.main(["protoc", "-I", ".", "--python_out=.", *protos])


if __name__ == "__main__":
    sys.exit(main())
