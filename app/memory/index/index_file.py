"""The vector cache saved in one file, so that a restart maps it back in instead of reading the table.

Why: at a million rows, reading the vectors out of LanceDB and quantizing them took 20 s and more
after every restart, with searches falling back to LanceDB's flat scan (seconds each) meanwhile. The
saved file holds the cache as it is in memory, at one table version; the store maps it in (under a
second), checks that it belongs to this very table, and catches up with the commits since
(docs/performance.md, 'Start-up from the saved index').

Layout (little-endian): ``MAGIC``, then the sections, each starting on a 4 KiB boundary, then the
header (JSON), its length (u64), its CRC-32 (u32) and ``MAGIC`` again. The header names the format,
the cache's table version and whatever identity the caller passes (``identity``), the dimension,
the row count, the scopes in code order, and each section's offset, length and CRC-32. Sections:
``codes`` (n x d int8), ``stats`` (n x 3 float32), ``alive`` (n uint8), ``scope_codes`` (n int32),
``basis`` and ``bounds`` (``score_bounds``, when fitted), ``rows`` (the row columns, an Arrow IPC
stream) and ``exact`` (n x d float32, the exact vectors), last.

A file is written under a temporary name in the same directory, flushed to disk and renamed over
the old one: a reader sees the old file or the new one, whole, never a part. ``read`` checks the
header and every small section; the two large ones (``codes``, ``exact``: gigabytes at a million
rows, seconds to checksum) are checked by ``verify_large`` after the cache is already answering.
Checksums are computed from ``pread``s, not through the mapping: pages only read for a checksum stay
in the page cache and out of the process's resident set until a search touches them.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from app.memory.index.row_file import BaseRows

MAGIC = b"MMCPIDX1"
FORMAT = 1
ALIGN = 4096
TAIL = struct.Struct("<QI8s")  # header length, header CRC-32, MAGIC
EXACT_CHUNK_ROWS = 16_384  # exact rows copied at a time when saving (32 MB at 512-d)
CHECK_CHUNK_BYTES = 64 * 2**20


class IndexFileError(ValueError):
    """The file is not a whole, readable saved index (truncated, corrupt, another format)."""


@dataclass
class Saved:
    """What ``write`` stores: the cache's contents at ``version`` (blocks as the cache holds them)."""

    version: int
    n: int
    dimension: int
    codes: Sequence[np.ndarray]
    stats: Sequence[np.ndarray]
    alive: np.ndarray
    scope_codes: np.ndarray
    scopes: list[str | None]
    rows: pa.Table
    rows_at: Callable[[np.ndarray], np.ndarray]  # exact rows at ascending positions
    basis: np.ndarray | None = None
    bounds: Sequence[np.ndarray] | None = None


@dataclass
class Loaded:
    """A saved index mapped in: read-only arrays over the file, except ``alive`` and ``scope_codes``."""

    header: dict[str, Any]
    codes: np.ndarray
    stats: np.ndarray
    alive: np.ndarray
    scope_codes: np.ndarray
    scopes: list[str | None]
    rows: pa.Table
    exact: BaseRows
    basis: np.ndarray | None
    bounds: np.ndarray | None
    fd: int

    @property
    def version(self) -> int:
        return int(self.header["version"])

    @property
    def n(self) -> int:
        return int(self.header["rows"])

    def close(self) -> None:
        """Close the descriptor (the cache's row file holds its own duplicate)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SaveCancelled(Exception):
    """A save given up before its end (the server stopping): the old file, if any, stays as it was."""


def write(path: Path, saved: Saved, identity: dict[str, Any], stop: threading.Event | None = None) -> int:
    """Write ``saved`` to ``path`` atomically; returns the file's size. ``stop``: once set, the write is
    given up at the next chunk (a stop must not wait for seconds of writing).

    Raises:
        OSError: the directory cannot be written (the old file, if any, stays as it was).
        SaveCancelled: ``stop`` was set.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent)
    return write_atomically(path, lambda out: _write_all(out, saved, identity, stop))


