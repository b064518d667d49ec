"""moto's S3 server (its server mode) in a process of its own on 127.0.0.1: the object
store of the tests (tests/conftest.py's `moto_server`, one per session or xdist worker) and of
bench/bench_object_storage.py."""

from __future__ import annotations

import os
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
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(port)],
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


def _serve(port: int) -> None:
    """`python -m moto.server -H 127.0.0.1 -p PORT`, less two costs of every request that
    have nothing to do with S3 (together ~30% of the server's CPU in the S3 whole-flow test,
    ~9,500 requests): werkzeug's access-log line (formatted and written to a stream the
    tests discard) and moto's search for the service of a request's host (a listing of
    moto's ~170 package folders, a stat each, then up to ~180 URL patterns tried, under a lock),
    whose answer for one host never changes, so it is remembered. Likewise the parse of
    an object's stored modified time (a string, parsed by dateutil for every key of every
    listing) is remembered by its text: the same answers, once."""
    import functools
    import logging

    from moto.core import serialize
    from moto.moto_server import werkzeug_app
    from moto.server import main

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    dispatcher = werkzeug_app.DomainDispatcherApplication
    dispatcher.get_backend_for_host = functools.lru_cache(maxsize=256)(dispatcher.get_backend_for_host)
    parse = serialize.parse_to_aware_datetime
    parse_text = functools.lru_cache(maxsize=65536)(parse)
    serialize.parse_to_aware_datetime = lambda value: parse_text(value) if isinstance(value, str) else parse(value)
    main(["-H", "127.0.0.1", "-p", str(port)])


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
