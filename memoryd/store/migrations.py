"""One migration scheme for both SQLite files (``index.sqlite`` and ``vectors.sqlite``), as sqlite-utils'
``migrations.py`` does it: each migration is a named, ordered function; a ``migrations`` table records which have
been applied and when; opening a file applies the missing ones, in order, in one transaction, and records them.

A file written before this scheme has no ``migrations`` table, only a ``schema_version`` in its ``meta`` table. Each
file's :class:`Migrations` knows which of its migrations such a version stands for (``legacy``): those are recorded
as applied (adopted), and the rest run as for any file. A file from a version whose data is not kept (the text index
is derived: it is rebuilt instead) is started again, and the new file records that with :func:`record` under a name
of the form ``rebuilt_from_schema_<N>`` — a record, not a function, so the history says why the file is new.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

import apsw

C = TypeVar("C")

DDL = "CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"


class UnknownMigrations(Exception):
    """The file records migrations this code does not know (written by a newer version): not used as is."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__("unknown migrations: " + ", ".join(names))
        self.names = list(names)


@dataclass(frozen=True, slots=True)
class Migration(Generic[C]):
    name: str
    apply: Callable[[apsw.Connection, C], None]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def has_table(conn: apsw.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'").fetchone()
    return row is not None


def applied(conn: apsw.Connection) -> dict[str, str]:
    """name → applied_at of every recorded migration (and record) in the file; empty without the table."""
    if not has_table(conn):
        return {}
    return {str(n): str(t) for n, t in conn.execute("SELECT name, applied_at FROM migrations ORDER BY rowid")}


def legacy_version(conn: apsw.Connection) -> str | None:
    """The ``meta`` table's ``schema_version`` of a file written before this scheme (None: no such value)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except apsw.SQLError:  # no meta table
        return None
    return None if row is None else str(row[0])


def record(conn: apsw.Connection, name: str) -> None:
    """Record ``name`` (a record such as ``rebuilt_from_schema_3``) as applied now. Inside the caller's
    transaction."""
    conn.execute(DDL)
    conn.execute("INSERT OR IGNORE INTO migrations(name, applied_at) VALUES(?, ?)", (name, _now()))


class Migrations(Generic[C]):
    """The ordered migrations of one kind of file. ``legacy`` maps a pre-scheme ``schema_version`` to how many of
    the migrations (the first ones) a file of that version has already had."""

    def __init__(self, steps: Sequence[Migration[C]], legacy: Mapping[str, int] | None = None) -> None:
        names = [m.name for m in steps]
        if len(set(names)) != len(names):
            raise ValueError("migration names must be unique")
        self.steps = list(steps)
        self.legacy = dict(legacy or {})

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.steps]

    def pending(self, conn: apsw.Connection) -> list[Migration[C]]:
        """The migrations this file lacks, in order. A pre-scheme file counts those its version stands for as
        applied (:meth:`apply` records them). Raises :class:`UnknownMigrations` for a file from a newer version."""
        done = applied(conn)
        if not done and not has_table(conn):
            version = legacy_version(conn)
            if version is not None and version in self.legacy:
                done = dict.fromkeys(self.names[: self.legacy[version]], "")
        records = [n for n in done if n not in self.names and not n.startswith("rebuilt_from_")]
        if records:
            raise UnknownMigrations(records)
        return [m for m in self.steps if m.name not in done]

    def apply(self, conn: apsw.Connection, context: C, records: Sequence[str] = ()) -> list[str]:
        """Apply the missing migrations in order, in one transaction, recording each (and, for a pre-scheme file,
        the ones its version stands for; and ``records``, such as ``rebuilt_from_schema_3``, first). Returns the
        names applied now (adopted ones not included)."""
        with conn:
            adopt = []
            if not has_table(conn):
                version = legacy_version(conn)
                if version is not None and version in self.legacy:
                    adopt = self.names[: self.legacy[version]]
            todo = self.pending(conn)
            conn.execute(DDL)
            for name in [*records, *adopt]:
                record(conn, name)
            for step in todo:
                step.apply(conn, context)
                record(conn, step.name)
        return [m.name for m in todo]
