"""Outcome feedback: what the server answered, and what turned out to be true (``kevlike serve
--record DB_URL``, ``POST /v1/feedback``, ``GET /v1/feedback/report``, ``kevlike recalibrate``).

The store is a relational database through SQLAlchemy Core: a SQLite file by default
(``sqlite:///feedback.db``), or PostgreSQL (``postgresql+psycopg://USER:PASSWORD@HOST/DB``, driver
``pip install "psycopg[binary]"``) when a team outgrows one machine: several ``kevlike serve`` processes may
record into one store (tested with two processes on both backends: nothing lost, nothing twice). The tables
are created on first use, by one process at a time (SQLite: under the write lock; PostgreSQL: under a
transaction-level advisory lock), so replicas starting together do not race::

    kevlike_requests   request_id TEXT PK · model TEXT · created_at FLOAT (Unix seconds, UTC) ·
                       state TEXT NULL (only with --record-state)
    kevlike_answers    request_id TEXT FK · question_id TEXT · type TEXT (noul | choice | score |
                       choice:set) · probabilities TEXT (JSON list, option order) · temperature FLOAT ·
                       option_keys TEXT (JSON list)                      PK (request_id, question_id)
    kevlike_outcomes   request_id TEXT FK · question_id TEXT · target TEXT (JSON list: the observed
                       answer as a distribution over the options) · created_at FLOAT
                                                                         PK (request_id, question_id)

**SQLite** is opened in WAL mode (readers never block the writer, and a reader — a backup, a DB browser,
a long report — never makes a write fail), with a busy timeout (``busy_timeout_s``, 5 s) for the lock
another *writer* holds, and write transactions begin ``IMMEDIATE`` (they take the write lock first, so a
read-then-write transaction never fails on a snapshot another process made stale). A lock still held
after the busy timeout raises :class:`StoreBusy` (HTTP 503 with ``Retry-After``), never a server error.
**PostgreSQL** runs each write at READ COMMITTED, and a write first takes a transaction-level advisory lock on
its request id: two processes writing one request at once (a client that reuses a request id across replicas,
or posts its outcomes to two replicas) take turns, so neither fails on the key or deadlocks, and the last write
wins as on SQLite (but a request id that already has an outcome keeps its record: :meth:`FeedbackStore.record`);
writes of different requests never wait for each other. A write that still loses a race on a key (another
backend) is tried again (:data:`CONFLICT_RETRIES` times).

Answered requests are recorded off the response path by a :class:`Recorder`: a bounded queue and one
writer thread that retries a busy store until the write lands, so a lock loses no record; when the
queue is full the server answers new decisions 503 (``Retry-After``) *before* computing them, so an
answered request always has its place in the queue.

An outcome is an answer in the labelled-data format of :mod:`kevlike.data.labelled` (``true``/``false``,
an option key, a level index, or a distribution). Posting it again replaces it (the last observation
wins), so repeats are idempotent. Each answer keeps the temperature it was served with, so
``T · log p`` recovers logits equivalent to the model's (softmax is shift-invariant) and
:func:`kevlike.eval.owndata.fit_profile` fits a new profile on them exactly as on a labelled file.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import queue
import re
import sqlite3
import threading
import time
import urllib.parse

from sqlalchemy import (Column, Float, ForeignKey, MetaData, String, Table, Text, create_engine, event, func, inspect,
                        select, text)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, DataError, IntegrityError, OperationalError

from kevlike.data.labelled import DISTRIBUTION_TOLERANCE
from kevlike.metrics import abstention, ece
from kevlike.request.schema import Option, Question

CANNOT_TELL_OUTCOME = {"cannot_tell": True}
"""The stored target of an outcome ``{"cannot_tell": true}``: the state did not determine the answer (as in
labelled files, :mod:`kevlike.data.labelled`)."""

log = logging.getLogger("kevlike.service.feedback")

metadata = MetaData()
requests_table = Table(
    "kevlike_requests", metadata,
    Column("request_id", String(128), primary_key=True),
    Column("model", Text, nullable=False, index=True),   # a model directory's path: no length cap
    Column("created_at", Float, nullable=False),
    Column("state", Text, nullable=True))
answers_table = Table(
    "kevlike_answers", metadata,
    Column("request_id", String(128), ForeignKey("kevlike_requests.request_id"), primary_key=True),
    Column("question_id", Text, primary_key=True),   # no length cap (a VARCHAR(n) is enforced by PostgreSQL)
    Column("type", String(16), nullable=False),
    Column("probabilities", Text, nullable=False),
    Column("temperature", Float, nullable=False),
    Column("option_keys", Text, nullable=False))
outcomes_table = Table(
    "kevlike_outcomes", metadata,
    Column("request_id", String(128), ForeignKey("kevlike_requests.request_id"), primary_key=True),
    Column("question_id", Text, primary_key=True),
    Column("target", Text, nullable=False),
    Column("created_at", Float, nullable=False))


CONFLICT_RETRIES = 3
"""How often a write that lost a race on a key to another process (PostgreSQL) is tried again."""

_CREATE_LOCK = 0x6B65766C   # PostgreSQL advisory lock id held while the tables are created ("kevl")


class UnknownRequest(LookupError):
    """No recorded request has this id (HTTP 404)."""


class StoreBusy(RuntimeError):
    """The store is locked or unreachable for now (SQLite: another connection held the write lock past the
    busy timeout; any backend: a lost connection): retry later (HTTP 503 with ``Retry-After``). The
    database's own :class:`sqlalchemy.exc.OperationalError` is its ``__cause__``. Subclasses whose
    ``transient`` is False (:class:`StoreLost`, :class:`StoreBroken`) are faults a retry cannot fix."""

    transient = True


class StoreLost(StoreBusy):
    """The SQLite file of an open store (or its write-ahead log ``-wal`` or shared-memory ``-shm`` file) was
    removed or replaced (SQLite would go on writing into the unlinked file, and every record would vanish at exit):
    nothing more is written until the server restarts. A :class:`StoreBusy`, so callers answer 503 and the
    recorder keeps its queue (and says so in the log); not :attr:`~StoreBusy.transient`."""

    transient = False


class StoreBroken(StoreBusy):
    """The store cannot be used as it is and no retry will change that: its file is corrupt (SQLite's "database
    disk image is malformed") or its tables lack the store's columns (dropped or altered by hand). A
    :class:`StoreBusy`, so callers answer 503 (naming the fault, without ``Retry-After``) and the recorder keeps
    its queue while an operator repairs or replaces the store; not :attr:`~StoreBusy.transient`."""

    transient = False


class Unstorable(ValueError):
    """One record the database cannot hold, whatever is retried (PostgreSQL: a NUL character in a text column, a
    key longer than its index allows): that record is refused or dropped, and the store goes on with the others.
    :meth:`FeedbackStore.refusal` names such a request before it is computed, so a server refuses it (422)
    instead of answering what it cannot record."""


PG_KEY_BYTES = 2000
"""The longest question id (UTF-8 bytes) a PostgreSQL store records: its answers' primary key (request id, at most
128 characters, and question id) must fit a btree index row (at most 2,704 bytes, PostgreSQL's "index row size …
exceeds btree version 4 maximum 2704")."""


NEW_STORE = "a new store (another SQLite file or PostgreSQL database)"
"""What a message about a store that cannot go on tells the user to start on (the store may be either backend)."""

_BROKEN_SCHEMA = re.compile(r"no such table|no such column|has no column named|table \S+ has \d+ columns")
"""SQLite's operational errors that mean the tables are not the store's (not a lock: a retry cannot help)."""


_READ_ONLY = re.compile(r"readonly database|read-only file system")
"""SQLite's operational errors that mean the store cannot be written at all (a read-only file or file system)."""


def _first_line(exc: BaseException) -> str:
    """The first line of a database error's own message (the driver's, ``exc.orig``, where SQLAlchemy wraps one),
    at most 200 characters; the error's type name where it has no message."""
    lines = str(getattr(exc, "orig", None) or exc).splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _store_error(exc: BaseException) -> StoreBusy | Unstorable | None:
    """The :class:`StoreBusy` (or :class:`StoreBroken`, or :class:`Unstorable` for a value the database cannot
    hold) a database error leaves as, or None for one the caller
    handles itself (an :class:`~sqlalchemy.exc.IntegrityError`: a key another process inserted) or that is no
    database error."""
    first = _first_line(exc)
    if isinstance(exc, DataError) or getattr(getattr(exc, "orig", None), "sqlstate", None) == "54000":
        return Unstorable(f"the outcome store cannot hold this record ({first})")    # 54000: program_limit_exceeded
    if isinstance(exc, OperationalError):
        if _READ_ONLY.search(first):
            return StoreBroken(f"the outcome store cannot be written ({first}): make its file and directory "
                               f"writable (not a read-only file system), then restart the server")
        if _BROKEN_SCHEMA.search(first):
            return StoreBroken(f"the outcome store's tables are not the store's ({first}): repair it, or start the "
                               f"server on {NEW_STORE} (`kevlike serve --record` creates the tables)")
        if "disk is full" in first or "No space left" in first:     # transient: space can be freed
            return StoreBusy(f"the outcome store's disk is full ({first}): free space where its file lies; "
                             f"a running server keeps its records in memory meanwhile")
        return StoreBusy(f"the outcome store is busy or unreachable: {first}")
    if isinstance(exc, DatabaseError) and not isinstance(exc, IntegrityError):
        return StoreBroken(f"the outcome store is damaged ({first}): nothing more can be recorded in it; restore it "
                           f"from a backup, or start the server on {NEW_STORE}")
    return None


def _dir_writable(path: str) -> bool:
    """Whether files can be created in directory ``path`` (``access(2)``: False on a read-only file system, for root
    too)."""
    return os.access(path, os.W_OK)


def _read_only_connect(url: str, timeout_s: float):
    """A reader's connection factory for a SQLite store in a directory that cannot be written (a read-only mount, a
    backup volume), or None where it can (the store is then opened as usual).

    A reader of a WAL-mode database needs its ``-shm`` file, which SQLite creates beside it: on a read-only file
    system every open fails with "unable to open database file". When no ``-wal`` file holds unmerged outcomes
    (a server closed cleanly checkpoints it: ``kevlike serve`` does at exit), the file alone is the whole store, and
    it is opened as ``immutable`` (https://www.sqlite.org/uri.html: no locks, no ``-shm``; correct because no
    process can write in a directory that cannot be written).

    Where the ``-wal`` holds outcomes and a ``-shm`` lies beside it (a server that was killed leaves both), SQLite
    reads them as they are (``mode=ro``: https://www.sqlite.org/wal.html, "Read-Only Databases").

    Raises:
        ValueError: the ``-wal`` file is not empty and no usable ``-shm`` lies beside it (outcomes live only in the
            -wal; reading them needs the ``-shm``): it names both files and says to copy them together to a
            writable directory.
    """
    path = make_url(url).database
    if not path or _dir_writable(os.path.dirname(os.path.abspath(path)) or "."):
        return None
    uri = f"file:{urllib.parse.quote(os.path.abspath(path), safe='/')}?mode=ro"
    wal = _file_stat(f"{path}-wal")
    if wal is None or wal.st_size == 0:
        uri += "&immutable=1"
    elif not _reads_with_shm(path, uri, timeout_s):
        raise ValueError(f"{shown_url(url)}: {path!r} lies in a directory that cannot be written (a read-only file "
                         f"system or directory), and its -wal file holds {wal.st_size} bytes of outcomes not yet "
                         f"merged into it, which SQLite reads only with a -shm file that is missing or unusable "
                         f"there: copy {path!r} and {path + '-wal'!r} together to a writable directory and pass "
                         f"that --db")
    return lambda: sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=timeout_s)


