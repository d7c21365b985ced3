"""The certificate as a job writes it (orchestrator/outputs/certificate.py), through real Ray and a
real MLflow store: every bound next to it agrees with it and is stated at the level it has,
for every procedure, policy and a target-dependent strategy; a configuration whose level is
nominal says so in its headline; printed bounds are rounded outward."""

import json

import numpy as np
import pytest
from certsel.config import parse_config
from certsel.orchestrator.outputs.certificate import certificate_of
from certsel.orchestrator.outputs.numbers import bound_text, round_down, round_up
from certsel.orchestrator.outputs.mlflow_store import load_certificate
from certsel.orchestrator.commands.job import execute
from certsel.workers.replay import DATA_DIR
from mlflow.tracking import MlflowClient

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, HTTP servers or the CLI)

TRIVIA = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
PROMPTS = DATA_DIR / "prompts_sentiment.parquet"
FRONTIER = ["mx_m6_r2_k64", "mx_m5_r8_k16", "mx_m5_r4_k16", "mx_m5_r2_k16", "mx_m5_r8_k64", "mx_m5_r4_k64",
            "mx_m5_r2_k64", "mx_m4_r8_k16", "mx_m4_r4_k16", "mx_m4_r2_k16"]
TEMPLATES = [f"prompt_{k:03d}" for k in range(0, 100, 8)]


def _job(tmp_path, **raw):
    base = {"tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")},
            "seed": 3}
    return parse_config({**base, **raw})


def _trivia(tmp_path, procedure, policy, **over):
    return _job(tmp_path, data={"path": str(TRIVIA), "judge": "loss_judge_best", "order": "rank"},
                candidates=FRONTIER, policy=policy, procedure=procedure, objective={"column": "avg_bitwidth"},
                alpha=0.1, delta=0.1, budget={"n": 300, "r": 3, "batch": 25}, **over)


def _prompts(tmp_path, procedure, policy, **over):
    return _job(tmp_path, data={"path": str(PROMPTS), "human": "loss_human", "judge": "loss_judge_icl5"},
                candidates=TEMPLATES, policy=policy, procedure=procedure,
                objective={"column": "prompt_len", "goal": "minimize"}, alpha=0.2, delta=0.1,
                budget={"n": 150, "r": 3, "batch": 20}, **over)


def _agrees(cert: dict, procedure: str) -> None:
    """Certified exactly when the joint bound is <= alpha (no statement counts as above);
    under Bonferroni and Holm also exactly when the own bound at the decision level is;
    the headline quotes the selected candidate's joint bound at 1 - delta."""
    alpha, delta = cert["procedure"]["alpha"], cert["procedure"]["delta"]
    rows = cert["candidates"]
    for c in rows:
        joint = c["simultaneous_bound"]
        assert c["certified"] == (joint is not None and joint <= alpha), c
        if procedure in ("bonferroni", "holm") and c["upper_bound"] is not None:
            assert c["certified"] == (c["upper_bound"] <= alpha), c
    if procedure == "bonferroni":  # every own bound enters the joint statement
        assert all(c["simultaneous_bound"] == c["upper_bound"] for c in rows if c["labels_human"])
    sel = next(c for c in rows if c["selected"])
    ev = cert["evidence"]
    assert ev["simultaneous_bound"] == sel["simultaneous_bound"] and ev["simultaneous_confidence"] == 1 - delta
    assert cert["certificate"].startswith(f"R({sel['candidate']}) <= {bound_text(sel['simultaneous_bound'], alpha)} "
                                          f"with probability >= {1 - delta:g}")
    assert ev["level"] == sel["level"] and "not at this data-dependent stop" in ev["estimate_note"]


