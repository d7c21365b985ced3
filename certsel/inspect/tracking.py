"""MLflow logging of a selection made inside inspect-ai, on certsel's store and experiment
helpers (``orchestrator/outputs/tracking.py``)."""

from __future__ import annotations

import time


def log_selection(result, uri: str | None, experiment: str) -> str:
    """One MLflow run for ``result`` (a :class:`~certsel.inspect.SelectionResult`): the claim
    and the procedure as params, per-candidate metrics (step = candidate position), the
    selection as a tag and ``selection.json`` as an artifact. Returns the run id."""
    from mlflow.entities import Metric, Param

    from certsel._version import __version__
    from certsel.orchestrator.outputs.tracking import NOTE, client_for, experiment_id

    client, uri = client_for(uri)
    exp = experiment_id(client, uri, experiment)
    selected = result.selected or "none"
    run = client.create_run(exp, run_name=f"inspect selection: {selected}",
                            tags={"certsel.kind": "inspect-selection", "certsel.version": __version__,
                                  NOTE: result.statement})
    rid = run.info.run_id
    try:
        params = {"procedure": result.procedure, "at_least": result.at_least, "delta": result.delta,
                  "n_candidates": len(result.candidates), "selected": selected,
                  "certified": ", ".join(result.certified) or "none"}
        now = int(time.time() * 1000)
        saved = 1.0 - result.samples_run / result.samples_full if result.samples_full else 0.0
        metrics = [Metric("samples_run", float(result.samples_run), now, 0),
                   Metric("samples_full", float(result.samples_full), now, 0),
                   Metric("samples_saved_percent", 100.0 * saved, now, 0)]
        for i, c in enumerate(result.candidates):
            cert = c.certificate
            metrics += [Metric("candidate_samples_scored", float(cert.samples.scored), now, i),
                        Metric("candidate_log_evalue", float(cert.log_e_value), now, i),
                        Metric("candidate_certified", float(c.certified), now, i)]
            if c.joint_lower_bound is not None:
                metrics.append(Metric("candidate_joint_lower_bound", float(c.joint_lower_bound), now, i))
        client.log_batch(rid, params=[Param(k, str(v)) for k, v in params.items()], metrics=metrics)
        client.log_dict(rid, result.to_dict(), "selection.json")
        client.set_tag(rid, "certsel.selected", selected)
        client.set_terminated(rid, "FINISHED")
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    return rid
