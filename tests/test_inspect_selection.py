"""certsel.inspect.CertifiedSelection: four mockllm "models" in one inspect eval(), selected
with a fixed sequence, Bonferroni and Holm; the selection's certificate, its JSON beside the
logs, its MLflow run, and the samples saved against running every model on every sample."""

import json
import math

import numpy as np
import pytest

from certsel import cli
from certsel.errors import InputError
from certsel.inspect import CertifiedSelection
from certsel.policies import log_evalue_paths
from certsel.policies.sampling import WithoutReplacement
from helpers.inspect_tasks import run, task

pytestmark = pytest.mark.integration

ACCURACY = {"m1": 0.96, "m2": 0.92, "m3": 0.55, "m4": 0.9}
N = 300


@pytest.fixture(scope="module")
def scores():
    rng = np.random.default_rng(7)
    return {m: (rng.random(N) < a).astype(float) for m, a in ACCURACY.items()}


def select(scores, tmp_path, procedure, **kw):
    sel = CertifiedSelection(list(ACCURACY), at_least=0.8, delta=0.05, procedure=procedure,
                             out=tmp_path / "selection.json", **kw)
    per_sample = [{m: float(scores[m][i]) for m in ACCURACY} for i in range(N)]
    tasks = [task(per_sample, sel.member(m), name=f"qa_{m}", model=f"mockllm/{m}") for m in ACCURACY]
    logs = run(tasks, tmp_path / "logs", max_tasks=4)
    assert [log.status for log in logs] == ["success"] * 4
    return sel, {log.eval.model.rsplit("/", 1)[-1]: log for log in logs}


def own_evidence(log, level):
    """certsel's functional test on one candidate's log, in its schedule order."""
    cert = log.results.early_stopping.metadata
    by_id = {s.id: float(s.scores["recorded_score"].value) for s in log.samples}
    n = cert["samples"]["scored"]
    losses = 1.0 - np.array([by_id[i] for i in log.eval.dataset.sample_ids[:n]])
    return float(log_evalue_paths(losses, alpha=0.2, delta=level, rhos=[0.0], horizon=N, sampling=WithoutReplacement(N),
                                  observation="split").max())


def test_fixed_sequence_selects_the_end_of_the_certified_prefix_and_stops_the_rest(scores, tmp_path, capsys):
    sel, logs = select(scores, tmp_path, "fst")
    r = sel.result
    assert r.certified == ["m1", "m2"] and r.selected == "m2"
    c = {c.name: c for c in r.candidates}
    assert c["m3"].certificate.status == "futile"
    # after m3 failed m4 cannot join the prefix: it was stopped then, or had passed its own test before
    m4 = c["m4"].certificate
    assert not m4.certified and m4.status in ("not needed", "not certified")
    assert "after m3 failed" in m4.reason or "fixed-sequence" in m4.reason
    # the joint statement: T for the prefix, m3's own bound at delta, nothing after it
    assert c["m1"].joint_lower_bound == pytest.approx(0.8) and c["m2"].joint_lower_bound == pytest.approx(0.8)
    assert c["m3"].joint_lower_bound < 0.8 and c["m4"].joint_lower_bound is None
    assert m4.lower_bound is None and m4.final and m4.procedure.startswith("fixed-sequence")
    for m in ("m1", "m2", "m3"):
        assert logs[m].results.early_stopping.metadata["log_e_value"] == pytest.approx(own_evidence(logs[m], 0.05),
                                                                                       abs=1e-9)
    # the savings against every model on every sample
    assert r.samples_full == 4 * N and r.samples_run < 0.4 * r.samples_full
    assert r.samples_run == sum(log.results.early_stopping.metadata["samples"]["scheduled"] for log in logs.values())
    # the out file is the job's certificate, the one `certsel show JOB_ID` prints from its folder
    saved = json.loads((tmp_path / "selection.json").read_text())
    assert saved == json.loads((sel.job.output_dir / "selection.json").read_text())
    assert saved["selected"] == "m2" and saved["job_id"] == sel.job.job_id and saved["certified_set"] == ["m1", "m2"]
    assert saved["labels"]["spent"]["human"] <= r.samples_run  # the samples the tests used, of those started
    assert cli.main(["show", sel.job.job_id]) == 0
    shown = capsys.readouterr().out
    assert "selected: m2" in shown and "fixed-sequence" in shown
    assert "fixed-sequence" in r.statement and "selected m2" in r.statement
    assert "each claim's test is kept in the ledger" in r.statement and "a rerun continues it" in r.statement
    assert saved["ledger"]["store"] == str(sel.store) and "a rerun of a claim" in saved["ledger"]["statement"]


def test_bonferroni_certifies_every_good_model_at_delta_over_k_and_logs_to_mlflow(scores, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    sel, logs = select(scores, tmp_path, "bonferroni", objective={"m1": 8.0, "m2": 3.0, "m3": 1.0, "m4": 2.0},
                       mlflow=uri, experiment="inspect-test")
    r = sel.result
    assert r.certified == ["m1", "m2", "m4"] and r.selected == "m4"  # the cheapest certified
    level = 0.05 / 4
    for c in r.candidates:
        evidence = own_evidence(logs[c.name], 0.05)  # bets sized for the job's delta, as a certsel job's are
        assert c.certificate.log_e_value == pytest.approx(evidence, abs=1e-9)
        assert c.certified == (evidence >= math.log(1 / level))
        # Bonferroni's joint bounds are the candidates' own bounds at delta/K, agreeing with the decisions
        assert (c.joint_lower_bound >= 0.8) == c.certified
    assert r.samples_run < r.samples_full
    client = MlflowClient(uri)
    # the job's run and one nested run per candidate, as every certsel job logs
    [mlrun] = client.search_runs([client.get_experiment_by_name("inspect-test").experiment_id],
                                 filter_string="tags.`certsel.kind` = 'job'")
    assert mlrun.info.run_id == sel.mlflow_run == sel.job.tracking["run_id"]
    assert mlrun.data.tags["certsel.selected"] == "m4" and mlrun.info.status == "FINISHED"
    children = client.search_runs([mlrun.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{mlrun.info.run_id}'")
    assert sorted(c.data.tags["status"] for c in children) == ["certified"] * 3 + ["futile"]
    assert "selection.json" in [a.path for a in client.list_artifacts(mlrun.info.run_id)]


def test_holm_certifies_at_least_what_bonferroni_does(scores, tmp_path):
    sel, _ = select(scores, tmp_path, "holm")
    assert {"m1", "m2", "m4"} <= set(sel.result.certified) and "m3" not in sel.result.certified


@pytest.mark.unit
@pytest.mark.parametrize("kw, words", [
    (dict(candidates=[]), "non-empty list of distinct names"),
    (dict(candidates=["a", "a"]), "non-empty list of distinct names"),
    (dict(procedure="pairwise"), "does not test a claim per candidate"),
    (dict(procedure="sidak"), "procedure must be one of fst, bonferroni, holm"),
    (dict(objective={"a": 1}), "objective has no value for b"),
    (dict(at_least=2.0), "at_least must be a number strictly between 0 and 1"),
])
def test_bad_selections_are_refused(kw, words):
    args = dict(candidates=["a", "b"], at_least=0.5) | kw
    with pytest.raises(InputError) as err:
        CertifiedSelection(**args)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.unit
def test_an_unknown_member_is_refused():
    with pytest.raises(InputError, match="unknown candidate 'c'; the candidates are: a, b"):
        CertifiedSelection(["a", "b"], at_least=0.5).member("c")