def _reads_with_shm(path: str, uri: str, timeout_s: float) -> bool:
    """Whether SQLite reads the store at ``uri`` (``mode=ro``) through the non-empty ``-shm`` beside ``path`` (a
    killed server leaves its -wal and -shm; none can be created in a read-only directory)."""
    shm = _file_stat(f"{path}-shm")
    if shm is None or shm.st_size == 0:
        return False
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout_s)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return True


def _lost_wal_hint(url: str) -> str:
    """For a SQLite file in WAL mode (its header's bytes 18–19 are 2: https://www.sqlite.org/fileformat.html, 1.3.4)
    with no ``-wal`` (or an empty one) beside it: a hint that the -wal, where a server keeps its recent records
    and, early on, its tables, was lost in a copy or move; else ``""``."""
    path = make_url(url).database if url.startswith("sqlite") else None
    wal = _file_stat(f"{path}-wal") if path else None
    if not path or (wal is not None and wal.st_size > 0):    # an empty -wal: the one this reader's open created
        return ""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return ""
    if len(head) == 20 and head[:16] == b"SQLite format 3\x00" and head[18] == head[19] == 2:
        return (f" (it is a store's file in WAL mode whose -wal is not beside it: if it was copied or moved, copy "
                f"{path + '-wal'!r} with it)")
    return ""


SQLITE_MIN_BYTES = 512
"""The smallest SQLite database file that has been written to: one page (https://www.sqlite.org/fileformat.html,
1.3: pages are 512 to 65,536 bytes; a store's file holds its header page from the moment WAL mode is set)."""


