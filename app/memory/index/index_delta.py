"""What changed since the saved index was written, saved beside it: a stop writes this, not the whole index.

Why: the whole index is gigabytes at a million rows (15 s to write), and every stop with a new table
version (a flush of the journal, another writer's commit, a compaction) wrote it again. The cache only
ever appends rows past the ones it was restored or saved with, and marks rows dead, until it compacts or
reloads; so what changed since is the live flags of every row (one byte each) and the rows appended
since (codes are recomputed from their exact vectors on restore). Rows appended past ``MAX_SHARE`` of the
base are a full save's business, which the saving thread does while the server runs, off the stop path.

The delta names its base (its row count, version and the checksums of its two large sections), and is
itself written atomically like the base (``index_file.write``'s temporary name and rename). Layout: the
base file's container (``index_file``): sections ``alive`` (n uint8), ``scope_codes`` (the new rows' int32),
``rows`` (their row columns, Arrow IPC) and ``exact`` (their float32 vectors).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from app.memory.index import index_file
from app.memory.index.index_file import FORMAT, MAGIC, TAIL, IndexFileError, Loaded

#: A delta holding more appended rows than this share of its base is written as a whole new index instead.
MAX_SHARE = 0.25
DELTA_SUFFIX = ".delta"


def delta_path(base: Path) -> Path:
    return base.with_name(base.name + DELTA_SUFFIX)


def base_mark(header: dict[str, Any]) -> dict[str, Any]:
    """What ties a delta to the one base file it extends."""
    sections = header["sections"]
    return {"version": header["version"], "rows": header["rows"],
            "codes_crc32": sections["codes"]["crc32"], "exact_crc32": sections["exact"]["crc32"]}


@dataclass
class DeltaSaved:
    """The cache's changes since its base: at ``version``, ``alive`` for all ``n`` rows, the rows past ``base_rows``."""

    version: int
    n: int
    base_rows: int
    alive: np.ndarray
    scope_codes: np.ndarray
    scopes: list[str | None]
    rows: pa.Table
    exact: np.ndarray


@dataclass
class Delta:
    header: dict[str, Any]
    alive: np.ndarray
    scope_codes: np.ndarray
    rows: pa.Table
    exact: np.ndarray

    @property
    def version(self) -> int:
        return int(self.header["version"])


def write(path: Path, delta: DeltaSaved, identity: dict[str, Any], base: dict[str, Any]) -> int:
    """Write ``delta`` atomically to ``path``; returns its size.

    Raises:
        OSError: the directory cannot be written (the old delta, if any, stays as it was).
    """
    return index_file.write_atomically(path, lambda out: _write_all(out, delta, identity, base))


def _write_all(out: IO[bytes], delta: DeltaSaved, identity: dict[str, Any], base: dict[str, Any]) -> int:
    sections: dict[str, dict[str, int]] = {}
    out.write(MAGIC)

    def section(name: str, parts: list[Any]) -> None:
        index_file.pad(out)
        start, crc = out.tell(), 0
        for part in parts:
            data = memoryview(part).cast("B") if not isinstance(part, bytes | memoryview) else part
            out.write(data)
            crc = zlib.crc32(data, crc)
        sections[name] = {"offset": start, "length": out.tell() - start, "crc32": crc}

    section("alive", [np.ascontiguousarray(delta.alive[: delta.n], dtype=np.uint8)])
    section("scope_codes", [np.ascontiguousarray(delta.scope_codes, dtype=np.int32)])
    section("rows", list(index_file.ipc_parts(delta.rows)))
    section("exact", [np.ascontiguousarray(delta.exact, dtype=np.float32)])
    header = {"format": FORMAT, "kind": "delta", "version": delta.version, "rows": delta.n,
              "base_rows": delta.base_rows, "dimension": int(delta.exact.shape[1]) if delta.exact.ndim == 2 else 0,
              "identity": identity, "base": base, "scopes": delta.scopes, "sections": sections}
    raw = json.dumps(header, sort_keys=True).encode()
    out.write(raw)
    out.write(TAIL.pack(len(raw), zlib.crc32(raw), MAGIC))
    return out.tell()


def read(path: Path, base: Loaded) -> Delta:
    """The delta at ``path``, checked whole and against ``base``.

    Raises:
        FileNotFoundError: no delta.
        IndexFileError: truncated, corrupt, or another base's.
    """
    with open(path, "rb") as file:
        fd = file.fileno()
        header = index_file.header_of(fd)
        if header.get("kind") != "delta" or header.get("base") != base_mark(base.header):
            raise IndexFileError("the delta belongs to another saved index")
        n, base_rows = int(header["rows"]), int(header["base_rows"])
        tail, d = n - base_rows, int(base.header["dimension"])
        if base_rows != base.n or tail < 0:
            raise IndexFileError("the delta's row counts do not fit its base")

        def section(name: str) -> bytes:
            where = header["sections"][name]
            data = os.pread(fd, where["length"], where["offset"])
            if len(data) != where["length"] or zlib.crc32(data) != where["crc32"]:
                raise IndexFileError(f"delta section {name} checksum mismatch")
            return data

        alive = np.frombuffer(section("alive"), dtype=np.uint8).astype(bool)
        scope_codes = np.frombuffer(section("scope_codes"), dtype=np.int32).copy()
        exact = np.frombuffer(section("exact"), dtype=np.float32)
        try:
            rows = pa.ipc.open_stream(pa.py_buffer(section("rows"))).read_all()
        except pa.ArrowException as exc:
            raise IndexFileError(f"delta row columns unreadable: {exc}") from exc
    if len(alive) != n or len(scope_codes) != tail or rows.num_rows != tail or exact.size != tail * d:
        raise IndexFileError("delta sections of the wrong size")
    return Delta(header, alive, scope_codes, rows, exact.reshape(tail, d))
