"""certsel plan (orchestrator/inputs/planning.py, orchestrator/engine/forecast.py): every policy's row is the job's own
engine on the same simulated tables, the job as configured's row is the forecast line's numbers, the cheapest policy in
the job's prices need not be the one with the fewest human labels, and the pilot is drawn apart from the job's order."""

import dataclasses
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from certsel.config import load_config
from certsel.config.sections import CostsConfig
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.engine.forecast import drawn_columns, forecast_on, plan
from certsel.orchestrator.inputs.planning import cheapest_rows, pilot, plan_table, variants
from certsel.workers.replay import item_order

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
JUDGE_DEAR = "costs={human: 0.05, generation: 0.001, judge: 0.02, unit: USD}"  # "human" = one generation compared
HUMAN_DEAR = "costs={human: 2.0, generation: 0.001, judge: 0.002, unit: USD}"  # with a reference; annotators


@pytest.fixture(scope="module")
def job():
    cfg = load_config(EXAMPLES / "quantization.yaml", [JUDGE_DEAR])
    return cfg, load_job_data(cfg)


def _variant(overrides):
    def variant(kind, r):
        cfg = load_config(EXAMPLES / "quantization.yaml", [*overrides, f"policy.kind={kind}",
                                                           *([] if r is None else [f"budget.r={r}"])])
        return cfg, load_job_data(cfg)

    return variant


@pytest.fixture(scope="module")
def planned(job):
    cfg, data = job
    items = pilot(data.table, 200, seed=0)
    return items, plan(cfg, data, items, sims=2, seed=0, variant=_variant([JUDGE_DEAR]))


@pytest.mark.slow
def test_every_row_is_the_jobs_engine_on_the_same_tables_and_the_forecast_is_the_configured_row(job, planned):
    """Each row is forecast_on for that policy's job on the plan's drawn tables (computed here apart); the job as
    configured is one row, and the forecast line the plan prints is that row's numbers."""
    cfg, data = job
    items, (rows, mine, skipped) = planned
    assert not skipped
    assert [(r.policy, r.r) for r in rows] == [(k, r) for k, r, _ in variants(cfg, data.table.human.shape[1], True)]
    (own,) = [r for r in rows if r.configured]
    assert (own.policy, own.r) == (cfg.policy.kind, cfg.budget.r)
    assert (own.human, own.human_se, own.judge, own.certified) == (mine.human, mine.human_se, mine.judge, mine.certified)
    columns = drawn_columns(data, items, 2, 0)
    for row in rows:
        vcfg, vdata = _variant([JUDGE_DEAR])(row.policy, row.r)
        f = forecast_on(vcfg, vdata, columns, seed=0)
        assert (row.human, row.generations, row.judge, row.certified) == (f.human, f.generations, f.judge, f.certified)
        assert row.cost == pytest.approx(0.05 * row.human + 0.001 * row.generations + 0.02 * row.judge)
    by = {(r.policy, r.r): r for r in rows}
    assert by[("r-eval", None)].judge == 0 and by[("r-eval", None)].generations == by[("r-eval", None)].human
    assert by[("judge-stratified", None)].judge >= data.table.human.shape[1]  # the judge on every item first


@pytest.mark.slow
def test_the_cheapest_policy_is_not_the_one_with_the_fewest_human_labels(planned):
    """Judge calls at 0.02 and a human label at 0.05 (a generation compared with a reference answer, the quantization
    case): a policy without the judge's calls is the cheapest although a judge-assisted one needs fewer human labels;
    with annotators at 2.0 the judge pays for itself."""
    _, (rows, _, _) = planned
    cheapest, fewest = cheapest_rows(rows)
    assert cheapest.judge == 0 and fewest.judge > 0 and fewest.human < cheapest.human
    dear = [dataclasses.replace(r, cost=2.0 * r.human + 0.001 * r.generations + 0.002 * r.judge) for r in rows]
    assert cheapest_rows(dear)[0].judge > 0


def test_the_policies_compared_fit_the_table_and_include_the_job_as_configured():
    cfg = load_config(EXAMPLES / "quantization.yaml")
    got = variants(cfg, 1000, True)
    assert ("r-eval", None, False) in got and ("judge-stratified", None, False) in got
    assert [(k, r) for k, r, own in got if own] == [(cfg.policy.kind, cfg.budget.r)]
    assert all(cfg.budget.n * (1 + r) <= 1000 for k, r, own in got if r is not None and not own)  # the job's own: as is
    assert variants(cfg, 1000, False) == [(cfg.policy.kind, cfg.budget.r, True), ("r-eval", None, False)]
    plain = load_config(EXAMPLES / "quantization.yaml", ["policy.kind=r-eval"])
    assert variants(plain, 1000, False) == [("r-eval", None, True)]


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
    """The table's row for the job as configured says what the forecast line says: one simulation."""
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "quantization.yaml"), "--set",
                        JUDGE_DEAR, "--pilot", "40", "--sims", "2"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "| r-eval | - |" in p.stdout and "cheapest: " in p.stdout and "(USD)" in p.stdout
    (own,) = [line for line in p.stdout.splitlines() if "(as configured)" in line]
    human, certified = own.split("|")[3].split("±")[0].strip(), own.split("|")[6].strip()
    line = p.stdout.strip().splitlines()[-1]
    assert re.search(rf"about {re.escape(human)} ± [\d,]+ human labels", line), (own, line)
    assert f"{certified} candidates certified" in line, (own, line)
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "live_additions.yaml")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs a replay job" in p.stderr
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "quantization.yaml"), "--set",
                        "costs.human=-1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "costs.human" in p.stderr


def test_a_plan_without_prices_compares_counts_only(job, planned):
    """No costs: section: no cost column, no policy called cheapest (every cost would be 0),
    the fewest human labels named with the judge calls they take."""
    cfg, _ = job
    _, (rows, _, _) = planned
    cfg = cfg.model_copy(update={"costs": None})
    text = plan_table(cfg, rows, 200, 2)
    assert "cost (" not in text and "cheapest:" not in text and "none is called the cheapest" in text
    _, fewest = cheapest_rows(rows)
    assert f"Fewest human labels: {fewest.policy}" in text and f"{fewest.judge:,.0f} judge calls" in text
    assert text.count("(as configured)") == 1 and "run 2 times for each" in text
    priced = plan_table(cfg.model_copy(update={"costs": CostsConfig(human=1.0, judge=0.001, unit="USD")}), rows, 200, 2)
    assert "cost (USD)" in priced and "cheapest: " in priced


def test_the_efficiencies_are_the_measured_ratios():
    """A policy kind's efficiency (its human labels over its limit) is the mean ratio that
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
