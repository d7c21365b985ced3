"""A whole `certsel run` job on live candidates: real Ray, real MLflow, a real HTTP model server.

The server (tests/helpers/servers.py) answers additions: candidates are (served model, prompt
template) pairs; the judge answers the question itself (R-AutoEval+'s setting). The
certificate is recomputed from the job's own label log (labels.parquet), and a second run
on the same cache sends no request.
"""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from mlflow.tracking import MlflowClient
from helpers.reference import log_evalues_from_label_log
from helpers.servers import adder_server

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

from helpers.jobs import write_job  # noqa: E402




def test_live_job_end_to_end(ray_session, tmp_path):
    with adder_server() as (url, srv):
        cfg = load_config(write_job(tmp_path, url))
        result, run_id = execute(cfg, output=tmp_path / "report")
        calls_first = dict(srv.calls)
        uri = f"sqlite:///{tmp_path}/store.db"
        cert = load_certificate(run_id, uri)
        assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"

        # weak is wrong when 7 divides a*b (27% of the items): risk < alpha = 0.5; exact risk 0
        assert cert["selected"] == "weak-short" and set(cert["certified_set"]) >= {"exact-short", "weak-short"}
        # every request was sent once: 3 candidates' answers + the judge's answers (shared
        # between the candidates: the same judge prompt is one cached request)
        assert calls_first["weak"] == sum(r.n_human + 3 * r.n_human for r in result.records if "weak" in r.name)
        assert calls_first["exact"] <= 400 + 4 * result.records[0].n_human

        # recompute every candidate's e-value from the label log alone
        log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
        n = cfg.budget.n
        for row in cert["candidates"]:
            log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=0.5, delta=0.1, horizon=n)
            h = human.loss.to_numpy()
            assert row["labels_human"] == h.size
            assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
            # human losses are the real correctness of the recorded answers
            a_b = human.item_id.str.split("+", expand=True).astype(int)
            wrong = ((a_b[0] * a_b[1]) % 7 == 0).astype(float).to_numpy() if "weak" in row["candidate"] else 0.0
            np.testing.assert_array_equal(h, wrong)

        # a second run on the same cache buys nothing from the servers
        result2, run_id2 = execute(cfg)
        assert srv.calls == calls_first
        cert2 = load_certificate(run_id2, uri)
        assert cert2["certified_set"] == cert["certified_set"] and cert2["selected"] == cert["selected"]
        assert [c["log_e_value"] for c in cert2["candidates"]] == [c["log_e_value"] for c in cert["candidates"]]


def run_with_weak_short_unreachable(tmp_path, overrides=None) -> dict:
    """The job of :func:`write_job` (with ``overrides``) whose "weak-short" server stops
    answering once the job has started (it answered the job's check of its servers: an
    unreachable one is refused before the job starts); the run must be FINISHED. Returns its
    certificate."""
    with adder_server() as (url, srv):
        cfg = load_config(write_job(tmp_path, url), overrides)
        bad = cfg.live.candidates[1].model_copy(update={"model": "hangup", "max_retries": 1, "timeout": 1.0})
        cfg = cfg.model_copy(update={"live": cfg.live.model_copy(update={"candidates": [
            cfg.live.candidates[0], bad, cfg.live.candidates[2]]})})
        result, run_id = execute(cfg, output=tmp_path / "report")
    uri = f"sqlite:///{tmp_path}/store.db"
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    return load_certificate(run_id, uri)


def test_a_failing_source_ends_its_candidate_only(ray_session, tmp_path):
    """One candidate's server stops answering: after its retries that candidate is "not
    certified (source failed)", the others are certified as usual, the run is FINISHED and
    the report says why."""
    cert = run_with_weak_short_unreachable(tmp_path)
    rows = {c["candidate"]: c for c in cert["candidates"]}
    assert rows["weak-short"]["status"] == "source failed" and not rows["weak-short"]["certified"]
    assert rows["weak-short"]["reason"].startswith("source failed:") and "connection failed" in rows["weak-short"]["reason"]
    assert rows["weak-short"]["labels_human"] == 0 and rows["weak-short"]["requests"] == 0
    assert {"exact-short", "weak-long"} <= set(cert["certified_set"]) and cert["selected"] == "exact-short"
    assert "source failed" in (tmp_path / "report" / "report.md").read_text()


def test_a_failing_source_in_a_pairwise_job_ends_its_pairs_only(ray_session, tmp_path):
    """Pairwise ranking with one model's server that stops answering: that model is "not certified
    (source failed)", its pairs end undecided, the other pair is compared as usual."""
    cert = run_with_weak_short_unreachable(tmp_path, [
        "procedure=pairwise", "policy.kind=seq", "budget.n=400", "budget.batch=40", "delta=0.05"])
    rows = {c["candidate"]: c for c in cert["candidates"]}
    assert rows["weak-short"]["status"] == "source failed" and rows["weak-short"]["reason"].startswith("source failed:")
    assert rows["weak-short"]["labels_human"] == 0
    rk = cert["ranking"]
    # exact (risk 0) is certified better than weak-long (27% wrong); weak-short's pairs are undecided
    assert rk["better"]["exact-short"] == ["weak-long"] and rk["better"]["weak-long"] == []
    assert rk["better"]["weak-short"] == [] and rk["pairs_certified"] == 1
    assert rk["items_per_pair"]["exact-short vs weak-short"] == 0
    assert cert["selected"] is None  # nobody is certified better than all others
    assert "source failed" in (tmp_path / "report" / "report.md").read_text()


