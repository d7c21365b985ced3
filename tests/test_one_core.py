"""One decision core: the same scores, in the same order, given to a table job (``run_job``) and to
``certsel.inspect`` give the same decisions, e-values and bounds.

The inspect side is driven through inspect's own early-stopping protocol, with the task
description and samples a real ``eval()`` handed to a manager and real ``SampleScore`` objects,
one sample position at a time for every model (the table job's rounds of one label); the table
is laid out so that the job's seeded item order meets the samples in the dataset's shuffled
order (``item_order`` for a testing policy, the pair bank's order for a ranking).
"""

import asyncio

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from inspect_ai.scorer import SampleScore, Score

from certsel.api import job_config
from certsel.inspect import CertifiedRanking, CertifiedSelection
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.policies.stratified import group_queues
from certsel.workers.replay import item_order
from helpers.inspect_tasks import run, task

pytestmark = pytest.mark.integration

N, SEED = 400, 3
COST = (4.0, 1.0, 3.0, 2.0)  # the candidates' objective (smaller is better)


class Capture:
    """A manager that records what inspect hands it at the start and runs no sample."""

    def __init__(self):
        self.started = []

    async def start_task(self, spec, samples, epochs):
        self.started.append((spec, samples, epochs))
        return "capture"

    async def schedule_sample(self, id, epoch):
        from inspect_ai.util import EarlyStop

        return EarlyStop(id=id, epoch=epoch, reason="captured")

    async def complete_sample(self, id, epoch, scores):
        pass

    async def complete_task(self):
        return {}


@pytest.fixture(scope="module")
def inspect_task(tmp_path_factory):
    """inspect's own description of a shuffled N-sample task and its samples, in schedule order."""
    cap = Capture()
    run([task([0.0] * N, cap, name="qa")], tmp_path_factory.mktemp("capture"))
    spec, samples, epochs = cap.started[0]
    return spec, samples


def drive(managers: dict, inspect_task, scores: dict):
    """Every manager's task started, then one round per sample position: the sample scheduled
    for every model (skipped where its manager stops it), then scored for those it runs for."""
    spec, samples = inspect_task

    async def go():
        for m in managers.values():
            await m.start_task(spec, samples, 1)
        for k, s in enumerate(samples):  # a round: every model's sample k scheduled, then scored
            running = [name for name, m in managers.items() if await m.schedule_sample(s.id, 1) is None]
            for name in running:
                value = float(scores[name][k])
                await managers[name].complete_sample(s.id, 1, {"recorded_score": SampleScore(
                    score=Score(value=value), sample_id=s.id)})
        for m in managers.values():
            await m.complete_task()

    asyncio.run(go())


def table_job(tmp_path, scores: dict, position_of_item: np.ndarray, **job):
    """A table job on ``scores`` (model -> score per sample position), the sample at position k
    put on the table's item ``position_of_item.argsort()[k]`` (so that the job meets it k-th)."""
    names = list(scores)
    rows = {"candidate": [], "item": [], "loss_human": [], "rank": [], "cost": []}
    for k, nm in enumerate(names):
        s = np.asarray(scores[nm])
        rows["candidate"] += [nm] * N
        rows["item"] += [f"i{i:05d}" for i in range(N)]
        rows["loss_human"] += (1.0 - s[position_of_item]).tolist()
        rows["rank"] += [k] * N
        rows["cost"] += [COST[k % len(COST)]] * N
    path = tmp_path / "table.parquet"
    pq.write_table(pa.table(rows), path)
    cfg = job_config({"data": {"path": str(path), "order": "rank"}, "seed": SEED, **job})
    data = load_job_data(cfg)
    assert list(data.table.items) == [f"i{i:05d}" for i in range(N)]
    return run_job(cfg, data, LocalRuntime(), collect_labels=False)