@pytest.mark.integration
@pytest.mark.parametrize("procedure, policy", [
    ("fst", {"kind": "r-autoeval+", "betting": "ons"}),
    ("bonferroni", {"kind": "judge-stratified", "betting": "wsr"}),
    ("holm", {"kind": "r-autoeval+", "betting": "up"}),
])
def test_every_bound_agrees_with_the_certificate(tmp_path, procedure, policy):
    cfg = (_trivia if procedure == "fst" else _prompts)(tmp_path, procedure, policy)
    result, run_id = execute(cfg, output=tmp_path / "report")
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert result.selected is not None and len(result.certified) < len(result.records)  # both sides occur
    _agrees(cert, procedure)
    if procedure == "fst":  # the prefix: alpha; the first failure: its own bound; after it: no statement
        first_fail = next(k for k, c in enumerate(cert["candidates"]) if not c["certified"])
        assert all(c["simultaneous_bound"] == 0.1 for c in cert["candidates"][:first_fail])
        assert cert["candidates"][first_fail]["simultaneous_bound"] == cert["candidates"][first_fail]["upper_bound"]
        assert all(c["simultaneous_bound"] is None for c in cert["candidates"][first_fail + 1:])
    client = MlflowClient(cfg.tracking.uri)
    children = client.search_runs([client.get_run(run_id).info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{run_id}'")
    by_name = {r.data.tags["candidate"]: r for r in children}
    sel = by_name[result.selected]
    assert sel.data.metrics["final_simultaneous_bound"] <= cfg.alpha
    assert "not adjusted for the selection" in sel.data.tags["mlflow.note.content"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Simultaneous bound: R is at most it for every candidate at once" in report
    assert "not adjusted for the selection" in report
    # one certificate per job, built when it ended: the file, the parent run's artifact and the
    # result the terminal and the Python API print are the same, down to the second it was made
    assert certificate_of(result) is result.certificate is certificate_of(result)
    assert cert == load_certificate(run_id, cfg.tracking.uri) == json.loads(json.dumps(result.certificate.as_json()))


@pytest.mark.integration
def test_a_nominal_level_says_so_in_the_headline(tmp_path):
    """Cer-Eval with the paper's closed-form radii and the 1-NN partition fitted to the labels
    is not exact: the headline says NOT EXACT next to its probability."""
    models = ["FuseChat-Llama-3.2-1B-Instruct", "claude", "gpt4_gamed"]
    cfg = _job(tmp_path, data={"path": str(DATA_DIR / "alpacaeval_preferences.parquet"), "candidate": "model",
                               "human": "loss", "features": str(DATA_DIR / "alpacaeval_embeddings.parquet")},
               candidates=models, order=models, procedure="fst", policy={"kind": "cer-eval", "radius": "paper"},
               alpha=0.9, delta=0.1, budget={"n": 805, "batch": 50})
    execute(cfg, output=tmp_path / "report", track=False)
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    assert "NOT EXACT" in cert["certificate"] and "nominal" in cert["certificate"]
    exact = parse_config({**cfg.model_dump(mode="json"), "policy": {"kind": "seq", "radius": "paper"}})
    execute(exact, output=tmp_path / "seq", track=False)
    assert "NOT EXACT" not in json.loads((tmp_path / "seq" / "selection.json").read_text())["certificate"]


@pytest.mark.parametrize("x, alpha, text", [
    (0.0991, 0.1, "0.0991"), (0.099123, 0.1, "0.0992"), (0.1, 0.1, "0.1"), (0.07, 0.07, "0.07"),
    (0.13207, 0.1, "0.133"), (0.08251, 0.08251, "0.08251"), (1.0, 0.1, "1.0"),
])
def test_printed_bounds_are_rounded_up_and_never_cross_alpha_when_the_bound_does_not(x, alpha, text):
    assert bound_text(x, alpha) == text
    assert float(bound_text(x, alpha)) >= x
    assert round_up(x) >= x and round_down(x) <= x
    assert round_up(0.1000000003, cap=0.1) == 0.100001 and round_up(0.0999999996, cap=0.1) == 0.1
    assert round_up(np.float64(alpha), cap=alpha) == alpha


@pytest.mark.integration
def test_the_spend_in_the_users_unit(tmp_path):
    """With costs: the spend per candidate and in total, by kind, equals the label counters at
    the prices (generations: the requests that were not judge calls), in selection.json, in
    the CLI's line and as MLflow metrics."""
    from certsel.orchestrator.outputs.selection_schema import parse
    from certsel.orchestrator.outputs.cells import cost_line

    costs = {"human": 0.5, "generation": 0.002, "judge": 0.004, "unit": "USD"}
    cfg = _prompts(tmp_path, "bonferroni", {"kind": "r-autoeval+"}, costs=costs)
    result, run_id = execute(cfg, output=tmp_path / "report")
    cert = json.loads((tmp_path / "report" / "selection.json").read_text())
    spent = result.spent
    gens = spent["requests"] - spent["judge"]
    assert gens > 0
    total = 0.5 * spent["human"] + 0.002 * gens + 0.004 * spent["judge"]
    c = cert["costs"]
    assert c["unit"] == "USD" and c["spent"]["total"] == pytest.approx(total, abs=1e-6)
    assert c["spent"]["human"] == pytest.approx(0.5 * spent["human"])
    assert sum(row["cost"] for row in cert["candidates"]) == pytest.approx(total, abs=1e-4)
    assert c["full_budget"]["total"] > c["spent"]["total"]
    assert cost_line(parse(cert).costs).startswith(f"cost: {total:,.6g} USD (human")
    run = MlflowClient(cfg.tracking.uri).get_run(run_id)
    assert run.data.metrics["cost_total"] == pytest.approx(total) and run.data.tags["certsel.cost_unit"] == "USD"
    assert "cost: total (USD)" in (tmp_path / "report" / "report.md").read_text()

