"""A new SQLite store made from MLflow's schema is the store MLflow's own migrations make (orchestrator/outputs/
mlflow_schema.py), under the installed MLflow; a real MLflow opens, verifies and writes both."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
mlflow = pytest.importorskip("mlflow")

from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.version import VERSION  # noqa: E402

from certsel.orchestrator.outputs import mlflow_schema  # noqa: E402
from certsel.orchestrator.outputs.mlflow_store import client_for  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # SQLAlchemy's, in MLflow's old migrations


def _normal(sql: str | None):
    """A statement with its clauses as a set: MLflow's migrations rebuild a table with its constraints in an order that
    changes from run to run (a set's), the same table each time."""
    return None if sql is None else frozenset(part.strip() for part in re.split(r",\s*\n|\(\s*\n|\n\s*\)", sql))


def _statements(text: str):
    return sorted(map(str, (_normal(s) for s in text.split(";\n"))))


def _schema(db):
    with contextlib.closing(sqlite3.connect(db)) as conn:
        objects = sorted(((kind, name, table, _normal(sql)) for kind, name, table, sql
                          in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")), key=str)
        tables = [name for kind, name, _, _ in objects if kind == "table" and not name.startswith("sqlite_")]
        rows = {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=str)
                for t in tables if t not in ("experiments", "experiment_tags")}  # the default one's creation time
        return objects, rows


def test_the_shipped_schema_is_what_the_installed_mlflows_migrations_make():
    shipped = mlflow_schema.SHIPPED.read_text()
    assert shipped.startswith(mlflow_schema.HEADER.format(version=VERSION)), (
        f"mlflow_schema.sql is not MLflow {VERSION}'s: python -m certsel.orchestrator.outputs.mlflow_schema")
    assert _statements(shipped) == _statements(mlflow_schema.migrated_schema(VERSION)), (
        "mlflow_schema.sql differs from MLflow's migrations: python -m certsel.orchestrator.outputs.mlflow_schema")


def test_a_store_from_the_schema_is_the_store_mlflow_makes(tmp_path):
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    assert mlflow_schema.create_store(ours)
    for db in (ours, theirs):  # MLflow opens each (verifying its revision), makes its default experiment, writes
        client = MlflowClient(tracking_uri=f"sqlite:///{db}")
        run = client.create_run(client.create_experiment("x", artifact_location=(tmp_path / db.stem).as_uri()))
        client.log_metric(run.info.run_id, "m", 0.5, step=3)
        assert client.get_metric_history(run.info.run_id, "m")[0].value == 0.5
    assert _schema(ours)[0] == _schema(theirs)[0]
    ours_rows, theirs_rows = _schema(ours)[1], _schema(theirs)[1]
    assert ours_rows.keys() == theirs_rows.keys()
    assert {t: len(r) for t, r in ours_rows.items()} == {t: len(r) for t, r in theirs_rows.items()}
    assert ours_rows["alembic_version"] == theirs_rows["alembic_version"]


def test_an_existing_store_is_kept(tmp_path):
    db = tmp_path / "mlruns.db"
    client, _ = client_for(f"sqlite:///{db}")  # made from the schema, then used
    client.create_experiment("kept")
    before = db.read_bytes()
    assert not mlflow_schema.create_store(db)
    assert db.read_bytes() == before
    assert client_for(f"sqlite:///{db}")[0].get_experiment_by_name("kept") is not None
    assert [p.name for p in tmp_path.iterdir()] == ["mlruns.db"]  # nothing half-built left beside it


def test_another_mlflow_version_is_made_by_its_migrations_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    made = mlflow_schema.schema_for("0.0.0-other")
    assert made.startswith(mlflow_schema.HEADER.format(version="0.0.0-other"))
    cached = tmp_path / "cache" / "certsel" / "mlflow-0.0.0-other.sql"
    assert cached.read_text() == made
    cached.write_text(made + "-- read from the cache\n")
    assert mlflow_schema.schema_for("0.0.0-other").endswith("-- read from the cache\n")
    # the shipped one is used only under its own version: the body is the same SQL
    assert _statements(made.split("\n", 1)[1]) == _statements(mlflow_schema.SHIPPED.read_text().split("\n", 1)[1])