def known_scores(acc: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {m: (rng.random(N) < a).astype(float) for m, a in acc.items()}


SELECTIONS = {
    # every candidate decides by its own test (none is stopped for another's failure before it decides)
    "fst": {"m1": 0.97, "m2": 0.93, "m3": 0.9, "m4": 0.5},
    "bonferroni": {"m1": 0.95, "m2": 0.6, "m3": 0.9, "m4": 0.88},
    "holm": {"m1": 0.95, "m2": 0.6, "m3": 0.87, "m4": 0.86},
}


@pytest.mark.parametrize("procedure", list(SELECTIONS))
def test_a_selection_decides_as_the_table_job_does(procedure, tmp_path, inspect_task):
    acc = SELECTIONS[procedure]
    scores = known_scores(acc, 11)
    objective = None if procedure == "fst" else dict(zip(acc, COST))
    sel = CertifiedSelection(list(acc), at_least=0.8, delta=0.05, procedure=procedure, futility=0.05,
                             objective=objective)
    drive(sel.members, inspect_task, scores)
    res = table_job(tmp_path, scores, item_order(N, SEED).argsort(), procedure=procedure, alpha=0.2, delta=0.05,
                    policy={"kind": "r-eval", "sampling": "without-replacement", "betting": "up"},
                    budget={"n": N, "batch": 1},
                    scheduling={"rounds": "fixed", "futility": 0.05, "lookahead": len(acc)},
                    **({} if objective is None else {"objective": {"column": "cost"}}))
    r = sel.result
    assert r.certified == res.certified and r.selected == res.selected
    levels = sel.decision_levels()
    for c, rec, level in zip(r.candidates, res.records, res.levels, strict=True):
        cert = c.certificate
        assert cert.certified == (rec.name in res.certified)
        assert cert.samples.scored == rec.t
        assert cert.log_e_value == pytest.approx(rec.max_log_e, abs=1e-12, rel=1e-12)
        assert levels[rec.index] == pytest.approx(level, rel=1e-12)
        if rec.joint_bound is None:
            assert c.joint_lower_bound is None
        else:  # the selection states mean scores: 1 - the risk bound
            assert c.joint_lower_bound == pytest.approx(1.0 - rec.joint_bound, abs=1e-12)
        # its own bound at its decision level: the job's candidate inverts its test as the member does
        assert sel.members[rec.name].lower_bound(level) == pytest.approx(1.0 - rec.upper_bound, abs=1e-12)
        # the job inspect keeps states the estimate the table job states (the test's own, on the
        # finite-population observations)
        kept = sel.job.records[rec.index]
        assert kept.estimate == pytest.approx(rec.estimate, abs=1e-12)
        assert kept.max_log_e == pytest.approx(rec.max_log_e, abs=1e-12, rel=1e-12)


@pytest.mark.parametrize("epsilon", [None, 0.04])
def test_a_ranking_decides_as_the_pairwise_job_does(epsilon, tmp_path, inspect_task):
    acc = {"a": 0.9, "b": 0.78, "c": 0.7, "d": 0.68}
    scores = known_scores(acc, 5)
    rk = CertifiedRanking(list(acc), epsilon=epsilon, delta=0.05, seed=SEED)
    drive(rk.members, inspect_task, scores)
    bank_order = group_queues(np.zeros(N, dtype=np.int64), 1, np.zeros(N, dtype=np.int8),
                              np.random.default_rng(SEED))[0]
    res = table_job(tmp_path, scores, bank_order.argsort(), procedure="pairwise", delta=0.05,
                    policy={"kind": "seq"}, pairwise={"epsilon": epsilon},
                    budget={"n": N, "batch": 1}, scheduling={"rounds": "fixed"})
    mine, theirs = rk.result.ranking, res.ranking
    assert mine.better == theirs.better and mine.tied == theirs.tied and mine.rank_groups == theirs.rank_groups
    assert mine.items_per_pair == theirs.items_per_pair
    assert mine.rank_intervals == theirs.rank_intervals
    for pair, (lo, hi) in theirs.difference_intervals.items():
        assert mine.difference_intervals[pair] == pytest.approx([lo, hi], abs=1e-12)
    assert rk.result.top == res.certified and rk.result.selected == res.selected
    assert {n: s for n, (s, _) in rk.result.statuses.items()} == {r.name: str(r.status) for r in res.records}
    if epsilon is not None:
        assert mine.pairs_tied >= 1  # the close pair is certified tied
