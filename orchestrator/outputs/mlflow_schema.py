"""A new SQLite tracking store made from MLflow's own schema instead of by replaying MLflow's migrations.

MLflow makes a new SQLite store by running every one of its alembic migrations since its first schema: about 2 s,
most of what tracking costs a small job (docs/results.md, "Overhead"). Where those migrations end is the same for every
new store of one MLflow version, so certsel keeps that end as SQL (what ``sqlite3`` dumps from a store MLflow's
migrations made, before any experiment exists) and executes it into the new file: milliseconds, the same tables,
indexes, rows and alembic revision. The schema shipped (``mlflow_schema.sql``) is the one of the MLflow version
certsel is tested with (``python -m certsel.orchestrator.outputs.mlflow_schema`` writes it); under any other version
the first new store is made by MLflow's own migrations and their schema kept in the user's cache for the next one.

Nothing is trusted blindly: the schema's first line names the MLflow version it came from and is used only under that
version, and MLflow checks every store it opens against its own head revision (a mismatch is MLflow's error, never a
store of another version). tests/test_mlflow_schema.py compares the shipped schema with what MLflow's migrations make
under the installed version.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import sqlite3
import tempfile

SHIPPED = pathlib.Path(__file__).with_name("mlflow_schema.sql")
HEADER = "-- MLflow {version}: the schema of a new SQLite tracking store, as its migrations leave it\n"
log = logging.getLogger(__name__)


def _cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "certsel"


def dump(db: pathlib.Path, version: str) -> str:
    """The SQL that makes ``db`` again (``sqlite3``'s dump), headed by the MLflow version that made it."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return HEADER.format(version=version) + "\n".join(conn.iterdump()) + "\n"


def migrated_schema(version: str) -> str | None:
    """The schema MLflow's own migrations make, dumped (None where this MLflow has no way to make only the tables)."""
    import sqlalchemy
    from mlflow.store.db import utils

    initialize = getattr(utils, "_initialize_tables", None)
    if initialize is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        db = pathlib.Path(tmp) / "schema.db"
        engine = sqlalchemy.create_engine(f"sqlite:///{db}")
        try:
            initialize(engine)
        finally:
            engine.dispose()
        return dump(db, version)


def _write_atomically(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def schema_for(version: str) -> str | None:
    """The schema of a new store under MLflow ``version``: the shipped one if it is this version's, else the cache's,
    else made now by MLflow's migrations and cached (best effort: a cache that cannot be written is skipped)."""
    header = HEADER.format(version=version)
    for path in (SHIPPED, _cache_dir() / f"mlflow-{version}.sql"):
        with contextlib.suppress(OSError):
            text = path.read_text()
            if text.startswith(header):
                return text
    text = migrated_schema(version)
    if text is not None:
        try:
            _write_atomically(_cache_dir() / f"mlflow-{version}.sql", text)
        except OSError as exc:
            log.debug("could not cache MLflow's schema: %s", exc)
    return text


def create_store(db: pathlib.Path) -> bool:
    """Make the new SQLite store ``db`` from the schema of the installed MLflow; False (nothing done) where ``db``
    exists or no schema is to be had. The file appears whole or not at all: it is built beside ``db`` and linked into
    place, so a store another process made meanwhile is kept."""
    from mlflow.version import VERSION

    if db.exists() or db.name == ":memory:":
        return False
    text = schema_for(VERSION)
    if text is None:
        return False
    fd, tmp = tempfile.mkstemp(dir=db.parent, prefix=db.name, suffix=".new")
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as conn:
            conn.executescript(text)
        try:
            os.link(tmp, db)
        except OSError:  # made meanwhile (kept), or a filesystem without links (MLflow makes the store)
            return False
        return True
    finally:
        os.unlink(tmp)


def main() -> None:
    """Write the shipped schema from the installed MLflow's migrations."""
    from mlflow.version import VERSION

    text = migrated_schema(VERSION)
    if text is None:
        raise SystemExit(f"MLflow {VERSION} has no _initialize_tables: no schema to ship")
    SHIPPED.write_text(text)
    print(f"{SHIPPED}: MLflow {VERSION}, {len(text.splitlines())} lines")


if __name__ == "__main__":
    main()