def _file_stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _file_identity(path: str) -> tuple[int, int] | None:
    st = _file_stat(path)
    return None if st is None else (st.st_dev, st.st_ino)


def shown_url(url: str) -> str:
    """``url`` as messages, logs and profile files show it: the password masked (``postgresql://bob:***@host/db``, and
    a ``?password=`` parameter), so that an error line or a profile's ``source`` never carries a database password."""
    try:
        u = make_url(url)
        secret = {k: "***" for k in u.query if k.lower() in ("password", "passwd", "pass")}   # libpq's ?password=
        return (u.update_query_dict(secret) if secret else u).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL (ValueError: a port that is not a number): mask anything
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)     # between "://user:" and "@" all the same


def check_store_url(url: str, *, must_exist: bool = False, must_write: bool = False) -> None:
    """Refuse, before any connection, a store URL that cannot keep outcomes: one that does not parse, an in-memory
    SQLite database (each connection of the pool would see its own, and all of it is lost at exit), a SQLite
    path ending in ``/`` (SQLite would create the file without it, where no check of the file looks), a SQLite
    file in a directory that does not exist, and, with ``must_exist`` (reading a store, as ``kevlike
    recalibrate`` does), a SQLite file that does not exist (connecting would create an empty one), and, with
    ``must_write`` (a server recording), a SQLite file or directory that cannot be written (a read-only file or file
    system: SQLite's own error, "unable to open database file", reads like a busy store).

    Raises:
        ValueError: one line naming the URL and what is wrong.
    """
    shown = shown_url(url)
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(f"{shown!r} is not a database URL (e.g. sqlite:///feedback.db for a file here, or "
                         f"postgresql+psycopg://USER:PASSWORD@HOST/DB)") from None
    if u.drivername != u.drivername.lower():     # SQLAlchemy's "Can't load plugin: sqlalchemy.dialects:SQLITE"
        raise ValueError(f"{shown!r}: the URL's scheme is written in lower case ({u.drivername.lower()}://…)")
    if u.get_backend_name() != "sqlite":
        return
    db = u.database or ""
    if db in ("", ":memory:") or db.startswith("file::memory:") or "mode=memory" in db or \
            u.query.get("mode") == "memory":
        raise ValueError(f"{shown!r} is an in-memory SQLite database: each connection would see its own and every "
                         f"outcome is lost at exit; give a file, e.g. sqlite:///feedback.db")
    if u.query or "?" in url.partition("://")[2]:  # ?mode=ro and the like would be ignored silently (a bare "?"
        # parses as no option at all, and the file is then named without what follows it)
        raise ValueError(f"{shown!r}: SQLite URL options ({', '.join(sorted(u.query)) or '?'}) are not used by the "
                         f"outcome store; give the file alone, e.g. sqlite:///feedback.db")
    if db.startswith("file:"):     # the driver opens "file:x.db" as a file of that name, not as a URI
        raise ValueError(f"{shown!r}: SQLite URI file names (file:…) are not used by the outcome store; give the "
                         f"path alone: sqlite:///{db[len('file:'):].split('?', 1)[0]}")
    path = db
    if path.endswith(("/", os.sep)):      # SQLite would create the file without the slash, under another name
        raise ValueError(f"{shown!r}: {path!r} ends with a '/': give a database file, e.g. "
                         f"sqlite:///{path.rstrip('/' + os.sep) or '.'}/feedback.db")
    if os.path.isdir(path):
        raise ValueError(f"{shown!r}: {path!r} is a directory, not a database file")
    if os.path.islink(path) and not os.path.exists(path):
        raise ValueError(f"{shown!r}: {path!r} is a link to {os.readlink(path)!r}, which does not exist")
    if must_exist and not os.path.isfile(path):
        raise ValueError(f"{shown!r}: no database file {path!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{shown!r}: the directory {parent!r} does not exist")
    if must_write:
        for f in ([path] if os.path.exists(path) else []) + [parent]:
            if not os.access(f, os.W_OK):
                raise ValueError(f"{shown!r}: {f!r} cannot be written (a read-only file, directory or file system): "
                                 f"the store could not keep what the server answers")


def model_filter(column, model: str):
    """The SQL condition "``column`` is ``model`` or ``model@PROFILE``": exact and case-exact (no ``LIKE``, whose
    ``_``/``%`` wildcards and, in SQLite, ASCII case folding would match other models)."""
    prefix = model + "@"
    return (column == model) | (func.substr(column, 1, len(prefix)) == prefix)


