"""certsel plan (orchestrator/inputs/planning.py): the cheapest policy in the job's prices, which need
not be the one with the fewest human labels; the pilot is drawn apart from the job's order."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from certsel.config import load_config
from certsel.config.sections import CostsConfig
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.inputs.planning import cheapest_rows, expected_labels, pilot, plan
from certsel.workers.replay import item_order

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
JUDGE_DEAR = "costs={human: 0.05, generation: 0.001, judge: 0.02, unit: USD}"  # "human" = one generation compared
HUMAN_DEAR = "costs={human: 2.0, generation: 0.001, judge: 0.002, unit: USD}"  # with a reference; annotators


@pytest.fixture(scope="module")
def job():
    cfg = load_config(EXAMPLES / "quantization.yaml", [JUDGE_DEAR])
    return cfg, load_job_data(cfg)


@pytest.mark.slow
def test_the_cheapest_policy_is_not_the_one_with_the_fewest_human_labels(job):
    """Judge calls at 0.02 and a human label at 0.05 (a generation compared with a reference
    answer, the quantization case): R-Eval is the cheapest although judge-stratified testing
    needs the fewest human labels; with annotators at 2.0 a judge pays for itself."""
    cfg, data = job
    rows = plan(cfg, data, m=50, seed=0)
    cheapest, fewest = cheapest_rows(rows)
    assert cheapest.policy == "r-eval" and fewest.policy == "judge-stratified"
    by = {(r.policy, r.r): r for r in rows}
    assert by[("judge-stratified", None)].human < by[("r-autoeval+", 3)].human < by[("r-eval", None)].human
    # the same labels, other prices: the judge now pays
    dear = load_config(EXAMPLES / "quantization.yaml", [HUMAN_DEAR])
    cheapest, _ = cheapest_rows(plan(dear, data, m=50, seed=0))
    assert cheapest.policy == "r-autoeval+"
    # costs are the counts at the prices
    for r in rows:
        assert r.cost == pytest.approx(0.05 * r.human + 0.001 * r.generations + 0.02 * r.judge)


def test_expected_labels_cap_at_the_budget_and_count_the_certified():
    labels, ok = expected_labels(np.array([10.0, 200.0, np.inf]), 1.5, 250)
    assert labels.tolist() == [15, 250, 250] and ok.tolist() == [True, False, False]


def test_the_pilot_is_drawn_apart_from_the_jobs_order(job):
    """The pilot's draws use their own generator: they are not the job's first items (whose
    labels are the job's evidence), and they do not move with the job's seed."""
    _, data = job
    items = pilot(data.table, 50, seed=0)
    assert np.unique(items).size == 50
    assert not np.array_equal(np.sort(items), np.sort(item_order(data.table.human.shape[1], 0)[:50]))
    with pytest.raises(ValueError, match="--pilot"):
        pilot(data.table, 0, seed=0)


@pytest.mark.integration
def test_the_plan_command(tmp_path):
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "quantization.yaml"), "--set",
                        JUDGE_DEAR, "--pilot", "40"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "| r-eval | - |" in p.stdout and "cheapest: r-eval" in p.stdout and "(USD)" in p.stdout
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "live_additions.yaml")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs a replay job" in p.stderr
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "quantization.yaml"), "--set",
                        "costs.human=-1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "costs.human" in p.stderr


def test_a_plan_without_prices_compares_counts_only(job):
    """No costs: section: no cost column, no policy called cheapest (every cost would be 0),
    the fewest human labels named with the judge calls they take."""
    from certsel.orchestrator.inputs.planning import plan_table

    cfg, data = job
    cfg = cfg.model_copy(update={"costs": None})
    rows = plan(cfg, data, m=50, seed=0)
    text = plan_table(cfg, rows, 50)
    assert "cost (" not in text and "cheapest:" not in text and "none is called the cheapest" in text
    _, fewest = cheapest_rows(rows)
    assert f"Fewest human labels: {fewest.policy}" in text and f"{fewest.judge:,.0f} judge calls" in text
    priced = plan_table(cfg.model_copy(update={"costs": CostsConfig(human=1.0, judge=0.001, unit="USD")}), rows, 50)
    assert "cost (USD)" in priced and "cheapest: " in priced


def test_the_efficiencies_are_the_measured_ratios():
    """certsel plan scales each limit by its policy kind's efficiency: the mean ratios that
    `python benchmarks/limit.py --docs` wrote into docs/results.md (section "limit")."""
    from certsel.policies.kinds import POLICY_KINDS

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    section = text.split("<!-- section: limit -->")[1].split("<!-- end: limit -->")[0]
    means = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:4]]
             for row in section.splitlines() if row.startswith("| ") and row.count("|") == 4}
    assert POLICY_KINDS.lookup("r-eval").efficiency == float(means["R-Eval (up)"][0])
    assert POLICY_KINDS.lookup("r-autoeval+").efficiency == float(means["R-AutoEval+ (up, split; the default)"][1])
    assert POLICY_KINDS.lookup("judge-stratified").efficiency == float(
        means["judge-stratified (up, control scales 0, 1/2, 1; the default)"][0])
