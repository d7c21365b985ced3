"""certsel plan's forecast of the job as configured (orchestrator/engine/forecast.py): its tables are drawn from the
pilot's items with Bayesian-bootstrap weights (checked against the posterior's moments, computed apart), it runs the
job's own engine (the same spend as run_job on the same tables), and the command prints it."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from certsel.config import load_config
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.engine.forecast import forecast, simulated_table
from certsel.orchestrator.inputs.planning import pilot
from certsel.orchestrator.inputs.sources import load_job_data

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def job():
    cfg = load_config(EXAMPLES / "quantization.yaml")
    return cfg, load_job_data(cfg)


def test_a_simulated_table_draws_whole_items_from_the_pilot(job):
    """Every column is one pilot item's column, for every candidate at once and for the judge with its human."""
    _, data = job
    items = pilot(data.table, 50, seed=0)
    sim = simulated_table(data.table, items, np.random.default_rng(0))
    assert sim.human.shape == data.table.human.shape and sim.judge.shape == data.table.judge.shape
    cols = data.table.human[:, items]
    judge = data.table.judge[:, items]
    for c in range(0, sim.human.shape[1], 997):
        (hit,) = np.flatnonzero((cols == sim.human[:, [c]]).all(0) & (judge == sim.judge[:, [c]]).all(0))[:1]
        assert hit >= 0


def test_its_risks_vary_as_the_bayesian_bootstrap_posterior_of_the_pilot_mean():
    """Over many draws, a candidate's simulated risk has mean the pilot's mean and variance s^2 / (m + 1) (s^2 the
    pilot's variance with divisor m, the Dirichlet(1) weights' mean's variance) plus the N draws' own."""
    from certsel.workers.replay import LossTable

    rng = np.random.default_rng(7)
    m, n = 40, 4000
    x = (rng.random(m) < 0.2).astype(float)
    table = LossTable(candidates=np.array(["a"]), items=np.arange(n), human=np.tile(x, n // m)[None, :],
                      judge=None, order=None, objective=None, judge_column=None)
    items = np.arange(m)  # the first m columns are the pilot: x itself
    risks = np.array([simulated_table(table, items, rng).human.mean() for _ in range(3000)])
    s2 = x.var()
    want = s2 / (m + 1) + s2 / n  # the posterior's spread, and (about) the draws' own
    assert risks.mean() == pytest.approx(x.mean(), abs=4 * np.sqrt(want / 3000))
    assert risks.var() == pytest.approx(want, rel=0.12)


def test_the_forecast_is_the_jobs_own_engine_on_the_drawn_tables(job):
    """Its mean spend is what run_job spends on the same tables with the same seeds, computed here apart."""
    import dataclasses

    cfg, data = job
    items = pilot(data.table, 50, seed=3)
    f = forecast(cfg, data, items, sims=2, seed=3)
    rng = np.random.default_rng([3, 0xF0CA])
    quiet = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": None})})
    spent = []
    for s in range(2):
        sim = dataclasses.replace(data, table=simulated_table(data.table, items, rng), pilot=None)
        spent.append(run_job(quiet.model_copy(update={"seed": 3000 + s}), sim, LocalRuntime(1),
                             collect_labels=False).spent["human"])
    assert f.human == pytest.approx(np.mean(spent)) and (f.human_low, f.human_high) == (min(spent), max(spent))
    assert f.human_se == pytest.approx(np.std(spent, ddof=1) / np.sqrt(2))
    assert sum(f.selections.values()) == 2 and "human labels" in f.line()
    with pytest.raises(ValueError, match="--sims"):
        forecast(cfg, data, items, sims=0)


@pytest.mark.integration
def test_the_plan_command_prints_the_forecast_and_refuses_a_negative_count():
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "gate_regression.yaml"),
                        "--sims", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "the job as configured: about" in p.stdout and "over 2 simulated runs" in p.stdout
    p = subprocess.run([sys.executable, "-m", "certsel.cli", "plan", str(EXAMPLES / "gate_regression.yaml"),
                        "--sims", "-1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--sims" in p.stderr
