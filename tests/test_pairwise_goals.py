"""Selection-aware pairwise ranking through Ray: goal 'best' compares possible winners only
and certifies the same winner with far fewer model evaluations; 'ranking' stops pairs whose
order is implied; neither certifies a wrong order."""

import pathlib

import numpy as np
from certsel.config import load_config
from certsel.orchestrator.run.engine import RayRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
import pytest

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SIX = ["FuseChat-Llama-3.2-1B-Instruct", "claude", "gpt-3.5-turbo-1106_verbose", "vicuna-13b-v1.5",
       "gpt4_gamed", "ultralm-13b"]


def test_goals_through_ray(ray_session):
    runs = {}
    rt = RayRuntime()
    try:
        for goal in ("all", "ranking", "best"):
            cfg = load_config(EXAMPLES / "alpacaeval_ranking.yaml", [
                f"pairwise.goal={goal}", "policy.kind=seq", f"candidates={SIX}", "tracking.intervals=none"])
            data = load_job_data(cfg)
            runs[goal] = run_job(cfg, data, rt, collect_labels=False)
    finally:
        rt.close()
    truth = dict(zip(data.names, data.table.true_risk, strict=True))
    best = min(truth, key=truth.get)
    for goal, res in runs.items():
        rk = res.ranking
        assert rk.goal == goal and res.selected == best
        assert all(truth[a] < truth[b] for a, bs in rk.better.items() for b in bs)  # no wrong order
        # the implied orders include the direct ones
        assert all(set(rk.better_direct[a]) <= set(rk.better[a]) for a in rk.better)
    spent = {g: r.spent["human"] for g, r in runs.items()}
    assert spent["best"] < 0.5 * spent["all"] and spent["ranking"] <= spent["all"]
    assert runs["best"].ranking.possible_winners == [best]
    # 'best' leaves the order among the losers undecided: fewer orders, same winner
    assert runs["best"].ranking.pairs_certified < runs["all"].ranking.pairs_certified
    assert np.isclose(runs["ranking"].ranking.pairs_certified, runs["all"].ranking.pairs_certified)