def test_losses_relative_to_a_reference_model(ray_session, tmp_path):
    """``live.reference``: every candidate's loss on an item is its drop against the
    reference's answer, max(loss(candidate) - loss(reference), 0). With the exact adder as
    reference, the weak templates lose exactly where weak is wrong (7 divides a*b) and the
    exact one never; judge labels are relative too. The reference answers are generated
    once, by the driver, and the certificate is recomputed from the label log."""
    with adder_server() as (url, srv):
        path = write_job(tmp_path, url)
        job = yaml.safe_load(path.read_text())
        job["live"]["reference"] = "exact-short"
        path.write_text(yaml.safe_dump(job))
        cfg = load_config(path)
        result, run_id = execute(cfg, output=tmp_path / "report")
        n, r = cfg.budget.n, cfg.budget.r
        # exact serves the reference (= exact-short's requests) and the judge: each prompt once
        assert srv.calls["exact"] <= 2 * n * (1 + r)
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    # what R is, next to the certificate: the drop against the reference, not the loss
    assert "mean drop against the reference model 'exact-short'" in json.dumps(cert)
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    for row in cert["candidates"]:
        log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=0.5, delta=0.1, horizon=n)
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
        a_b = human.item_id.str.split("+", expand=True).astype(int)
        drop = ((a_b[0] * a_b[1]) % 7 == 0).astype(float).to_numpy() if "weak" in row["candidate"] else 0.0
        np.testing.assert_array_equal(human.loss.to_numpy(), drop)
        judged = log[(log.candidate == row["candidate"]) & (log.role == "judge")]
        a_b = judged.item_id.str.split("+", expand=True).astype(int)
        drop = ((a_b[0] * a_b[1]) % 7 == 0).astype(float).to_numpy() if "weak" in row["candidate"] else 0.0
        np.testing.assert_array_equal(judged.loss.to_numpy(), drop)


def test_recovery_against_a_reference_model(ray_session, tmp_path):
    """``recovery:`` on a live job with ``live.reference``: each item's loss is
    (r s_ref - s + 1)/(1 + r) with score = 1 - loss, human and judge alike; the statement is a
    recovery of the reference, its bounds the ones the risk bounds imply (r + 1 - (1 + r) U,
    >= r exactly for the certified), recomputed here from the label log."""
    from certsel.orchestrator.engine.recovery import from_risk_bound
    from certsel.policies.recovery import Recovery

    r = 0.5
    with adder_server() as (url, srv):
        path = write_job(tmp_path, url)
        job = yaml.safe_load(path.read_text())
        job["live"]["reference"] = "exact-short"
        job.pop("alpha")
        job["recovery"] = {"at_least": r}
        path.write_text(yaml.safe_dump(job))
        cfg = load_config(path)
        assert cfg.alpha == pytest.approx(1 / 1.5) and cfg.recovery_reference == "exact-short"
        result, run_id = execute(cfg, output=tmp_path / "report")
    cert = load_certificate(run_id, f"sqlite:///{tmp_path}/store.db")
    assert cert["claim"]["words"] == "recovery >= 50% of 'exact-short'"
    log = pq.read_table(tmp_path / "report" / "labels.parquet").to_pandas()
    want = {"exact-short": [r / 1.5], "weak-short": [r / 1.5, 1.0], "weak-long": [r / 1.5, 1.0]}
    for row in cert["candidates"]:
        log_e, human = log_evalues_from_label_log(log, row["candidate"], alpha=cfg.alpha, delta=0.1, horizon=60)
        assert max(0.0, log_e.max()) == pytest.approx(row["log_e_value"], abs=1e-5)
        a_b = human.item_id.str.split("+", expand=True).astype(int)
        wrong = ((a_b[0] * a_b[1]) % 7 == 0).to_numpy() if "weak" in row["candidate"] else np.zeros(len(human), bool)
        # the reference is always right (s_ref = 1): the loss is r/(1+r) when the candidate is right, 1 when wrong
        np.testing.assert_allclose(human.loss.to_numpy(), Recovery(r).losses(1.0 - wrong, np.ones(len(human))))
        assert set(np.round(human.loss, 12)) <= set(np.round(want[row["candidate"]], 12))
        rec = row["recovery"]
        assert rec["estimate"] is None and rec["on_full_table"] is None  # a live log holds losses, not scores
        assert row["certified"] == (rec["simultaneous_lower_bound"] is not None and rec["simultaneous_lower_bound"] >= r)
        implied = from_risk_bound(row["upper_bound"], r)
        assert (rec["lower_bound"] is None) == (implied is None)
        if implied is not None:
            assert rec["lower_bound"] == pytest.approx(implied, abs=1e-5)  # U is printed rounded up, L rounded down
    assert result.certified and cert["certificate"].startswith(f"recovery({result.selected}) >= ")


def test_reference_must_name_a_candidate_or_an_endpoint(tmp_path):
    from certsel.config import ConfigError

    path = write_job(tmp_path, "http://127.0.0.1:9")
    job = yaml.safe_load(path.read_text())
    job["live"]["reference"] = "bf16"
    path.write_text(yaml.safe_dump(job))
    with pytest.raises(ConfigError, match="reference 'bf16' is not a candidate id"):
        load_config(path)
    job["live"]["reference"] = {"base_url": "http://127.0.0.1:9", "model": "exact", "template": "no placeholder"}
    path.write_text(yaml.safe_dump(job))
    with pytest.raises(ConfigError, match="must contain \\{question\\}"):
        load_config(path)
