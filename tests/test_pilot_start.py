"""A fixed sequence that starts from a judge-only pilot (``scheduling.start: pilot``): the
quantization example's selection with a fraction of the human labels, a certificate that
says from where the sequence ran, the audit that replays the pilot, and the family-wise error
at the boundary (the first null right after the frontier the pilot estimates)."""

import json

import pytest

from certsel.config import ConfigError, load_config, parse_config
from certsel.orchestrator.audit.base import clopper_pearson
from certsel.orchestrator.audit.job_audit import audit
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.outputs.certificate import certificate
from certsel.orchestrator.outputs.selection_schema import Certificate
from helpers.boundary import boundary_job, boundary_table

EXAMPLE = "examples/quantization.yaml"


def _run(sets):
    cfg = load_config(EXAMPLE, sets)
    return run_job(cfg, load_job_data(cfg), LocalRuntime(1))


@pytest.mark.unit
def test_the_quantization_example_selects_the_same_config_from_the_pilots_start():
    top, pilot = _run(["scheduling.start=top"]), _run([])  # the example starts from its pilot by default
    p = pilot.data.pilot
    assert pilot.selected == top.selected is not None
    assert pilot.data.names == top.data.names[top.data.names.index(p.start):]  # the sequence from its start on
    assert list(p.skipped) == top.data.names[: len(p.skipped)] and p.skipped
    assert pilot.spent["human"] < 0.5 * top.spent["human"]
    # the pilot's judge labels are part of what the job bought (a generation and a judge call each),
    # and so are the human labels people checked the start on
    bought = sum(r.n_judge for r in pilot.records)
    assert pilot.spent["judge"] == bought + p.judge_labels and p.judge_labels == 200 * len(p.estimates)
    assert pilot.spent["human"] == sum(r.n_human for r in pilot.records) + p.human_labels
    assert p.checked and p.human_labels == 30 * len(p.checked)
    cert = certificate(pilot)
    assert cert.pilot.start == p.start and cert.pilot.skipped == list(p.skipped)
    # the labels set against the oracle's estimate are those the certificate says were spent
    assert cert.labels.oracle.labels == cert.labels.spent.human == pilot.spent["human"]
    assert f"the sequence ran from {p.start}" in cert.certificate and "not tested" in cert.certificate
    assert {c.candidate for c in cert.candidates}.isdisjoint(p.skipped)
    assert Certificate.model_validate(json.loads(json.dumps(cert.as_json()))) == cert
    assert cert.scheduling["start"] == "pilot" and "start" not in certificate(top).scheduling  # stated when used


@pytest.mark.unit
@pytest.mark.parametrize("sets, message", [
    (["scheduling.start=pilot", "procedure=bonferroni"], r"starts a fixed sequence \(procedure 'fst'\)"),
    (["scheduling.start=pilot", "data.judge=null", "policy.kind=r-eval"], "needs a replay job with a judge column"),
    (["scheduling.start=pilot", "scheduling.pilot_margin=-1"], "pilot_margin"),
])
def test_a_pilot_the_job_cannot_run_is_refused(sets, message):
    with pytest.raises(ConfigError, match=message):
        load_config(EXAMPLE, sets)


@pytest.mark.integration
def test_the_familywise_error_at_the_boundary_stays_below_delta(tmp_path):
    """The least favourable case for the pilot's start: the first null (R just above alpha)
    sits right after configs well within alpha, where the pilot's start lands; the audit
    replays the pilot in every repetition, and the family-wise failure must stay within delta
    (checked against a 99% Clopper-Pearson bound: not shown to exceed it)."""
    path = tmp_path / "boundary.parquet"
    boundary_table(path)
    cfg = parse_config(boundary_job(path))
    data = load_job_data(cfg)
    reps = 400
    res = audit(cfg, data, reps=reps, seed=5, workers=1)
    fails = round(res.overall["familywise_failure"] * reps)
    assert [r["h0"] for r in res.rows] == [False] * 4 + [True] * 4
    assert clopper_pearson(fails, reps, 0.99)[0] <= 0.1 and res.overall["familywise_failure"] <= 0.1 + 0.03
    assert res.overall["mean_certified"] > 0.5  # not vacuous: the starts let the good configs be certified


@pytest.mark.unit
@pytest.mark.parametrize("sets, start, futility", [
    ([], "pilot", 0.05),  # fst, R-AutoEval+ and the table's judge: the measured defaults
    (["policy.kind=r-eval"], "top", 0.05),  # no judge paired with the human labels: no pilot
    (["procedure=bonferroni"], "top", 0.05),  # not a fixed sequence
    (["scheduling.mode=full"], "top", 0.05),  # the baseline every candidate runs to its budget
    (["scheduling.start=top", "scheduling.futility=null"], "top", None),  # the old defaults, one --set away
    (["policy.kind=cer-eval", "policy.partition=judge", "procedure=bonferroni"], "top", None),  # estimation: no futility test
])
def test_defaults_that_depend_on_the_job(sets, start, futility):
    cfg = load_config(EXAMPLE, sets)
    assert (cfg.scheduling.start, cfg.scheduling.futility) == (start, futility)


@pytest.mark.unit
def test_a_judge_no_better_than_chance_does_not_cost_the_selection():
    """The useless judge puts the frontier far past where it is; people checking the start move
    it back, so the job selects what it selects from the top (it certified nothing before)."""
    sets = ["data.judge=loss_judge_bad"]
    top, pilot = _run([*sets, "scheduling.start=top"]), _run(sets)
    assert pilot.selected == top.selected is not None
    assert len(pilot.data.pilot.checked) > 1  # the start moved
    assert pilot.spent["human"] < top.spent["human"]
