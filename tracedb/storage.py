"""Where a warehouse lives: a local folder, or object storage (`s3://bucket/prefix`,
`gs://`, `az://`, any fsspec URL).

`open_storage()` is where a `--warehouse` value (an argument, $TRACEDB_WAREHOUSE, else
./tracedb-warehouse) enters, normalised once (`location()`: a `Path` for a folder, `file://`
URLs too; the URL itself, trailing `/` dropped, for object storage), and the one place that
tells a folder from object storage. What it returns is handed down as it is (`Warehouse`
holds one; the lake, the catalog, the query runner, the ingest and its workers take it), and
what differs between the two lives behind its methods: where DuckDB and pyarrow read a file
from (`parquet_source`, `duckdb_filesystem`), how a file is written and hashed (`sink`,
`finish`), which files are there (`present`, `sizes`), whether a file of it is on this
machine's disk (`local_path`: the fcntl locks, the snapshot file, `stat`). Two kinds:

- `LocalStorage`: pathlib and os, exactly as tracedb has always written a folder; the
  commit lock is an fcntl lock on `_tracedb/commit.lock`.
- `ObjectStorage`: an fsspec filesystem (s3fs for S3; credentials, region and endpoint
  from the usual environment variables: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE, ...); the Delta tables
  are written by delta-rs, which reads the same variables, with `delta_options()`. The
  commit lock is a lease object (`Lease`).

## The commit lock on object storage: a lease object

`_tracedb/commit.lock` is created with a conditional put (`If-None-Match: *`: the create
fails when the object exists), holding its owner and an expiry (`TRACEDB_LOCK_LEASE_SECONDS`,
default 60 s). The holder renews it every third of the lease with a put conditional on
the ETag it holds (`If-Match`), and deletes it, again conditional on its ETag, when done.
A lease past its expiry belongs to a writer that died: a waiter takes it over with a
put conditional on the stale object's ETag, so of two waiters exactly one wins. A holder
whose renewal failed (taken over after a stall longer than the lease, e.g. a paused VM)
has lost the lock: the lake checks `valid()` before its publish point and gives up the
commit instead of publishing (its runs keep their previous version). So, as with the
fcntl lock, a logged-but-unpublished ingest is a crashed one. Clocks of the writers
must agree to well within the lease (NTP does).

## Marks of live ingests

An ingest writes its data files straight into their partition folders long before it
commits them (`tracedb.lake`), so to a full vacuum they look like a crashed ingest's
leftovers. Each ingest therefore holds a mark, `_tracedb/ingests/<ingest_id>.live`, from
before its first file until its last commit (`ingest_mark`); `vacuum` spares every file
whose name carries the id of a live ingest (`live_ingests`). In a folder the mark is held
with an fcntl lock (the kernel drops it when the process dies, SIGKILL included: a mark
that can be locked is a dead ingest's, and is deleted); on object storage it is a lease
object like the commit lock's, renewed by the ingest, dead once expired. An ingest paused
past its mark's expiry may find files deleted: the commit checks that every file it is
about to add is there, and refuses otherwise.

These conditional writes are S3's own (AWS since 2024; MinIO, Ceph RGW, Cloudflare R2
and moto's server support them, the tests run on moto). For other fsspec filesystems
(gs://, az://, ...) the lease is created with the filesystem's exclusive create (open
mode "xb"; atomic where the filesystem implements it) and a stale lease is replaced by
delete-then-create, which is not atomic: run one writer at a time there, or several
writers whose lease never expires.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tracedb.errors import TracedbError, WarehouseError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
DEFAULT_LEASE_SECONDS = 60.0


def location(warehouse: str | Path | None) -> Path | str:
    """A warehouse as given (argument, $TRACEDB_WAREHOUSE, ./tracedb-warehouse): a Path for a
    folder, the URL (a str) for object storage."""
    if warehouse is None:
        warehouse = os.environ.get("TRACEDB_WAREHOUSE") or "tracedb-warehouse"
    if isinstance(warehouse, Path):
        return warehouse
    text = os.fspath(warehouse)
    if text.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(text).path))
    if _URL.match(text):
        return text.rstrip("/")
    return Path(text)


def open_storage(warehouse: str | Path | Storage | None) -> Storage:
    """The storage of a warehouse as given (see `location`); a storage already open is
    returned as it is, so a layer handed one never normalises the location again."""
    if isinstance(warehouse, (LocalStorage, ObjectStorage)):
        return warehouse
    loc = location(warehouse)
    return ObjectStorage(loc) if isinstance(loc, str) else LocalStorage(loc)


def concurrently(calls: list) -> list:
    """Call each function at once, in threads (Delta log reads and commits of different
    tables, listings of object-storage prefixes: delta-rs and s3fs release the GIL); their
    results in order, or the first error once all have finished."""
    if len(calls) < 2:
        return [c() for c in calls]
    from concurrent.futures import ThreadPoolExecutor, wait

    with ThreadPoolExecutor(min(len(calls), 8), thread_name_prefix="tracedb-lake") as ex:
        futures = [ex.submit(c) for c in calls]
        wait(futures)
    return [f.result() for f in futures]


def sql_str(value: str) -> str:
    """A SQL string literal (DuckDB, delta-rs predicates): single quotes doubled."""
    return "'" + value.replace("'", "''") + "'"


def latest_log_version(names: list[str]) -> int:
    """The latest Delta version among a table's `_delta_log` file names (-1: none)."""
    return max((int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()),
               default=-1)


