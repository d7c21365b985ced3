"""One job's MLflow record as a comparable value: what two runs of the same job must agree on."""

from __future__ import annotations

# tags that differ between any two runs of one job (ids, times, folders, the machine)
VOLATILE_TAGS = ("mlflow.parentRunId", "mlflow.user", "mlflow.source", "certsel.job_id", "mlflow.log-model")


def run_view(client, run, *, tags: bool = False):
    """A run's parameters (less folders), its metric histories as (step, value) (less times) and its name; with
    ``tags``, its tags (less ids and the machine's)."""
    keep = {k: v for k, v in run.data.params.items() if not any(w in k for w in ("dir", "store", "path"))}
    steps = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)]
             for k in sorted(run.data.metrics) if "seconds" not in k and "stage" not in k}
    view = (keep, steps, run.data.tags.get("mlflow.runName"))
    if tags:
        view += ({k: v for k, v in run.data.tags.items() if not k.startswith(VOLATILE_TAGS)}, run.info.status)
    return view


def job_record(uri: str, run_id: str, *, tags: bool = False):
    """The parent run's view and its children's, sorted by name; with ``tags``, the artifacts' names too."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    parent = client.get_run(run_id)
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
    record = (run_view(client, parent, tags=tags), sorted((run_view(client, c, tags=tags) for c in children),
                                                          key=lambda v: str(v[2])))
    if tags:
        record += (sorted(a.path for a in client.list_artifacts(run_id)),)
    return record
