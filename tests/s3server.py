"""moto's S3 server (its server mode) in a process of its own on 127.0.0.1: the object
store of the tests (tests/conftest.py's `moto_server`, one per session or xdist worker) and of
bench/bench_object_storage.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[str]:
    """A running moto S3 server, as its endpoint URL; stopped at the end of the block."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"moto's S3 server exited with {proc.returncode}") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("moto's S3 server did not start in 30 s")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)
