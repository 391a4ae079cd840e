"""What changed in a Lance table between two versions, told by the fragment lists of their manifests.

A Lance table is a list of fragments, each a few data files (columns of the same rows) and a
deletion file; a fragment's id is never reused. A commit adds fragments (an append, or the rows an
update or merge rewrote), gives fragments a larger deletion file (a delete, and the old copies of
rewritten rows), swaps a fragment's data files (a column rewritten in place, or a column added), or
replaces fragments with others holding the same rows (a compaction, told by the commit's
transaction). Comparing the two lists says which rows to read, which ids to look up and which
fragments can be left alone, so another writer's commit costs what it changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Files = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Fragment:
    """The parts of one fragment's manifest entry that change when its rows do."""

    id: int
    files: Files
    deletion: tuple[int, int, int] | None  # (file id, read version, rows deleted)
    physical_rows: int
    deletion_array: str | None = None  # the deletion file's path in the table, when it is a plain Arrow list

    @classmethod
    def of(cls, metadata: Any) -> Fragment:
        """From Lance's ``FragmentMetadata``."""
        deletion = metadata.deletion_file
        if deletion is None:
            return cls(int(metadata.id), files_of(metadata), None, int(metadata.physical_rows))
        shape = (int(deletion.id), int(deletion.read_version), int(deletion.num_deleted_rows))
        array = str(deletion.path(int(metadata.id))) if deletion.file_type == "array" else None
        return cls(int(metadata.id), files_of(metadata), shape, int(metadata.physical_rows), array)

    @property
    def live_rows(self) -> int:
        return self.physical_rows - (self.deletion[2] if self.deletion else 0)

    def tracked_files(self, tracked: frozenset[int]) -> Files:
        """The data files holding ``tracked`` fields: a file of other fields only (a column another writer
        added) changes none of the rows the cache holds."""
        return tuple((path, fields) for path, fields in self.files if tracked.intersection(fields))


def files_of(metadata: Any) -> Files:
    return tuple((str(f.path), tuple(int(i) for i in f.fields)) for f in metadata.files)


@dataclass
class Diff:
    """Fragment ids, by what happened to them between the two versions."""

    added: list[int] = field(default_factory=list)  # at the newer version, rows new or rewritten: read them
    moved: list[int] = field(default_factory=list)  # written by a compaction: the same rows, elsewhere
    dropped: list[int] = field(default_factory=list)  # at the older version only
    thinned: list[int] = field(default_factory=list)  # at both, with rows deleted since
    rows_to_read: int = 0

    @property
    def lost(self) -> list[int]:
        """Fragments of the older version some of whose rows may be gone."""
        return self.dropped + self.thinned


def diff(before: Iterable[Fragment], after: Iterable[Fragment], rewritten: dict[int, Files],
         tracked: frozenset[int]) -> Diff:
    """The fragments that differ from ``before`` to ``after``.

    ``rewritten``: the fragments compactions in between wrote, with their files; one still holding
    those files has only rows that were there before. ``tracked``: the field ids the cache holds.
    """
    old = {f.id: f for f in before}
    out = Diff()
    for fragment in sorted(after, key=lambda f: f.id):  # the newest copy of an id is read last
        previous = old.pop(fragment.id, None)
        if previous is None and rewritten.get(fragment.id) == fragment.files:
            out.moved.append(fragment.id)
            continue
        if previous is None or previous.tracked_files(tracked) != fragment.tracked_files(tracked) \
                or previous.physical_rows != fragment.physical_rows:
            out.added.append(fragment.id)
            out.rows_to_read += fragment.live_rows
        shape = (fragment.deletion, fragment.physical_rows)
        if previous is not None and (previous.deletion, previous.physical_rows) != shape:
            out.thinned.append(fragment.id)
    out.dropped = sorted(old)
    return out