class FeedbackStore:
    """The recording database. Thread-safe: writes are serialised in-process, and each is one
    transaction (a crash leaves either all of a request's rows or none).

    Args:
        url: a SQLAlchemy database URL (``sqlite:///path.db``, ``postgresql+psycopg://…``; not an in-memory
            SQLite database: :func:`check_store_url`).
        busy_timeout_s: SQLite only: how long a statement waits for a lock another connection holds
            before :class:`StoreBusy` (seconds, finite, >= 0).
        create: create the tables where they are missing (a server recording); False (a reader such as
            ``kevlike recalibrate``) changes nothing and refuses a database without them.

    Raises:
        ValueError: a busy timeout that is not a finite number >= 0, a URL :func:`check_store_url` refuses, a
            file that is not a database of this kind, with ``create=False`` a database without the store's tables,
            tables with a NOT NULL column (no default) the store does not write, with ``create=True`` a SQLite file
            or directory that cannot be written, or the URL's database driver is not installed (one line naming
            it).
        StoreBusy: the tables could not be created because the store is locked or unreachable.
    """

    def __init__(self, url: str, busy_timeout_s: float = 5.0, *, create: bool = True):
        if not (isinstance(busy_timeout_s, (int, float)) and 0 <= busy_timeout_s < math.inf):
            raise ValueError(f"busy_timeout_s must be a finite number of seconds >= 0, got {busy_timeout_s!r}")
        check_store_url(url, must_write=create)
        self.url = url
        self.busy_timeout_s = float(busy_timeout_s)
        self.sqlite = url.startswith("sqlite")
        try:
            if self.sqlite:
                creator = None if create else _read_only_connect(url, busy_timeout_s)
                if creator is not None:
                    self.engine = create_engine(url, creator=creator)
                else:
                    self.engine = create_engine(url, connect_args={"check_same_thread": False,
                                                                   "timeout": busy_timeout_s})
                self._sqlite_pragmas(wal=create)
            else:
                self.engine = create_engine(url, pool_pre_ping=True)
        except ModuleNotFoundError as e:   # e.g. postgresql:// on SQLAlchemy 2.0 without psycopg2
            raise ValueError(f"{url.split('://')[0]}://: its database driver {e.name!r} is not installed (PostgreSQL: "
                             f"pip install \"psycopg[binary]\" and postgresql+psycopg://USER:PASSWORD@HOST/DB)") from None
        self._lock = threading.Lock()
        self._identities: dict[str, tuple[int, int] | None] = {}   # SQLite: the files opened (set once they exist)
        self._keeper = None
        try:
            if not create:                # a reader: nothing is written, not even the tables
                with self._busy(), self.engine.connect() as conn:
                    have = set(inspect(conn).get_table_names())
                missing = [t.name for t in metadata.sorted_tables if t.name not in have]
                if missing:
                    raise ValueError(f"{shown_url(url)}: not an outcome store (no table {', '.join(missing)}); "
                                     f"`kevlike serve --record URL` creates one{_lost_wal_hint(url)}")
            else:
                with self._write() as conn:   # one process at a time checks for and creates the tables
                    if self.engine.dialect.name == "postgresql":
                        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_CREATE_LOCK})")
                    metadata.create_all(conn)
            with self._busy(), self.engine.connect() as conn:
                self._check_tables(conn)
        except (DatabaseError, StoreBroken) as e:   # not a lock or a lost connection (StoreBusy): a wrong file
            cause = e.__cause__ if isinstance(e, StoreBroken) else e
            raise ValueError(f"{shown_url(url)}: {getattr(cause, 'orig', None) or cause}") from None
        if self.sqlite and self.engine.url.database:
            self._hold_files(self.engine.url.database, wal=create)   # (a read-only file: check_store_url)

    def _check_tables(self, conn) -> None:
        """Refuse tables that lack the store's columns, and (SQLite) a file that fails ``PRAGMA quick_check``.

        Raises:
            ValueError: names the table and its missing columns, or the first problems the check found.
        """
        have = inspect(conn)
        for t in metadata.sorted_tables:
            cols = have.get_columns(t.name)
            missing = [c.name for c in t.columns if c.name not in {x["name"] for x in cols}]
            if missing:
                raise ValueError(f"{shown_url(self.url)}: table {t.name} has no column {', '.join(missing)}: not an "
                                 f"outcome store of this version (start the server on {NEW_STORE})")
            unwritable = [x["name"] for x in cols if x["name"] not in t.columns and not x.get("nullable", True)
                          and x.get("default") is None]
            if unwritable:      # every insert would fail on it: records lost, feedback refused
                raise ValueError(f"{shown_url(self.url)}: table {t.name} has a column the store does not write and "
                                 f"cannot be left empty ({', '.join(unwritable)}: NOT NULL, no default): drop it or "
                                 f"give it a default, or start the server on {NEW_STORE}")
        if self.sqlite:
            # a problem's text may span lines ("*** in database main ***\nPage 3: …"): one line each
            found = [" ".join(str(row[0]).split()) for row in conn.exec_driver_sql("PRAGMA quick_check").fetchall()]
            if found != ["ok"]:
                raise ValueError(f"{shown_url(self.url)}: the file is damaged (PRAGMA quick_check: "
                                 f"{'; '.join(found[:3])[:300]}): restore it from a backup, or use a new file")

    def _hold_files(self, path: str, wal: bool) -> None:
        """SQLite: remember the identity of the database file (and in WAL mode of its ``-wal`` and ``-shm``
        files, kept in place by one connection held open: SQLite removes them only when the last connection
        closes), so :meth:`check_file` notices one removed or replaced."""
        if wal:
            self._keeper = sqlite3.connect(path, check_same_thread=False)
            self._keeper.execute("SELECT count(*) FROM sqlite_master").fetchall()
        for f in ([path, f"{path}-wal", f"{path}-shm"] if wal else [path]):
            self._identities[f] = _file_identity(f)

    def close(self) -> None:
        """Close every connection (the pool's and the one that holds a SQLite store's files); the store is not
        used after this."""
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
        self.engine.dispose()

    def check_file(self) -> None:
        """SQLite: raise :class:`StoreLost` if the database file, or its ``-wal`` or ``-shm`` file, is no longer
        the one opened (deleted, or replaced by another file), :class:`StoreBroken` if the database file was emptied
        in place (``truncate -s 0``, ``> file``: under one page). ``stat`` calls only: the file is never opened here,
        since closing any descriptor of it would drop SQLite's POSIX locks (and a connection closing elsewhere would
        then remove a live store's ``-wal``); a no-op for other backends."""
        for f, identity in self._identities.items():
            if identity is None:
                continue
            st = _file_stat(f)                   # one stat per file: this runs before every write and feedback
            if st is not None and (st.st_dev, st.st_ino) == identity:
                if not f.endswith(("-wal", "-shm")) and st.st_size < SQLITE_MIN_BYTES:
                    raise StoreBroken(f"the outcome store's file {f!r} was emptied in place while the server ran (it "
                                      f"is {st.st_size} bytes, less than one SQLite page): nothing more is written to "
                                      f"it; restore it from a backup and restart the server")
            else:
                if f.endswith(("-wal", "-shm")):
                    raise StoreLost(f"the outcome store's {f[-3:]} file {f!r} was removed or replaced while the server "
                                    f"ran: what was recorded since the last checkpoint went with it and nothing more "
                                    f"can be recorded; restart the server (never delete a live store's -wal and -shm "
                                    f"files)")
                raise StoreLost(f"the outcome store's file {f!r} was removed or replaced while the server ran: "
                                f"nothing more can be recorded in it; restart the server (it creates a new file), or "
                                f"move the original file back (a copy is another file)")

    def _sqlite_pragmas(self, wal: bool = True) -> None:
        """WAL (``wal``; a reader leaves the file's journal mode as it is: switching it writes the file), the busy
        timeout, and SQLAlchemy's recipe for explicit transactions in pysqlite (the driver's own
        implicit BEGIN is turned off; each transaction begins with ``BEGIN``, or ``BEGIN IMMEDIATE`` for a
        connection marked ``sqlite_write``)."""
        ms = int(self.busy_timeout_s * 1000)

        @event.listens_for(self.engine, "connect")
        def _connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA busy_timeout={ms}")
            if wal:
                _journal_mode_wal(cur, self.busy_timeout_s)
            cur.close()

        @event.listens_for(self.engine, "begin")
        def _begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("sqlite_write") else "BEGIN")

    def _busy(self):
        """A context that turns the database's operational errors (a lock held past the busy timeout, a lost
        connection) into :class:`StoreBusy`."""
        return _BusyContext()

    def _write(self):
        """A write transaction (in-process serialised; SQLite: ``BEGIN IMMEDIATE``)."""
        return _WriteTransaction(self)

    def _lock_request(self, conn, request_id: str) -> None:
        """PostgreSQL: hold a transaction-level advisory lock on ``request_id`` (writes of one request take turns
        across processes). SQLite needs none: a write transaction holds the database's write lock."""
        if self.engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": request_id})

    def _retrying(self, write, *args):
        """``write(*args)``, tried again (at most :data:`CONFLICT_RETRIES` more times) when another process
        inserted the same key meanwhile (a backend without :meth:`_lock_request`); an integrity error that outlasts
        the retries is no race but a constraint or trigger the store does not define: :class:`StoreBroken`."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                return write(*args)
            except IntegrityError as e:
                if attempt == CONFLICT_RETRIES:   # not a race: a constraint or trigger the store does not define
                    raise StoreBroken(f"the outcome store refused the write ({_first_line(e)}): its tables hold a "
                                      f"constraint or trigger the store does not define; remove it, or start the "
                                      f"server on {NEW_STORE}") from e
                time.sleep(0.01 * (attempt + 1))

    def refusal(self, question_ids, state: str | None) -> list[dict]:
        """Why this store could not record a request with these question ids and (recorded) ``state``, as 422 error
        entries ``{"loc", "type", "msg"}`` naming the field; [] when it can. SQLite holds any text; PostgreSQL's
        text holds no NUL character and its answers' key no question id over :data:`PG_KEY_BYTES` bytes."""
        if self.sqlite:
            return []
        errors = []
        if state is not None and "\x00" in state:
            errors.append({"loc": ["body", "state"], "type": "value_error",
                           "msg": "the state holds a NUL character (\\u0000), which this server's outcome store "
                                  "(PostgreSQL text) cannot record: remove it, or send it to a server without "
                                  "--record"})
        for qid in question_ids:
            if "\x00" in qid:
                why = "holds a NUL character (\\u0000), which PostgreSQL text cannot hold"
            elif (n := len(qid.encode("utf-8"))) > PG_KEY_BYTES:
                why = (f"is {n} UTF-8 bytes long; this server's outcome store (PostgreSQL) keys answers by question "
                       f"id, at most {PG_KEY_BYTES} bytes")
            else:
                continue
            errors.append({"loc": ["body", "questions", qid[:80]], "type": "value_error",
                           "msg": f"question id {why}: the server records every answer (--record), so it refuses "
                                  f"what it could not record; use a shorter id without NUL"})
        return errors

    def record(self, request_id: str, model: str, answers: list[dict], state: str | None = None) -> bool:
        """Store one answered request; ``answers``: ``{"question_id", "type", "probabilities", "temperature",
        "option_keys"}`` each, and for a model with the capability ``x_abstain`` and ``abstain_scaling`` (``[T, bias]``
        it was served with, so that :meth:`records` recovers its logit); a score answer served through the normal
        readout has ``score_readout: "normal"`` and, where the engine gave it (:class:`kevlike.model.engine.Decision`),
        ``softmax``: its tempered softmax before the readout, from which :meth:`records` recovers its logits. A
        request id seen before is replaced while it has no outcome (a client's retry: the latest answers win); once an
        outcome is stored for it, the record is kept and this request is not recorded (observed outcomes are never
        dropped; a warning names the id).

        Returns:
            True when stored, False when the id already has outcomes (nothing written).

        Raises:
            StoreBusy: the store stayed locked past the busy timeout, or is unreachable (nothing written).
            ValueError: a probability or temperature that is not a finite number, an ``x_abstain`` outside [0, 1] or
                an ``abstain_scaling`` that is not ``[T > 0, bias]`` of finite numbers (nothing written).
        """
        for a in answers:
            if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in [*a["probabilities"], a["temperature"]]):
                raise ValueError(f"request {request_id!r}, question {a['question_id']!r}: probabilities and temperature "
                                 f"must be finite numbers, got {a['probabilities']!r} at T = {a['temperature']!r}")
            soft = a.get("softmax")
            if soft is not None and not (isinstance(soft, (list, tuple)) and len(soft) == len(a["probabilities"])
                                         and all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                                 for v in soft)):
                raise ValueError(f"request {request_id!r}, question {a['question_id']!r}: softmax must be "
                                 f"{len(a['probabilities'])} finite probabilities, got {soft!r}")
            x, scaling = a.get("x_abstain"), a.get("abstain_scaling")
            if x is not None and not (isinstance(x, (int, float)) and 0 <= x <= 1):
                raise ValueError(f"request {request_id!r}, question {a['question_id']!r}: x_abstain must be a "
                                 f"probability, got {x!r}")
            if scaling is not None and not (isinstance(scaling, (list, tuple)) and len(scaling) == 2 and all(
                    isinstance(v, (int, float)) and math.isfinite(v) for v in scaling) and scaling[0] > 0):
                raise ValueError(f"request {request_id!r}, question {a['question_id']!r}: abstain_scaling must be "
                                 f"[T > 0, bias], finite numbers, got {scaling!r}")
        stored = self._retrying(self._record, request_id, model, answers, state)
        if not stored:
            log.warning("request id=%s already has observed outcomes: this request with the same id was answered but "
                        "not recorded (send a new x-request-id per request)", request_id)
        return stored

    def _record(self, request_id: str, model: str, answers: list[dict], state: str | None) -> bool:
        with self._write() as conn:
            self._lock_request(conn, request_id)
            if conn.execute(select(outcomes_table.c.request_id).where(outcomes_table.c.request_id == request_id)
                            .limit(1)).first() is not None:
                return False
            conn.execute(answers_table.delete().where(answers_table.c.request_id == request_id))
            conn.execute(requests_table.delete().where(requests_table.c.request_id == request_id))
            conn.execute(requests_table.insert().values(request_id=request_id, model=model, created_at=time.time(),
                                                        state=state))
            if answers:
                conn.execute(answers_table.insert(), [{
                    "request_id": request_id, "question_id": a["question_id"], "type": a["type"],
                    "probabilities": json.dumps(_stored_probabilities(a), allow_nan=False),
                    "temperature": float(a["temperature"]),
                    "option_keys": json.dumps(a["option_keys"])} for a in answers])
            return True

    def questions(self, request_id: str) -> dict[str, Question]:
        """The recorded questions of a request (id → :class:`~kevlike.request.schema.Question` with its option
        keys and type; descriptions are not kept).

        Raises:
            UnknownRequest: no such request id.
            StoreBusy: the store is locked past the busy timeout, or unreachable.
            StoreBroken: a stored answer of the request is damaged (names the question).
        """
        with self._busy(), self.engine.connect() as conn:
            if conn.execute(select(requests_table.c.request_id).where(requests_table.c.request_id == request_id)).first() is None:
                raise UnknownRequest(request_id)
            rows = conn.execute(select(answers_table.c.question_id, answers_table.c.type, answers_table.c.option_keys)
                                .where(answers_table.c.request_id == request_id)).all()
        out = {}
        for r in rows:
            try:
                keys = json.loads(r.option_keys)
                if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
                    raise ValueError("not a list of keys")
            except (TypeError, ValueError):
                raise StoreBroken(f"request {request_id!r}, question {r.question_id!r}: its stored option keys are "
                                  f"damaged ({str(r.option_keys)[:60]!r} is not a JSON list of keys): repair or "
                                  f"delete that row of kevlike_answers") from None
            out[r.question_id] = Question(r.question_id, str(r.type).split(":")[0], "",
                                          tuple(Option(k, None) for k in keys))
        return out

    def add_outcomes(self, request_id: str, targets: dict[str, list[float]]) -> int:
        """Store (or replace) observed outcomes as target distributions; returns how many.

        Raises:
            UnknownRequest: no such request id.
            StoreBusy: the store stayed locked past the busy timeout, or is unreachable (nothing written).
        """
        return self._retrying(self._add_outcomes, request_id, targets)

    def _add_outcomes(self, request_id: str, targets: dict[str, list[float]]) -> int:
        now = time.time()
        with self._write() as conn:
            self._lock_request(conn, request_id)
            if conn.execute(select(requests_table.c.request_id).where(requests_table.c.request_id == request_id)).first() is None:
                raise UnknownRequest(request_id)
            conn.execute(outcomes_table.delete().where((outcomes_table.c.request_id == request_id)
                                                       & outcomes_table.c.question_id.in_(list(targets))))
            conn.execute(outcomes_table.insert(), [{"request_id": request_id, "question_id": q,
                                                   "target": json.dumps(t, allow_nan=False),
                                                   "created_at": now} for q, t in targets.items()])
        return len(targets)

    def records(self, model: str | None = None) -> list[dict]:
        """:meth:`counted_records`' records alone."""
        return self.counted_records(model)[0]

    def counted_records(self, model: str | None = None) -> tuple[list[dict], int]:
        """Every answered question with an outcome, as metric records (:mod:`kevlike.metrics`:
        ``type``, ``probs``, ``gold``, ``target``; plus ``logits = T · log p``, ``question``, ``model``; for a score
        answer served through the normal readout, ``logits = T · log s`` with ``s`` the softmax it was read out from
        (recorded since stage 28), or, recorded without it, ``score_readout: "normal"`` (its ``logits`` are then not
        the model's: :func:`kevlike.eval.owndata.fit_profile` leaves it out of the fit); for an answer
        with ``x_abstain``, that and, where its scaling was recorded, ``abstain_logit = T · (logit(x) − bias)``,
        the logit :func:`~kevlike.model.temperatures.fit_table` refits it from).
        ``model``: only requests answered by exactly this model name or one of its profiles (``model@NAME``;
        case-exact, no wildcards: :func:`model_filter`). Rows whose temperature or probabilities are not
        finite (none are written now; older stores may hold them) are left out; so are rows that cannot be read
        (malformed probabilities or target: damage, or a row this version never wrote), counted and logged.

        Returns:
            ``(records, unreadable)``: the records, and how many rows with an outcome could not be read.

        Raises:
            StoreBusy: the store is locked past the busy timeout, or unreachable."""
        q = (select(requests_table.c.model, answers_table.c.question_id, answers_table.c.type,
                    answers_table.c.probabilities, answers_table.c.temperature, outcomes_table.c.target)
             .join(answers_table, answers_table.c.request_id == requests_table.c.request_id)
             .join(outcomes_table, (outcomes_table.c.request_id == answers_table.c.request_id)
                   & (outcomes_table.c.question_id == answers_table.c.question_id)))
        if model is not None:
            if "\x00" in model and not self.sqlite:    # PostgreSQL text holds no NUL: no model is named so
                return [], 0
            q = q.where(model_filter(requests_table.c.model, model))
        with self._busy(), self.engine.connect() as conn:
            rows = conn.execute(q).all()
        out, unreadable = [], 0
        for r in rows:
            try:
                rec = _record_of(r)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):   # a row this version never wrote
                unreadable += 1
                continue
            if rec is not None:
                out.append(rec)
        if unreadable:
            log.warning("%s: %d recorded answer(s) with an outcome could not be read (malformed probabilities or "
                        "target) and were left out", shown_url(self.url), unreadable)
        return out, unreadable


