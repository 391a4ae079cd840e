"""Float32 rows at fixed offsets in a nameless scratch file: the vector cache's exact copies.

Why a file: the cache searches int8 codes held in memory and needs the exact vectors only for the
few rows that can still be in a top-k (``quantized_matrix``). Kept in memory they were the largest
part of the server (200 MB at 100k x 512); on disk, reads of a few rows come from the page cache,
which the kernel may reclaim, and the process keeps none of it resident.

The file is created already unlinked (``TemporaryFile``), so it never outlives the process, not even
a SIGKILLed one, and no other process sees it. Row ``i`` lives at byte ``i * dimension * 4``; reads
and writes are positional (``pread``/``pwrite``), so readers need no lock against the writer as long
as they read rows written before they looked (the cache's snapshots guarantee that).

A cache restored from its saved index (``index_file``) reads its first ``base_rows`` rows from that
file, opened read-only, and writes only rows past them: the saved file is never changed, and the
open descriptor keeps it readable when a later save renames a new one over it.
"""

from __future__ import annotations

import logging
import os
import tempfile
import weakref
from pathlib import Path
from typing import IO, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)


class RowFile:
    """Rows of ``dimension`` float32 values, written and read by row number."""

    def __init__(self, dimension: int, directory: Path | None = None, base: BaseRows | None = None) -> None:
        self.dimension = dimension
        self.row_bytes = dimension * 4
        self._file = _scratch_file(directory)
        self._fd = self._file.fileno()
        self.base_rows = 0 if base is None else base.rows
        self._base_offset = 0 if base is None else base.offset
        self._base_fd = -1 if base is None else os.dup(base.fd)
        # Searches may still hold a snapshot of a replaced matrix: the file closes with its last user.
        self._closer = weakref.finalize(self, _close, self._file, self._base_fd)

    def write(self, start: int, matrix: np.ndarray) -> None:
        """Store ``matrix``'s rows as rows ``start ..``.

        Raises:
            OSError: the disk is full or failing.
        """
        if start < self.base_rows:
            raise ValueError(f"row {start} is in the saved index (read-only below row {self.base_rows})")
        data = memoryview(np.ascontiguousarray(matrix, dtype=np.float32)).cast("B")
        offset = start * self.row_bytes
        while data:
            written = os.pwrite(self._fd, data, offset)
            data, offset = data[written:], offset + written

    def read(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (ascending), one read per run of consecutive rows.

        Raises:
            OSError: a row was never written (a caller bug) or the disk failed.
        """
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.dimension), dtype=np.float32)
        if len(positions) == 0:
            return out
        breaks = np.flatnonzero(np.diff(positions) != 1) + 1
        if self.base_rows:  # a run crossing into the scratch rows is split there
            breaks = np.union1d(breaks, np.searchsorted(positions, [self.base_rows])).astype(np.int64)
            breaks = breaks[(breaks > 0) & (breaks < len(positions))]
        for first, stop in zip([0, *breaks.tolist()], [*breaks.tolist(), len(positions)], strict=True):
            self._read_into(out[first:stop], int(positions[first]))
        return out

    def close(self) -> None:
        self._closer()

    def _read_into(self, rows: np.ndarray, start: int) -> None:
        view = memoryview(rows).cast("B")
        fd, offset = self._fd, start * self.row_bytes
        if start < self.base_rows:
            fd, offset = self._base_fd, self._base_offset + offset
        while view:
            got = os.preadv(fd, [view], offset)
            if got == 0:
                raise OSError(f"row file ends before row {offset // self.row_bytes}")
            view, offset = view[got:], offset + got


class BaseRows(NamedTuple):
    """The first ``rows`` rows, stored contiguously at byte ``offset`` of the open file ``fd`` (duplicated)."""

    fd: int
    offset: int
    rows: int


def _close(file: IO[bytes], base_fd: int) -> None:
    file.close()
    if base_fd >= 0:
        os.close(base_fd)


def _scratch_file(directory: Path | None) -> IO[bytes]:
    """An unlinked file in ``directory`` (beside the table, on the same disk), else the system's temp dir."""
    if directory is not None:
        try:
            return tempfile.TemporaryFile(dir=directory)
        except OSError as exc:  # read-only or vanished directory: the system temp dir still works
            logger.warning("cannot create the vector cache's row file in %s (%s); using %s",
                           directory, exc, tempfile.gettempdir())
    return tempfile.TemporaryFile()