def sha256_of(f) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    while chunk := f.read(1 << 20):
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()


class LocalStorage:
    """A warehouse folder."""

    def __init__(self, root: Path):
        self.root = root

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def home(self) -> str:
        """The lake's root as another engine or a sandbox names it: the absolute path."""
        return str(self.root.resolve())

    def local_path(self, rel: str = "") -> Path | None:
        """A file or folder of the lake on this machine's disk (None on object storage)."""
        return self.root / rel if rel else self.root

    def duckdb_filesystem(self):
        """The filesystem DuckDB must be given to read the lake's files: none, it reads paths."""
        return None

    def parquet_source(self, rel: str) -> str:
        """What pyarrow reads a Parquet file of the lake from: its path."""
        return str(self.root / rel)

    def sink(self, rel: str) -> str:
        """Where a new file is written (pyarrow's writers take it): its path, folders made."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return str(path)

    def finish(self, rel: str, sink: str) -> tuple[int, str]:
        """A file written to `sink`: its size and SHA-256."""
        return self.size_and_hash(rel)

    def drop_sink(self, sink: str) -> None:
        """A sink given up (its file is unlinked by the caller)."""

    def log_version_if_cheap(self, rel_dir: str) -> int | None:
        """The latest Delta version of a log folder from its listing (~10 us in a folder)."""
        return latest_log_version(self.names(rel_dir))

    def present(self, rel_dir: str, rels: list[str]) -> set[str]:
        """Which of these files (below `rel_dir`) are there."""
        return {r for r in rels if (self.root / r).is_file()}

    def sizes(self, rels: list[str]) -> dict[str, int | None]:
        """Each file's size (None: not there)."""
        return {r: self.size(r) for r in rels}

    def uri(self, rel: str = "") -> str:
        """What delta-rs opens (a table folder)."""
        return str(self.root / rel) if rel else str(self.root)

    def absolute(self, rel: str) -> str:
        """A file's path as the snapshot's views list it."""
        return f"{self._resolved}/{rel}"

    @functools.cached_property
    def _resolved(self) -> Path:
        # once: a resolve per file was 0.4 of a 0.75 s snapshot at 1,000 runs (5.8 k files)
        return self.root.resolve()

    def delta_options(self) -> dict | None:
        return None

    def is_file(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def size(self, rel: str) -> int | None:
        try:
            return (self.root / rel).stat().st_size
        except OSError:
            return None

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def write_atomic(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        tmp = path.with_name(f".{path.stem}-{os.getpid()}{path.suffix}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def write_new(self, rel: str, data: bytes) -> bool | None:
        """Write a file that must not exist yet, whole or not at all (a temporary file
        hard-linked to its name, as delta-rs commits in a folder); False, and nothing
        written, when it exists (another writer's)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        return True

    def makedirs(self, rel: str) -> None:
        (self.root / rel).mkdir(parents=True, exist_ok=True)

    def open_read(self, rel: str):
        return open(self.root / rel, "rb")

    def unlink(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)

    def size_and_hash(self, rel: str) -> tuple[int, str]:
        with open(self.root / rel, "rb") as f:
            return sha256_of(f)

    def names(self, rel: str) -> list[str]:
        """Names in a folder ([] when it does not exist)."""
        try:
            return os.listdir(self.root / rel)
        except OSError:
            return []

    def files_under(self, rel: str) -> set[str]:
        """Every file below a folder, as warehouse-relative paths."""
        base = self.root / rel
        return {p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file()}

    @contextmanager
    def lock(self, rel: str, wait: bool = True) -> Iterator[bool]:
        """An fcntl lock on the file `rel`; yields False when wait=False and it is held."""
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / rel, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def lock_valid(self) -> bool:
        return True

    @contextmanager
    def ingest_mark(self, rel_dir: str, ingest_id: str) -> Iterator[None]:
        """Mark an ingest live while the block runs (see the module docstring): the mark is
        locked under a temporary name, then renamed, so no vacuum ever locks a live one."""
        folder = self.root / rel_dir
        folder.mkdir(parents=True, exist_ok=True)
        tmp, final = folder / f".{ingest_id}.tmp", folder / f"{ingest_id}.live"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.replace(tmp, final)
            try:
                yield
            finally:
                final.unlink(missing_ok=True)  # still locked: no vacuum takes it for a dead one
        finally:
            os.close(fd)

    def live_ingests(self, rel_dir: str) -> set[str]:
        """Ids of the ingests whose mark is held; a mark no one holds is deleted."""
        live = set()
        for name in self.names(rel_dir):
            if not name.endswith(".live"):
                continue  # a mark being made (`.<id>.tmp`) has no file written yet
            path = self.root / rel_dir / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # its ingest has just finished
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    live.add(name[:-len(".live")])
                    continue
                path.unlink(missing_ok=True)  # its ingest died
            finally:
                os.close(fd)
        return live


class HashingFile:
    """A write-only file that hashes what goes through it: a data file's SHA-256 and size
    without reading it back from object storage."""

    def __init__(self, f):
        self._f = f
        self._h = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        self._h.update(data)
        self.size += len(data)
        self._f.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._f.close()

    def discard(self) -> None:
        """Close without publishing where the filesystem allows (an unfinished multipart upload)."""
        if not self.closed:
            self.closed = True
            try:
                (getattr(self._f, "discard", None) or self._f.close)()
            except Exception:  # noqa: BLE001 - best effort on a failed file
                pass

    @property
    def sha256(self) -> str:
        return self._h.hexdigest()


class ObjectStorage:
    """A warehouse at an fsspec URL. Its filesystem is made at first use (a `Warehouse`
    made at start-up imports no fsspec, and an unusable URL is refused where it is used);
    pickled (into an ingest's workers) it is its URL."""

    def __init__(self, url: str):
        self.root = url
        self.protocol = url.split("://", 1)[0].lower()
        self._lease: Lease | None = None

    def __repr__(self) -> str:
        return f"ObjectStorage({self.root!r})"

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"])

    @property
    def fs(self):
        if "_fs" not in self.__dict__:
            self._fs, self._base = self._open()
        return self._fs

    @property
    def base(self) -> str:
        self.fs
        return self._base

    def _open(self):
        import fsspec

        url = self.root
        kwargs: dict = {"use_listings_cache": False}  # listings must see other writers' commits
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if self.protocol in ("s3", "s3a"):
            # fsspec caches one filesystem per set of arguments, not per environment: botocore
            # would read AWS_ENDPOINT_URL once, for the first one, and a later ObjectStorage in
            # the same process would reuse that client after the variable changed (another
            # endpoint: the requests went to the old one). Named here, it keys the cache.
            client: dict = {}
            if region:
                client["region_name"] = region
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                client["endpoint_url"] = endpoint
            if client:
                kwargs["client_kwargs"] = client
        try:
            fs, base = fsspec.core.url_to_fs(url, **kwargs)
        except (ImportError, ValueError) as e:
            raise TracedbError(f"warehouse {url}: cannot open this URL: {e}") from e
        return fs, base.rstrip("/")

    def _p(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def uri(self, rel: str = "") -> str:
        return f"{self.root}/{rel}" if rel else self.root

    absolute = uri

    def home(self) -> str:
        return self.root

    def local_path(self, rel: str = "") -> None:
        return None

    def duckdb_filesystem(self):
        """DuckDB reads the lake's URLs through this fsspec filesystem (no httpfs needed),
        one a connection: it asks what a data file is once (`_data_once`)."""
        return _data_once(self.fs)

    def parquet_source(self, rel: str):
        """One GET, the file in memory."""
        import pyarrow as pa

        return pa.BufferReader(self.read_bytes(rel))

    def sink(self, rel: str) -> HashingFile:
        """An upload that hashes as it goes."""
        return self.open_write(rel)

    def finish(self, rel: str, sink: HashingFile) -> tuple[int, str]:
        sink.close()  # the upload completes here
        return sink.size, sink.sha256

    def drop_sink(self, sink: HashingFile) -> None:
        sink.discard()

    def log_version_if_cheap(self, rel_dir: str) -> None:
        """None: a listing is a request, like delta-rs's own update."""
        return None

    def present(self, rel_dir: str, rels: list[str]) -> set[str]:
        """One listing of the folder, not a request a file."""
        return self.files_under(rel_dir) & set(rels)

    def sizes(self, rels: list[str]) -> dict[str, int | None]:
        """One listing a folder, the folders listed at once."""
        found: dict[str, int] = {}
        prefixes = sorted({r.rsplit("/", 1)[0] + "/" for r in rels})
        for listed in concurrently([lambda p=p: self.sizes_under(p) for p in prefixes]):
            found.update(listed)
        return {r: found.get(r) for r in rels}

    def delta_options(self) -> dict:
        """delta-rs storage options. delta-rs reads credentials, region and endpoint from the
        environment itself; for S3 tracedb asks for conditional-put commits (`If-None-Match`
        on the log entry: two writers can never both write version N) unless a locking
        provider is configured (AWS_S3_LOCKING_PROVIDER=dynamodb), and allows plain HTTP
        when the endpoint is http:// (a local MinIO or moto)."""
        opts: dict = {}
        if self.protocol in ("s3", "s3a"):
            if not os.environ.get("AWS_S3_LOCKING_PROVIDER"):
                opts["conditional_put"] = os.environ.get("AWS_CONDITIONAL_PUT", "etag")
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
            if endpoint.startswith("http://"):
                opts["allow_http"] = "true"
        return opts

    def is_file(self, rel: str) -> bool:
        return self.size(rel) is not None

    def size(self, rel: str) -> int | None:
        try:
            info = self.fs.info(self._p(rel))
        except FileNotFoundError:
            return None
        except OSError as e:  # no permission, the store unreachable, ...
            raise WarehouseError(f"warehouse error: {self.uri(rel)}: {' '.join(str(e).split())}") from e
        return info.get("size") if info.get("type") == "file" else None

    def read_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self._p(rel))

    def write_atomic(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(self._p(rel), data)  # one PUT: readers see the old or the new object

    def write_new(self, rel: str, data: bytes) -> bool | None:
        """None: no write-if-absent here (a Delta log entry is delta-rs's to write)."""
        return None

    def makedirs(self, rel: str) -> None:
        pass  # object stores have no folders

    def open_read(self, rel: str):
        return self.fs.open(self._p(rel), "rb")

    def open_write(self, rel: str) -> HashingFile:
        return HashingFile(self.fs.open(self._p(rel), "wb"))

    def upload(self, local: Path, rel: str) -> None:
        self.fs.put_file(str(local), self._p(rel))

    def unlink(self, rel: str) -> None:
        try:
            self.fs.rm_file(self._p(rel))
        except FileNotFoundError:
            pass

    def size_and_hash(self, rel: str) -> tuple[int, str]:
        with self.open_read(rel) as f:
            return sha256_of(f)

    def names(self, rel: str) -> list[str]:
        try:
            return [e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(self._p(rel), detail=False)]
        except FileNotFoundError:
            return []

    def sizes_under(self, rel: str) -> dict[str, int]:
        """Every object below a prefix (warehouse-relative) and its size: one listing."""
        n = len(self.base) + 1
        try:
            return {p[n:]: info.get("size") for p, info in self.fs.find(self._p(rel), detail=True).items()}
        except FileNotFoundError:
            return {}

    def files_under(self, rel: str) -> set[str]:
        n = len(self.base) + 1
        try:
            return {p[n:] for p in self.fs.find(self._p(rel))}
        except FileNotFoundError:
            return set()

    @contextmanager
    def lock(self, rel: str, wait: bool = True) -> Iterator[bool]:
        lease = Lease(self, rel)
        if not lease.acquire(wait):
            yield False
            return
        self._lease = lease
        try:
            yield True
        finally:
            self._lease = None
            lease.release()

    def lock_valid(self) -> bool:
        """Whether the lease this process holds is still its own (see the module docstring)."""
        return self._lease is None or self._lease.valid()

    @contextmanager
    def ingest_mark(self, rel_dir: str, ingest_id: str) -> Iterator[None]:
        """Mark an ingest live while the block runs: a lease object of its own, renewed."""
        mark = Lease(self, f"{rel_dir}/{ingest_id}.live")
        mark.acquire()
        try:
            yield
        finally:
            mark.release()

    def live_ingests(self, rel_dir: str) -> set[str]:
        """Ids of the ingests whose mark has not expired; an expired mark is deleted."""
        live = set()
        for name in self.names(rel_dir):
            if not name.endswith(".live"):
                continue
            rel = f"{rel_dir}/{name}"
            try:
                expires = float(json.loads(self.read_bytes(rel)).get("expires", 0))
            except FileNotFoundError:
                continue
            except ValueError:
                expires = 0.0
            if expires > time.time():
                live.add(name[:-len(".live")])
            else:
                self.unlink(rel)
        return live


# Data files are written once under a unique name and never changed in place, so what
# `info` says of one (size, ETag, modified time) holds until it is deleted. DuckDB asks it
# several times each time a query opens a file (glob, size, its modified time and ETag
# for its cache of remote file data, then s3fs's open), one HEAD request each: ~45 a
# canned query on a 6-run lake, nearly all of a remote query's requests (the data comes
# from DuckDB's cache). The filesystem registered on a DuckDB connection therefore asks
# once a file for the connection's life; listings and every other object (lease, log,
# snapshot) are asked each time, as before.
_READER_CLASSES: dict[type, type] = {}


def _data_once(fs):
    """A twin of `fs` (its options and client, shared) whose `info` of a data file
    (`*.parquet`) is asked once: `_info` where the filesystem is asynchronous (s3fs,
    gcsfs, adlfs: their `size`, `exists` and `glob` call it), else `info`."""
    base = type(fs)
    cls = _READER_CLASSES.get(base)
    if cls is None:
        def _known(self, path, args, kwargs) -> tuple[dict | None, str | None]:
            key = self._strip_protocol(path)
            # asked afresh: refresh, a version; s3fs's own calls pass the path's bucket and key
            if not key.endswith(".parquet") or any(kwargs.values()) or [a for a in args if not (
                    isinstance(a, str) and a in key)]:
                return None, None
            return self._tracedb_data_infos, key

        async def _info(self, path, *args, **kwargs):
            known, key = _known(self, path, args, kwargs)
            if known is None:
                return await base._info(self, path, *args, **kwargs)
            if key not in known:
                known[key] = await base._info(self, path)
            return dict(known[key])

        def info(self, path, *args, **kwargs):
            known, key = _known(self, path, args, kwargs)
            if known is None:
                return base.info(self, path, *args, **kwargs)
            if key not in known:
                known[key] = base.info(self, path)
            return dict(known[key])

        name = f"DataOnce{base.__name__}"
        cls = _READER_CLASSES[base] = type(name, (base,), {"_info": _info} if hasattr(base, "_info") else {"info": info})
    twin = object.__new__(cls)  # not fsspec's instance cache: this connection's own
    # fs's state (options, client, event loop), not its sync methods: fsspec binds those to
    # the instance (`mirror_sync_methods`), made again here for the twin's own `_info`
    twin.__dict__.update({k: v for k, v in fs.__dict__.items() if not callable(v)})
    if hasattr(base, "_info"):
        from fsspec.asyn import mirror_sync_methods

        mirror_sync_methods(twin)
    twin._tracedb_data_infos = {}
    return twin


# What an S3 client raises before any request succeeds, by botocore's class names (no
# botocore import: other filesystems have no such errors), and what to set about it.
_SETUP_ERRORS = {
    "NoCredentialsError": "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                          "(or AWS_PROFILE, or run with an instance or pod role)",
    "PartialCredentialsError": "incomplete S3 credentials ({e}): set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "ProfileNotFound": "{e}: set AWS_PROFILE to a profile of ~/.aws/config or ~/.aws/credentials "
                       "(AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE), or unset it",
    "InvalidConfigError": "{e}: fix the AWS profile (AWS_PROFILE, AWS_CONFIG_FILE)",
    "EndpointConnectionError": "cannot reach the object store ({e}): check AWS_ENDPOINT_URL "
                               "(now {endpoint}) and the network",
    "ConnectTimeoutError": "cannot reach the object store ({e}): check AWS_ENDPOINT_URL (now {endpoint}) and the network",
    "NoRegionError": "no AWS region: set AWS_REGION",
}


def object_store_error(e: BaseException, where: str = "") -> WarehouseError | None:
    """A one-line WarehouseError naming what to set, for an S3 client's set-up error
    (missing credentials, a bad profile, an unreachable endpoint); None for others."""
    for cls in type(e).__mro__:
        text = _SETUP_ERRORS.get(cls.__name__)
        if text:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "unset: AWS's own"
            detail = text.format(e=" ".join(str(e).split()), endpoint=endpoint)
            return WarehouseError(f"warehouse error: {where + ': ' if where else ''}{detail}")
    return None


def _one_line_errors(method):
    """An ObjectStorage method whose S3 set-up errors become `object_store_error`'s line."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - only the set-up errors are translated
            err = object_store_error(e, self.root)
            if err is None:
                raise
            raise err from None

    return wrapper


for _name in ("size", "read_bytes", "write_atomic", "open_read", "open_write", "upload", "unlink",
              "size_and_hash", "names", "files_under"):
    setattr(ObjectStorage, _name, _one_line_errors(getattr(ObjectStorage, _name)))


Storage = LocalStorage | ObjectStorage


class Lease:
    """The commit lock of an object-storage lake: a lease object (see the module docstring)."""

    def __init__(self, storage: ObjectStorage, rel: str):
        self.st = storage
        self.path = storage._p(rel)
        self.seconds = float(os.environ.get("TRACEDB_LOCK_LEASE_SECONDS") or DEFAULT_LEASE_SECONDS)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.etag: str | None = None
        self.renewed = 0.0
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._s3 = storage.protocol in ("s3", "s3a") and hasattr(storage.fs, "call_s3")

    def _body(self) -> bytes:
        return json.dumps({"owner": self.owner, "expires": time.time() + self.seconds}).encode()

    # -- the three conditional writes -------------------------------------------------
    def _bucket_key(self) -> tuple[str, str]:
        bucket, _, key = self.path.partition("/")
        return bucket, key

    def _create(self) -> str | None:
        """Create the lease object if absent: its ETag, or None when it exists."""
        if self._s3:
            b, k = self._bucket_key()
            try:
                return self.st.fs.call_s3("put_object", Bucket=b, Key=k, Body=self._body(), IfNoneMatch="*")["ETag"]
            except FileExistsError:
                return None
        try:
            with self.st.fs.open(self.path, "xb") as f:
                f.write(self._body())
        except FileExistsError:
            return None
        return "generic"

    def _replace(self, etag: str) -> str | None:
        """Overwrite the lease object if it is still `etag`: the new ETag, or None."""
        if self._s3:
            b, k = self._bucket_key()
            try:
                return self.st.fs.call_s3("put_object", Bucket=b, Key=k, Body=self._body(), IfMatch=etag)["ETag"]
            except (FileNotFoundError, OSError):
                return None
        if etag != "generic-stale":  # renewal: the object is ours
            self.st.fs.pipe_file(self.path, self._body())
            return "generic"
        self.st.fs.rm_file(self.path)  # not atomic: see the module docstring
        return self._create()

    def _delete(self) -> None:
        if self._s3:
            b, k = self._bucket_key()
            try:
                self.st.fs.call_s3("delete_object", Bucket=b, Key=k, IfMatch=self.etag)
            except (FileNotFoundError, OSError):
                pass  # taken over: it is no longer ours to delete
            return
        try:
            self.st.fs.rm_file(self.path)
        except FileNotFoundError:
            pass

    def _read(self) -> tuple[str, float, str] | None:
        """(ETag, expiry, owner) of the current lease object, None when there is none."""
        try:
            info = self.st.fs.info(self.path)
            body = json.loads(self.st.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        except ValueError:  # not our JSON: a stale one, to take over
            return ("generic-stale" if not self._s3 else info.get("ETag", ""), 0.0, "")
        etag = (info.get("ETag") or "") if self._s3 else "generic-stale"
        return etag, float(body.get("expires", 0)), str(body.get("owner"))

    # -- acquire, renew, release ------------------------------------------------------
    def acquire(self, wait: bool = True) -> bool:
        try:
            return self._acquire(wait)
        except OSError as e:  # no permission, no such bucket, the store unreachable
            raise WarehouseError(f"warehouse error: cannot take the commit lease {self.st.protocol}://{self.path}: "
                                 f"{' '.join(str(e).split())}") from e

    def _acquire(self, wait: bool) -> bool:
        delay = 0.05
        while True:
            etag = self._create()
            if etag is None:
                current = self._read()
                if current is not None and current[1] < time.time() and current[0]:
                    etag = self._replace(current[0])  # a dead writer's lease: take it over
            if etag is not None:
                self.etag, self.renewed = etag, time.monotonic()
                self._thread = threading.Thread(target=self._renew_loop, daemon=True, name="tracedb-lease")
                self._thread.start()
                return True
            if not wait:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                etag = self._replace(self.etag)
            except Exception:  # noqa: BLE001 - a network error: retry at the next beat
                continue
            if etag is None:
                current = self._read_quietly()
                if current is None or current[2] != self.owner:  # taken over (or deleted)
                    self.lost = True
                    return
                if current[0] == self.etag:
                    continue  # the put did not land (network): retry at the next beat
                etag = current[0]  # ours: the put landed, its reply was lost
            self.etag, self.renewed = etag, time.monotonic()

    def _read_quietly(self) -> tuple[str, float, str] | None:
        try:
            return self._read()
        except Exception:  # noqa: BLE001 - unreachable: the next beat retries
            return (self.etag, 0.0, self.owner)

    def valid(self) -> bool:
        """Still ours, with a safety margin of a tenth of the lease."""
        return not self.lost and time.monotonic() - self.renewed < self.seconds * 0.9

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        if not self.lost:
            self._delete()
