"""Float32 rows at fixed offsets in a nameless scratch file: the vector cache's exact copies.

Why a file: the cache searches int8 codes held in memory and needs the exact vectors only for the
few rows that can still be in a top-k (``quantized_matrix``). Kept in memory they were the largest
part of the server (200 MB at 100k x 512); on disk, reads of a few rows come from the page cache,
which the kernel may reclaim, and the process keeps none of it resident.

The file is created already unlinked (``TemporaryFile``), so it never outlives the process, not even
a SIGKILLed one, and no other process sees it. Row ``i`` lives at byte ``i * dimension * 4``; reads
and writes are positional (``pread``/``pwrite``), so readers need no lock against the writer as long
as they read rows written before they looked (the cache's snapshots guarantee that).
"""

from __future__ import annotations

import logging
import os
import tempfile
import weakref
from pathlib import Path
from typing import IO

import numpy as np

logger = logging.getLogger(__name__)


class RowFile:
    """Rows of ``dimension`` float32 values, written and read by row number."""

    def __init__(self, dimension: int, directory: Path | None = None) -> None:
        self.dimension = dimension
        self.row_bytes = dimension * 4
        self._file = _scratch_file(directory)
        self._fd = self._file.fileno()
        # Searches may still hold a snapshot of a replaced matrix: the file closes with its last user.
        self._closer = weakref.finalize(self, self._file.close)

    def write(self, start: int, matrix: np.ndarray) -> None:
        """Store ``matrix``'s rows as rows ``start ..``.

        Raises:
            OSError: the disk is full or failing.
        """
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
        for first, stop in zip([0, *breaks.tolist()], [*breaks.tolist(), len(positions)], strict=True):
            self._read_into(out[first:stop], int(positions[first]))
        return out

    def close(self) -> None:
        self._closer()

    def _read_into(self, rows: np.ndarray, start: int) -> None:
        view = memoryview(rows).cast("B")
        offset = start * self.row_bytes
        while view:
            got = os.preadv(self._fd, [view], offset)
            if got == 0:
                raise OSError(f"row file ends before row {offset // self.row_bytes}")
            view, offset = view[got:], offset + got


def _scratch_file(directory: Path | None) -> IO[bytes]:
    """An unlinked file in ``directory`` (beside the table, on the same disk), else the system's temp dir."""
    if directory is not None:
        try:
            return tempfile.TemporaryFile(dir=directory)
        except OSError as exc:  # read-only or vanished directory: the system temp dir still works
            logger.warning("cannot create the vector cache's row file in %s (%s); using %s",
                           directory, exc, tempfile.gettempdir())
    return tempfile.TemporaryFile()