def write_atomically(path: Path, write_body: Callable[[IO[bytes]], int]) -> int:
    """Write a file under a temporary name beside ``path`` (the others' reads of its name see the old one
    or the new one whole), flush it to disk and rename it over ``path``; returns ``write_body``'s size."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            hold_while_writing(out)
            size = write_body(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return size


def hold_while_writing(out: IO[bytes]) -> None:
    """Lock a temporary file for as long as it is open: one that nobody holds is left by a save cut short."""
    fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale_temps(directory: Path) -> list[Path]:
    """Remove the temporary files of saves that were cut short (no process holds them); returns them.

    Another server on the same directory may be saving right now: its temporary file is locked, and kept."""
    removed = []
    for temp in directory.glob(".*.tmp"):
        try:
            fd = os.open(temp, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # being written
        finally:
            os.close(fd)
        try:
            temp.unlink()
            removed.append(temp)
        except OSError:
            pass
    return removed


def _write_all(out: IO[bytes], saved: Saved, identity: dict[str, Any], stop: threading.Event | None = None) -> int:
    sections: dict[str, dict[str, int]] = {}
    out.write(MAGIC)
    n, d = saved.n, saved.dimension

    def section(name: str, parts: Callable[[], Any]) -> None:
        pad(out)
        start, crc = out.tell(), 0
        for part in parts():
            if stop is not None and stop.is_set():
                raise SaveCancelled(f"given up while writing {name}")
            data = memoryview(part).cast("B") if not isinstance(part, bytes | memoryview) else part
            out.write(data)
            crc = zlib.crc32(data, crc)
        sections[name] = {"offset": start, "length": out.tell() - start, "crc32": crc}

    section("codes", lambda: _block_rows(saved.codes, n))
    section("stats", lambda: _block_rows(saved.stats, n))
    section("alive", lambda: [np.ascontiguousarray(saved.alive[:n], dtype=np.uint8)])
    section("scope_codes", lambda: [np.ascontiguousarray(saved.scope_codes[:n], dtype=np.int32)])
    if saved.basis is not None and saved.bounds is not None:
        section("basis", lambda: [np.ascontiguousarray(saved.basis, dtype=np.float32)])
        section("bounds", lambda: _block_rows(saved.bounds or [], n))
    section("rows", lambda: ipc_parts(saved.rows))
    section("exact", lambda: (np.ascontiguousarray(saved.rows_at(np.arange(s, min(n, s + EXACT_CHUNK_ROWS))),
                                                   dtype=np.float32) for s in range(0, n, EXACT_CHUNK_ROWS)))
    header = {"format": FORMAT, "version": saved.version, "rows": n, "dimension": d, "identity": identity,
              "scopes": saved.scopes, "bounds_rank": None if saved.basis is None else int(saved.basis.shape[1]),
              "sections": sections}
    raw = json.dumps(header, sort_keys=True).encode()
    out.write(raw)
    out.write(TAIL.pack(len(raw), zlib.crc32(raw), MAGIC))
    return out.tell()


def _block_rows(blocks: Sequence[np.ndarray], n: int) -> list[np.ndarray]:
    """The first ``n`` rows of a block matrix, a block at a time."""
    parts, left = [], n
    for block in blocks:
        if left <= 0:
            break
        parts.append(np.ascontiguousarray(block[: min(left, len(block))]))
        left -= len(block)
    if left > 0:
        raise ValueError(f"the blocks hold fewer than {n} rows")
    return parts


class _Parts:
    """A write-only file for pyarrow that keeps what is written until taken (``take``)."""

    closed = False

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.written = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        pass

    def take(self) -> list[bytes]:
        parts, self.parts = self.parts, []
        return parts


def ipc_parts(table: pa.Table) -> Iterator[bytes]:
    """``table`` as an Arrow IPC stream, a record batch at a time: never a second copy of it all in memory."""
    parts = _Parts()
    with pa.ipc.new_stream(pa.PythonFile(parts, mode="w"), table.schema) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)
            yield from parts.take()
    yield from parts.take()


def pad(out: IO[bytes]) -> None:
    gap = -out.tell() % ALIGN
    if gap:
        out.write(b"\0" * gap)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- reading -------------------------------------------------------------------------------------


def read_header(path: Path) -> dict[str, Any]:
    """The header of the file at ``path``, checked (nothing else is read).

    Raises:
        FileNotFoundError: no file.
        IndexFileError: not a whole saved index of this format.
    """
    with open(path, "rb") as f:
        return header_of(f.fileno())


def header_of(fd: int) -> dict[str, Any]:
    size = os.fstat(fd).st_size
    if size < len(MAGIC) + TAIL.size or os.pread(fd, len(MAGIC), 0) != MAGIC:
        raise IndexFileError("not a saved index (no magic)")
    length, crc, magic = TAIL.unpack(os.pread(fd, TAIL.size, size - TAIL.size))
    if magic != MAGIC or length > size - TAIL.size - len(MAGIC):
        raise IndexFileError("truncated (no tail)")
    raw = os.pread(fd, length, size - TAIL.size - length)
    if zlib.crc32(raw) != crc:
        raise IndexFileError("header checksum mismatch")
    header: dict[str, Any] = json.loads(raw)
    if header.get("format") != FORMAT:
        raise IndexFileError(f"format {header.get('format')} (expected {FORMAT})")
    end = size - TAIL.size - length
    for name, where in header["sections"].items():
        if where["offset"] < len(MAGIC) or where["offset"] + where["length"] > end:
            raise IndexFileError(f"section {name} lies outside the file")
    return header


def read(path: Path) -> Loaded:
    """Map the saved index at ``path`` in, checking its header and small sections.

    Raises:
        FileNotFoundError: no file.
        IndexFileError: truncated, corrupt, or sections of the wrong size.
        OSError: the file cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _read(fd)
    except BaseException:
        os.close(fd)
        raise


