"""Selection-aware pairwise ranking through Ray: goal 'best' compares possible winners only
and certifies the same winner with far fewer model evaluations; 'ranking' stops pairs whose
order is implied; neither certifies a wrong order."""

import pathlib

import numpy as np
from certsel.config import load_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
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


def test_ties_topk_and_rank_intervals_through_ray_and_mlflow(tmp_path, ray_session):
    """epsilon = 0.05: claude and claude-2 (0.817 and 0.827 on the table) end tied instead of
    running to the end; every order, tie and rank interval holds on the table; 'topk' certifies
    the best three with fewer evaluations. The outputs say all of it."""
    import json

    from certsel.orchestrator.commands.job import execute

    common = ["policy.kind=seq", f"candidates={SIX + ['claude-2']}", f"tracking.uri=sqlite:///{tmp_path}/m.db",
              f"state.dir={tmp_path}/jobs"]
    cfg = load_config(EXAMPLES / "alpacaeval_ranking.yaml", [*common, "pairwise.epsilon=0.05"])
    res, run_id = execute(cfg, output=tmp_path / "rank")
    top, _ = execute(load_config(EXAMPLES / "alpacaeval_ranking.yaml",
                                 [*common, "pairwise.goal=topk", "pairwise.topk=3", "pairwise.epsilon=0.05"]),
                     output=tmp_path / "top")
    truth = dict(zip(res.data.names, res.data.table.true_risk, strict=True))
    rk = res.ranking
    assert "claude ~ claude-2" in rk.tied and rk.pairs_certified + rk.pairs_tied == rk.pairs  # a full ranking
    assert all(truth[a] < truth[b] for a, bs in rk.better.items() for b in bs)
    assert all(abs(truth[a] - truth[b]) < 0.05 for a, b in (p.split(" ~ ") for p in rk.tied))
    rank = {m: 1 + sum(truth[j] < truth[m] for j in truth) for m in truth}
    assert all(lo <= rank[m] <= hi for m, (lo, hi) in rk.rank_intervals.items())
    assert rk.rank_intervals["claude"] == [2, 3] and ["claude", "claude-2"] in [sorted(g) for g in rk.rank_groups]
    best3 = set(sorted(truth, key=truth.get)[:3])
    assert set(top.ranking.topk.certified_in) <= best3 and not set(top.ranking.topk.certified_out) & best3
    assert top.selected is None and set(top.certified) == set(top.ranking.topk.certified_in)
    assert top.spent["human"] < res.spent["human"]
    cert = json.loads((tmp_path / "rank" / "selection.json").read_text())
    assert cert["ranking"]["epsilon"] == 0.05 and "claude ~ claude-2" in cert["ranking"]["tied"]
    assert "ties |R(A) - R(B)| < 0.05" in cert["certificate"] and "{claude, claude-2}" in cert["certificate"]
    report = (tmp_path / "rank" / "report.md").read_text()
    assert "| claude - claude-2 | tied within 0.05 |" in report and "| 2-3 |" in report
    top_cert = json.loads((tmp_path / "top" / "selection.json").read_text())
    assert top_cert["certificate"].startswith("the 3 best models include")
    # every output leads with the top set, not "selected: none"
    from certsel.orchestrator.outputs.cells import headline
    from certsel.orchestrator.outputs.selection_schema import parse
    from certsel.terminal import print_job
    from rich.console import Console

    inside = top.ranking.topk.certified_in
    top_cert = parse(top_cert)  # the file, typed as the outputs read it
    head = headline(top_cert)
    assert inside and head.startswith("top-3: " + ", ".join(inside))  # the certified top set, first
    console = Console(record=True, width=300)
    print_job(console, top_cert, quiet=True)
    assert console.export_text().startswith(head + " — the 3 best models include")
    assert f"<div class=\"big\">{head.replace('top-', 'Top ', 1)}</div>" in (tmp_path / "top" / "report.html").read_text()
