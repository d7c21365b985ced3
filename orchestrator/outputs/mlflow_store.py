"""The MLflow store certsel tracks to: finding and checking it, its experiments and results view, links to its UI,
and reading a finished job's certificate back (``certsel show RUN``).

The default store is SQLite (``mlruns.db`` in certsel's home, :mod:`certsel.home`) with artifacts in
``mlartifacts/`` beside it; ``MLFLOW_TRACKING_URI`` or ``tracking.uri`` point at a server.
"""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile
import time
from urllib.parse import unquote, urlparse

from certsel.errors import InputError
from certsel.home import home, tracking_uri


PARENT_TAG = "mlflow.parentRunId"
log = logging.getLogger(__name__)
NOTE = "mlflow.note.content"  # the run's description in the MLflow UI


class TrackingProblem(InputError):
    """The tracking store cannot be used (one-line message)."""


def resolve_uri(uri: str | None) -> str:
    """The store: ``uri``, else ``MLFLOW_TRACKING_URI``, else certsel's home (``HOME/mlruns.db``)."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or tracking_uri()


def _sqlite_path(uri: str) -> pathlib.Path | None:
    if not uri.startswith("sqlite:"):
        return None
    path = unquote(urlparse(uri).path)
    if uri.startswith("sqlite:////"):
        return pathlib.Path("/" + path.lstrip("/"))
    return pathlib.Path(path.lstrip("/")) if uri.startswith("sqlite:///") else pathlib.Path(path)


def _quiet_mlflow() -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in ("alembic", "mlflow", "mlflow.store.db.utils", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else exc.__class__.__name__


def ui_link(base: str, experiment_id: str, run_id: str | None = None) -> str:
    """A link into the MLflow UI at ``base`` that opens certsel's runs table (or one run). It carries
    ``workflowType=machine_learning``: MLflow 3 opens experiments on the GenAI overview otherwise, whatever the
    experiment-kind tag."""
    path = f"#/experiments/{experiment_id}/runs" + (f"/{run_id}" if run_id else "")
    view = "" if run_id else f"&viewStateShareKey={RESULTS_VIEW}"  # the runs table: one row per job, results as columns
    return f"{base.rstrip('/')}/{path}?workflowType=machine_learning{view}"


HTTP_TIMEOUT = 5.0  # seconds a tracking server has to answer the check (MLflow's own client retries for minutes)


def _check_server(uri: str) -> None:
    """A tracking server must answer MLflow's REST API within :data:`HTTP_TIMEOUT`."""
    import httpx

    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    token, user = os.environ.get("MLFLOW_TRACKING_TOKEN"), os.environ.get("MLFLOW_TRACKING_USERNAME")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    auth = (user, os.environ.get("MLFLOW_TRACKING_PASSWORD", "")) if user else None
    try:
        reply = httpx.get(url, params={"max_results": 1}, headers=headers, auth=auth, timeout=HTTP_TIMEOUT)
    except httpx.HTTPError as exc:
        raise TrackingProblem(f"tracking URI {uri}: no MLflow server answers within {HTTP_TIMEOUT:g} s "
                              f"({exc.__class__.__name__})") from None
    if reply.status_code in (401, 403):
        raise TrackingProblem(f"tracking URI {uri}: the server refuses access (HTTP {reply.status_code}; "
                              "set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD)")
    if reply.status_code != 200:
        raise TrackingProblem(f"tracking URI {uri}: not an MLflow tracking server (HTTP {reply.status_code} "
                              "from its REST API)")