def _read(fd: int) -> Loaded:
    header = header_of(fd)
    n, d, sections = int(header["rows"]), int(header["dimension"]), header["sections"]
    mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)  # never empty: it holds at least the magic and header

    def array(name: str, dtype: type[np.generic], shape: tuple[int, ...], *, check: bool = True) -> np.ndarray:
        where = sections.get(name)
        count = int(np.prod(shape))
        if where is None or where["length"] != count * np.dtype(dtype).itemsize:
            raise IndexFileError(f"section {name} has the wrong size")
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        if check and _file_crc(fd, where["offset"], where["length"]) != where["crc32"]:
            raise IndexFileError(f"section {name} checksum mismatch")
        return np.frombuffer(mapped, dtype=dtype, count=count, offset=where["offset"]).reshape(shape)

    rank = header.get("bounds_rank")
    loaded = Loaded(
        header=header,
        codes=array("codes", np.int8, (n, d), check=False),
        stats=array("stats", np.float32, (n, 3)),
        alive=array("alive", np.uint8, (n,)).astype(bool),
        scope_codes=array("scope_codes", np.int32, (n,)).copy(),
        scopes=list(header["scopes"]),
        rows=_rows(mapped, sections.get("rows")),
        exact=BaseRows(fd, int(sections["exact"]["offset"]), n),
        basis=array("basis", np.float32, (d, int(rank))) if rank is not None else None,
        bounds=array("bounds", np.float32, (n, int(rank) + 1)) if rank is not None else None,
        fd=fd,
    )
    array("exact", np.float32, (n, d), check=False)  # its size
    if loaded.rows.num_rows != n:
        raise IndexFileError(f"{loaded.rows.num_rows} rows of columns for {n} vectors")
    return loaded


def _rows(mapped: mmap.mmap, where: dict[str, int] | None) -> pa.Table:
    """The row columns, mapped (no copy). Their checksum is one of the large ones (``verify_large``: a second
    at a million rows); a full validation (offsets within their buffers, UTF-8) keeps a corrupt one from
    being read out of bounds meanwhile."""
    if where is None:
        raise IndexFileError("no row columns")
    view = memoryview(mapped)[where["offset"] : where["offset"] + where["length"]]
    try:
        table = pa.ipc.open_stream(pa.py_buffer(view)).read_all()
        table.validate(full=True)
    except pa.ArrowException as exc:
        raise IndexFileError(f"row columns unreadable: {exc}") from exc
    return table


def verify_large(loaded: Loaded) -> bool:
    """Whether the large sections (``codes``, ``rows``, ``exact``) of a file mapped in match their checksums
    (read through its descriptor: a save may have renamed a newer file over its name since)."""
    try:
        for name in ("codes", "rows", "exact"):
            where = loaded.header["sections"][name]
            if _file_crc(loaded.fd, where["offset"], where["length"]) != where["crc32"]:
                return False
    except OSError:
        return False
    return True


def _file_crc(fd: int, offset: int, length: int) -> int:
    crc, done = 0, 0
    while done < length:
        chunk = os.pread(fd, min(CHECK_CHUNK_BYTES, length - done), offset + done)
        if not chunk:
            return -1
        crc, done = zlib.crc32(chunk, crc), done + len(chunk)
    return crc