def _stored_probabilities(a: dict) -> list | dict:
    """The probabilities column: the plain list, or with x_abstain (and its ``[T, bias]``) and/or a
    score readout ``{"probabilities": [...], "x_abstain": x, "abstain_scaling": [T, bias],
    "score_readout": "normal", "softmax": [...]}`` (no schema change: a store written before, or by a model without
    them, keeps the plain list; a score answer served through the normal readout says so: its
    probabilities are no softmax of logits, so its logits are recovered from ``softmax``, the tempered softmax
    before the readout; one recorded without it is left out of `recalibrate`'s fit)."""
    extra = {}
    if a.get("x_abstain") is not None:
        extra["x_abstain"] = a["x_abstain"]
        if a.get("abstain_scaling"):
            extra["abstain_scaling"] = list(a["abstain_scaling"])
    if a.get("score_readout"):
        extra["score_readout"] = a["score_readout"]
        if a.get("softmax") is not None:
            extra["softmax"] = [float(v) for v in a["softmax"]]
    return {"probabilities": a["probabilities"], **extra} if extra else a["probabilities"]


def _distribution(v: list[float], tol: float = DISTRIBUTION_TOLERANCE) -> bool:
    """Whether ``v`` is a probability distribution as recorded: finite values in [0, 1] (``tol`` of rounding either
    side) summing to 1 within ``tol``, the tolerance the outcome endpoint accepts (answers are served in float32 and
    rounded through JSON)."""
    return all(math.isfinite(x) and -tol <= x <= 1 + tol for x in v) and abs(sum(v) - 1.0) <= tol