def precheck(uri: str | None) -> str:
    """Cheap checks before anything is created: a local SQLite file's folder, or an HTTP server answering in time."""
    uri = resolve_uri(uri)
    if uri.startswith(("http://", "https://")):
        _check_server(uri)
        return uri
    db = _sqlite_path(uri)
    if db is not None:
        parent = db.resolve().parent
        if not parent.is_dir() and parent == home():  # the default store: certsel's home is made on first use
            parent.mkdir(parents=True, exist_ok=True)
        if not parent.is_dir():
            raise TrackingProblem(f"tracking URI {uri}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
            raise TrackingProblem(f"tracking URI {uri}: {db} is not writable")
    return uri


def no_telemetry() -> None:
    """Turn off mlflow's telemetry before its import (unless ``MLFLOW_DISABLE_TELEMETRY=false`` is set)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def client_for(uri: str | None):
    """An MLflow client on a store that exists and is writable, or :class:`TrackingProblem`."""
    uri = precheck(uri)
    no_telemetry()
    from mlflow.tracking import MlflowClient

    _quiet_mlflow()  # after the import: mlflow sets its own levels when imported
    try:
        db = _sqlite_path(uri)
        if db is not None:  # a new SQLite store from MLflow's schema, not by its migrations (seconds)
            from .mlflow_schema import create_store

            create_store(db)
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
    except Exception as exc:
        raise TrackingProblem(f"tracking URI {uri} is not usable ({_one_line(exc)})") from None
    return client, uri


# The runs table: one row per job (nested runs filtered out), results as columns. MLflow's UI keeps named views as
# experiment tags ("mlflow.sharedViewState.<id>", ``state``: the table's state as JSON), opened by the link's
# ``viewStateShareKey``; certsel writes its view once per experiment.
RESULTS_VIEW = "certsel-results"
RESULT_COLUMNS = [("params", "selected"), ("metrics", "n_certified"), ("metrics", "n_candidates"),
                  ("metrics", "human_labels_saved_percent"), ("metrics", "labels_human"), ("params", "alpha"),
                  ("params", "delta"), ("params", "procedure"), ("params", "policy"), ("metrics", "cost_total"),
                  ("metrics", "gpu_seconds")]


def _results_view() -> str:
    import json

    columns = [f"{kind}.`{key}`" for kind, key in RESULT_COLUMNS]
    state = {"selectedColumns": columns, "columnOrder": columns, "columnWidths": {columns[0]: 260},
             "searchFilter": "tags.`certsel.kind` = 'job'", "orderByKey": "attributes.start_time", "orderByAsc": False}
    now = int(time.time() * 1000)
    return json.dumps({"name": "certsel results", "createdAt": now, "updatedAt": now, "state": json.dumps(state)})


def _ensure_results_view(client, exp) -> None:
    key = f"mlflow.sharedViewState.{RESULTS_VIEW}"
    if key not in (exp.tags or {}):  # once: a user who changed the view keeps their version
        try:
            client.set_experiment_tag(exp.experiment_id, key, _results_view())
        except Exception:  # a store that refuses the tag still tracks the job; the view is a convenience
            log.debug("could not save the results view on experiment %s", exp.experiment_id)


def experiment_id(client, uri: str, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        _ensure_results_view(client, exp)
        return exp.experiment_id
    artifact_location = None
    db = _sqlite_path(uri)
    if db is not None:  # keep artifacts beside the database, whatever the working directory
        root = db.resolve().parent / "mlartifacts"
        artifact_location = root.as_uri()
    try:
        # the UI then opens certsel's experiments in its runs view (not the GenAI traces view)
        return client.create_experiment(name, artifact_location=artifact_location,
                                        tags={"mlflow.experimentKind": "custom_model_development",
                                              f"mlflow.sharedViewState.{RESULTS_VIEW}": _results_view()})
    except Exception as exc:
        raise TrackingProblem(f"tracking URI {uri}: cannot create experiment {name!r} ({_one_line(exc)})") from None


def _find_run(client, uri: str, run_id: str):
    """The run with this id, or the only certsel run whose id starts with it."""
    try:
        return client.get_run(run_id)
    except Exception:
        pass
    if len(run_id) >= 4 and all(ch in "0123456789abcdef" for ch in run_id.lower()):
        exps = [e.experiment_id for e in client.search_experiments()]
        hits = [r for r in client.search_runs(exps, "tags.`certsel.kind` = 'job'", max_results=5000)
                if r.info.run_id.startswith(run_id.lower())]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise TrackingProblem(f"run id prefix {run_id!r} is ambiguous in {uri}: "
                                  f"{', '.join(r.info.run_id[:12] for r in hits[:5])}")
    raise TrackingProblem(f"no run {run_id!r} in {uri}")


def load_certificate(run_id: str, uri: str | None = None) -> dict:
    """The ``selection.json`` of a finished job, read back through the MLflow client."""
    import json

    uri = resolve_uri(uri)
    db = _sqlite_path(uri)
    if db is not None and not db.exists():  # reading must never create a store
        # sqlite:///rel/path is relative to the current directory; sqlite:////abs/path is absolute
        hint = "" if db.is_absolute() else (f"; the path is relative to the current directory, an absolute one "
                                            f"is written sqlite:///{db.resolve()}")
        raise TrackingProblem(f"no tracking store at {db} (tracking URI {uri}){hint}")
    client, uri = client_for(uri)
    run = _find_run(client, uri, run_id)
    run_id = run.info.run_id
    if run.data.tags.get("certsel.kind") == "candidate":
        run_id = run.data.tags[PARENT_TAG]
        run = client.get_run(run_id)
    if run.info.status != "FINISHED":
        raise TrackingProblem(f"run {run_id} is {run.info.status}: it has no certificate")
    local = urlparse(run.info.artifact_uri or "")
    if local.scheme == "file":  # read where it lies: MLflow's download copies it through a pool of threads
        path = pathlib.Path(unquote(local.path)) / "selection.json"
        if not path.is_file():
            raise TrackingProblem(f"run {run_id} has no selection.json artifact")
        return json.loads(path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, "selection.json", tmp)
        except Exception:
            raise TrackingProblem(f"run {run_id} has no selection.json artifact") from None
        return json.loads(pathlib.Path(path).read_text())
