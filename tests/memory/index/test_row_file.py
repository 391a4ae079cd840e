"""The exact vectors' scratch file: rows read back bit for bit, nothing left on disk."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from app.memory.index.row_file import RowFile


def test_rows_read_back_exactly_in_runs_and_scattered(tmp_path: Path) -> None:
    rows = np.random.default_rng(1).standard_normal((300, 24)).astype(np.float32)
    file = RowFile(24, tmp_path)
    file.write(0, rows[:100])
    file.write(100, rows[100:])
    for positions in ([0], [299], [5, 6, 7, 8], [0, 2, 4, 150, 151, 298, 299], list(range(300))):
        np.testing.assert_array_equal(file.read(np.array(positions)), rows[positions])
    assert file.read(np.empty(0, dtype=np.int64)).shape == (0, 24)


def test_a_rewritten_row_reads_as_its_new_value(tmp_path: Path) -> None:
    file = RowFile(4, tmp_path)
    file.write(0, np.zeros((3, 4), dtype=np.float32))
    file.write(1, np.ones((1, 4), dtype=np.float32))
    np.testing.assert_array_equal(file.read(np.array([0, 1, 2]))[:, 0], [0.0, 1.0, 0.0])


def test_the_file_has_no_name_in_its_directory_and_reading_past_its_end_fails(tmp_path: Path) -> None:
    file = RowFile(8, tmp_path)
    file.write(0, np.ones((2, 8), dtype=np.float32))
    assert os.listdir(tmp_path) == []  # unlinked from the start: nothing to clean up after a crash
    with pytest.raises(OSError, match="ends before row 2"):
        file.read(np.array([2]))
    file.close()


def test_an_unwritable_directory_falls_back_to_the_system_temp_dir(tmp_path: Path) -> None:
    file = RowFile(2, tmp_path / "missing")
    file.write(0, np.array([[1.0, 2.0]], dtype=np.float32))
    np.testing.assert_array_equal(file.read(np.array([0])), [[1.0, 2.0]])
