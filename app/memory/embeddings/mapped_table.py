"""Serve a model's read-only lookup table from a file mapping instead of private memory.

Why: USE keeps a 62.5 MB uint8 token-embedding table (one 512-byte row per vocabulary piece) in
anonymous memory, although a text touches only the rows of its own pieces. Mapped from a file, only
the pages of pieces actually seen become resident (a small part of the table even after a whole
benchmark corpus; docs/performance.md, 'Mapped token table'), and those pages are clean, so the
kernel can drop them under pressure and processes sharing the file share them.

The file is a derived copy, never the source: the model still decodes its table from the package on
every load, and the file is compared with that table (read in chunks, not through the mapping, so the
comparison maps nothing in) and rewritten when it differs. A stale or damaged file therefore cannot
change a vector. Any failure to write or map it leaves the table in memory, as before.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

CHUNK_BYTES = 2**20  # small: the check's buffers stay in the heap afterwards


def file_name(stem: str, table: np.ndarray) -> str:
    """The file's name, from a digest of the table's bytes, shape and type: files with other contents
    (another model version sharing the directory) never take its name, so a file found under it and
    holding the right bytes stays right (hashing adds a fraction of a second to a load)."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{table.dtype.str}:{table.shape}".encode())
    digest.update(table.reshape(-1).view(np.uint8).data)
    return f"{stem}-{digest.hexdigest()}.bin"


def map_table(table: np.ndarray, directory: Path, stem: str) -> np.ndarray:
    """``table`` as a read-only array over ``directory/<file_name>``, written first if it differs;
    ``table`` itself when the file cannot be written or mapped (logged)."""
    if table.size == 0:
        return table
    source = np.ascontiguousarray(table)
    path = directory / file_name(stem, source)
    try:
        if not _holds(path, source):
            _write(path, source)
        return _mapped(path, source)
    except OSError as exc:
        logger.warning("keeping the model's %s table in memory: could not map %s (%s)", stem, path, exc)
        return table


def _holds(path: Path, table: np.ndarray) -> bool:
    """Whether the file's bytes are exactly the table's (plain reads: nothing gets mapped in)."""
    flat = table.reshape(-1).view(np.uint8)
    try:
        with path.open("rb") as file:
            if os.fstat(file.fileno()).st_size != flat.nbytes:
                return False
            buffer = bytearray(CHUNK_BYTES)
            view = memoryview(buffer)
            for start in range(0, flat.nbytes, CHUNK_BYTES):
                length = min(CHUNK_BYTES, flat.nbytes - start)
                if file.readinto(view[:length]) != length:
                    return False
                if not np.array_equal(np.frombuffer(buffer, np.uint8, length), flat[start:start + length]):
                    return False
    except FileNotFoundError:
        return False
    return True


def _write(path: Path, table: np.ndarray) -> None:
    """Write atomically: a reader (another server starting) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(table.reshape(-1).view(np.uint8).data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    logger.info("wrote the model table file %s (%.1f MB)", path, table.nbytes / 2**20)


def _mapped(path: Path, like: np.ndarray) -> np.ndarray:
    with path.open("rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        # Without these two, the first faults map in most of the file (docs/performance.md, 'Mapped
        # token table'): the check above leaves the whole file in the page cache, and a fault maps
        # the cached pages around it too (fault-around, large folios); readahead does the same from
        # disk. Dropping our unmapped cached pages (pages other processes map stay) and asking for
        # random access make a fault bring in its page.
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        if hasattr(mmap, "MADV_RANDOM"):
            mapping.madvise(mmap.MADV_RANDOM)
    if len(mapping) != like.nbytes:  # replaced by a different file since we checked it
        mapping.close()
        raise OSError(f"{path} changed while it was being mapped")
    # The array keeps the mapping alive (its base); the file's descriptor is no longer needed.
    return np.frombuffer(mapping, dtype=like.dtype).reshape(like.shape)