def _record_of(r) -> dict | None:
    """The metric record of one joined answer/outcome row (:meth:`FeedbackStore.records`); None for a row whose
    temperature or probabilities are not finite (an older version could record those).

    Raises:
        ValueError, TypeError, KeyError, IndexError, AttributeError: a malformed row (not JSON, wrong shape; a target
        or finite probabilities that are no distribution; an ``x_abstain`` outside [0, 1] or not finite; a
        non-finite abstain scaling): damage, counted as unreadable by the caller."""
    p = json.loads(r.probabilities)
    x_abstain = scaling = readout = soft = None
    if isinstance(p, dict):                 # recorded with x_abstain or a score readout (FeedbackStore.record)
        p, x_abstain, scaling, readout, soft = p["probabilities"], p.get("x_abstain"), p.get("abstain_scaling"), \
            p.get("score_readout"), p.get("softmax")
    t = json.loads(r.target)
    cannot_tell = t == CANNOT_TELL_OUTCOME  # the outcome: the state did not determine the answer
    if not (isinstance(p, list) and len(p) >= 2 and (cannot_tell or (isinstance(t, list) and len(t) == len(p)))):
        raise ValueError("probabilities must be a list of >= 2 and the target one of the same length")
    p = [float(x) for x in p]
    t = [1.0 / len(p)] * len(p) if cannot_tell else [float(x) for x in t]
    if not _distribution(t):                # the outcome endpoint accepts nothing else (labelled.answer_target)
        raise ValueError("the target must be finite, non-negative numbers summing to 1")
    # SQLite stores a NaN as NULL: a temperature of None is a NaN an older version recorded
    if r.temperature is None or not math.isfinite(r.temperature) or not all(math.isfinite(x) for x in p):
        return None
    if not _distribution(p):                # finite but no distribution (1e308): damage, not a served answer
        raise ValueError("probabilities must be numbers in [0, 1] summing to 1")
    if x_abstain is not None and not (isinstance(x_abstain, (int, float)) and 0.0 <= x_abstain <= 1.0):
        raise ValueError("x_abstain must be a number in [0, 1]")   # NaN fails the comparison too
    if scaling is not None and not (len(scaling) == 2 and all(math.isfinite(float(v)) for v in scaling)):
        raise ValueError("abstain_scaling must be two finite numbers")
    rec = {"source": r.question_id, "question": r.question_id, "model": r.model, "type": r.type}
    if cannot_tell:
        rec["cannot_tell"] = True
    if soft is not None:                    # the softmax the readout was computed from: the logits are its
        soft = [float(x) for x in soft]     # (up to a constant), and the record fits like any other
        if len(soft) != len(p) or not all(math.isfinite(x) for x in soft):
            raise ValueError("softmax must be as many finite numbers as probabilities")
    elif readout is not None:               # served probabilities only: no logits to refit from
        rec["score_readout"] = readout
    rec.update(probs=p, target=t, gold=max(range(len(t)), key=t.__getitem__),
               logits=[r.temperature * math.log(max(x, 1e-30)) for x in (soft or p)])
    if x_abstain is not None:
        rec["x_abstain"] = float(x_abstain)
        if scaling is not None:             # the logit it was served from: x = sigmoid(a / T + bias)
            # (served in float64: exact for a / T + bias from about -700 to +36; 0 and 1 are clamped there)
            x = min(max(x_abstain, 1e-300), 1 - 2 ** -52)
            rec["abstain_logit"] = scaling[0] * (math.log(x) - math.log1p(-x) - scaling[1])
    return rec


def _journal_mode_wal(cur: sqlite3.Cursor, timeout_s: float) -> None:
    """Put the SQLite database of cursor ``cur`` in WAL mode, waiting up to ``timeout_s`` seconds for another
    connection that holds it (a no-op where it already is: WAL is a property of the file; an in-memory database
    stays in its ``memory`` mode). The switch needs the file to itself, and where two connections both wait for it
    SQLite refuses one at once instead of running its busy handler (deadlock avoidance), so ``PRAGMA
    busy_timeout`` does not cover it: two servers starting together on a new file made one fail at once with
    "database is locked" (stop 53's CI). The switch is tried again with a growing pause (5 ms doubling to 100 ms)
    until the deadline; where another connection finished it meanwhile, the next try changes nothing. One try can
    still wait out the busy timeout (a reader holding the file), so the whole wait can approach twice
    ``timeout_s``.

    Raises:
        sqlite3.OperationalError: still locked after ``timeout_s``, or another error of the switch.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() not in ("wal", "memory"):
                cur.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


class _BusyContext:
    """``with``: a database error leaves as :class:`StoreBusy` or :class:`StoreBroken` (:func:`_store_error`)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and (err := _store_error(exc)) is not None:
            raise err from exc
        return False


class _WriteTransaction:
    """``with store._write() as conn``: the store's in-process write lock, then one transaction (SQLite:
    ``BEGIN IMMEDIATE``); a database error leaves as :class:`StoreBusy` or :class:`StoreBroken` (:func:`_store_error`),
    with the transaction rolled back."""

    def __init__(self, store: FeedbackStore):
        self.store = store

    def __enter__(self):
        self.store._lock.acquire()
        try:
            self.store.check_file()
            with _BusyContext():
                self.conn = self.store.engine.connect()
                try:
                    if self.store.sqlite:
                        self.conn.execution_options(sqlite_write=True)
                    self.tx = self.conn.begin()
                except BaseException:
                    self.conn.close()
                    raise
        except BaseException:
            self.store._lock.release()
            raise
        return self.conn

    def __exit__(self, kind, exc, tb):
        try:
            with _BusyContext():
                try:
                    if exc is None:
                        self.tx.commit()
                    else:
                        self.tx.rollback()
                finally:
                    self.conn.close()
        finally:
            self.store._lock.release()
        if exc is not None and (err := _store_error(exc)) is not None:
            raise err from exc
        return False


class RecorderFull(RuntimeError):
    """The :class:`Recorder`'s queue is full (the store has been busy for a while): a decision is not
    computed (HTTP 503 with ``Retry-After``), so that no answered request goes unrecorded."""


class Recorder:
    """Writes answered requests to a :class:`FeedbackStore` off the response path.

    A request first takes a place (:meth:`reserve`, before its forward pass); once answered it is
    queued (:meth:`submit`) and one writer thread stores it, retrying while the store is busy
    (:class:`StoreBusy`; waits of ``retry_s`` doubling to 2 s) until the write lands. So a lock held by
    another process delays records but loses none, and the queue never exceeds ``capacity``: when all places are
    taken, :meth:`reserve` raises :class:`RecorderFull` and the request is refused before it is computed.
    A write that fails for another reason (a bug, a constraint) is logged and counted in :attr:`failed`.

    Args:
        store: the store to write to.
        capacity: answered requests that may wait to be written (>= 1).
        retry_s: the first wait after a busy store (seconds, > 0).

    Raises:
        ValueError: a capacity < 1 or a retry wait that is not a finite number > 0.
    """

    def __init__(self, store: FeedbackStore, capacity: int = 1024, retry_s: float = 0.05):
        if not (isinstance(capacity, int) and capacity >= 1):
            raise ValueError(f"recorder capacity must be an integer >= 1, got {capacity!r}")
        if not (isinstance(retry_s, (int, float)) and 0 < retry_s < math.inf):
            raise ValueError(f"retry_s must be a finite number of seconds > 0, got {retry_s!r}")
        self.store = store
        self.capacity = capacity
        self.retry_s = float(retry_s)
        self._places = threading.BoundedSemaphore(capacity)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: collections.Counter = collections.Counter()     # request id -> writes not yet stored
        self._cond = threading.Condition()
        self.written = self.retries = self.failed = 0
        self.last_error: str | None = None   # the store's error since the last write that succeeded (for /health)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kevlike-recorder", daemon=True)
        self._thread.start()

    def reserve(self) -> None:
        """Take a place in the queue for a request about to be computed (give it back with :meth:`release`
        if it is not answered, or hand it to :meth:`submit`).

        Raises:
            RecorderFull: all ``capacity`` places are taken.
        """
        if self._closed or not self._places.acquire(blocking=False):
            raise RecorderFull(f"{self.capacity} answered requests are waiting to be recorded (the outcome store "
                               f"fails: {self.last_error or 'busy'})"[:600])

    def release(self) -> None:
        """Give back a place taken by :meth:`reserve` for a request that will not be recorded."""
        self._places.release()

    def submit(self, request_id: str, model: str, answers: list[dict], state: str | None = None) -> None:
        """Queue one answered request (arguments of :meth:`FeedbackStore.record`) on a place taken by
        :meth:`reserve`; returns at once."""
        with self._cond:
            self._pending[request_id] += 1
        self._queue.put((request_id, model, answers, state))

    def pending(self, request_id: str | None = None) -> int:
        """Writes queued and not yet stored (for ``request_id``, or all)."""
        with self._cond:
            return sum(self._pending.values()) if request_id is None else self._pending.get(request_id, 0)

    def wait(self, request_id: str | None = None, timeout: float | None = None) -> bool:
        """Block until the queued writes (of ``request_id``, or all) are stored or dropped; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._pending.get(request_id, 0) if request_id is not None
                                                    else sum(self._pending.values())), timeout)

    def close(self, timeout: float = 5.0) -> int:
        """Stop taking requests, write what is queued (for at most ``timeout`` seconds) and stop the writer;
        returns the records left unwritten (logged as an error when > 0)."""
        self._closed = True
        self.wait(None, timeout)
        self._queue.put(None)
        self._thread.join(max(0.0, timeout) + 1)
        left = self.pending()
        if left:
            log.error("%d answered requests were not recorded: the outcome store still failed at shutdown (%s)", left,
                      self.last_error or "busy")
        return left

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            wait = self.retry_s
            while True:
                try:
                    self.store.record(*item)
                    self.written += 1
                    self.last_error = None
                    break
                except StoreBusy as e:      # a lock, or a removed or damaged store: the record waits
                    self.retries += 1
                    self.last_error = str(e)
                    if self.retries == 1 or self.retries % 100 == 0:
                        (log.warning if e.transient else log.error)(
                            "recording request id=%s: %s; retrying (%d retries so far)", item[0], e, self.retries)
                    time.sleep(wait)
                    wait = min(2 * wait, 2.0)
                except Unstorable as e:    # this record only: the queue goes on (FeedbackStore.refusal refuses
                    self.failed += 1        # what it knows of before the forward pass)
                    log.error("recording request id=%s: %s; the record is lost", item[0], e)
                    break
                except Exception:
                    self.failed += 1
                    log.exception("recording request id=%s failed; the record is lost", item[0])
                    break
            with self._cond:
                self._pending[item[0]] -= 1
                if not self._pending[item[0]]:
                    del self._pending[item[0]]
                self._cond.notify_all()
            self._places.release()


def report(store: FeedbackStore, model: str | None = None) -> dict:
    """``GET /v1/feedback/report``: per type (and overall), the outcomes counted, accuracy, ECE and the
    confident-error rate of the recorded answers (definitions of :mod:`kevlike.metrics`; outcomes
    ``{"cannot_tell": true}`` are left out of them), and, where answers carry ``x_abstain``, ``abstention``:
    :func:`kevlike.metrics.abstention` without its curve (coverage at ≤ 5 % error, AURC, AUROC and ECE of
    ``x_abstain`` against the "cannot tell" outcomes). Rows with an outcome that cannot be read (a damaged store)
    are left out of every figure and counted in ``unreadable``, present only when there are any.

    Linear in the outcomes: one query, then one pass per group (:func:`_report_metrics`; without the
    bootstrap interval of :func:`kevlike.metrics.summary`, 200 more passes, which the report never showed).
    Measured on the 2-core EPYC (SQLite file): 100,000 outcomes in 3.3–5.7 s, 2.6–2.7 s of it the query and
    JSON decoding of :meth:`FeedbackStore.records` (docs/guide/own-data.md, "Outcome feedback"); the server runs it on a thread
    of its own.

    Raises:
        StoreBusy: the store is locked past the busy timeout, or unreachable.
        StoreLost: its SQLite file was removed or replaced while it was open.
    """
    store.check_file()                   # a removed file's figures are stale, not the store's
    recs, unreadable = store.counted_records(model)
    by_type: dict[str, list] = {}
    for r in recs:
        by_type.setdefault(r["type"].split(":")[0], []).append(r)
    out = {"model": model, "overall": _report_metrics(recs),
           "per_type": {t: _report_metrics(rs) for t, rs in sorted(by_type.items())}}
    if any(r.get("x_abstain") is not None for r in recs):
        for key, rs in [("overall", recs), *((f"per_type.{t}", rs) for t, rs in sorted(by_type.items()))]:
            target = out["overall"] if key == "overall" else out["per_type"][key.split(".", 1)[1]]
            target["abstention"] = {k: v for k, v in abstention(rs).items() if k != "curve"}
    if unreadable:
        out["unreadable"] = unreadable
    return out


def _report_metrics(records: list[dict]) -> dict:
    """``{"outcomes"}``, and with any: ``accuracy``, ``ece``, ``ece_bins`` (counts) and ``confident_error`` (top
    probability >= 0.9 and wrong, share of all), each as :func:`kevlike.metrics.summary` defines it."""
    records = [r for r in records if not r.get("cannot_tell")]
    n = len(records)
    if not n:
        return {"outcomes": 0}
    correct = wrong_confident = 0
    for r in records:
        p = r["probs"]
        k = max(range(len(p)), key=lambda i: (p[i], -i))   # the top label; ties: the lowest index
        if k == r["gold"]:
            correct += 1
        elif p[k] >= 0.9:
            wrong_confident += 1
    e, bins = ece(records)
    return {"outcomes": n, "accuracy": correct / n, "ece": e, "ece_bins": [b["count"] for b in bins],
            "confident_error": wrong_confident / n}
