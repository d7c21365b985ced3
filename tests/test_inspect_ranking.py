"""certsel.inspect.CertifiedRanking in a real inspect eval(): four mockllm "models" of known
accuracy on 1,000 shuffled samples, one task over the four models (``eval(task, model=[...])``),
ranked by the pairwise job's pair tests; the ranking is kept as a certsel job that ``certsel
jobs`` lists and ``certsel show`` prints."""

import json

import numpy as np
import pytest

from certsel import cli
from certsel.errors import InputError
from certsel.inspect import CertifiedRanking
from helpers.inspect_tasks import run, task

pytestmark = pytest.mark.integration

ACCURACY = {"a": 0.95, "b": 0.75, "c": 0.5, "d": 0.48}  # c and d within epsilon = 0.1 of each other
N, EPSILON = 1000, 0.1


def test_four_models_are_ranked_in_one_eval_and_each_task_stops_early(tmp_path, capsys):
    rng = np.random.default_rng(1)
    scores = {m: (rng.random(N) < a).astype(float) for m, a in ACCURACY.items()}
    rk = CertifiedRanking(list(ACCURACY), epsilon=EPSILON, delta=0.05)
    per_sample = [{m: float(scores[m][i]) for m in ACCURACY} for i in range(N)]
    logs = run([task(per_sample, rk, name="qa")], tmp_path / "logs", model=[f"mockllm/{m}" for m in ACCURACY],
               max_samples=16, max_tasks=4)
    assert [log.status for log in logs] == ["success"] * 4
    ranking = rk.result.ranking
    names = list(ACCURACY)
    mean = {m: scores[m].mean() for m in names}
    # every certified order is the true one; every certified tie is within epsilon on these samples
    for a, worse in ranking.better.items():
        assert all(mean[a] > mean[b] for b in worse)
    for pair in ranking.tied:
        x, y = pair.split(" ~ ")
        assert abs(mean[x] - mean[y]) < EPSILON
    assert ranking.rank_groups == [["a"], ["b"], ["c", "d"]] and rk.result.selected == "a"
    # each model's task stopped early: samples skipped once none of its pairs was open
    for log in logs:
        meta = log.results.early_stopping.metadata
        assert meta["scheduled"] < N and meta["skipped_runs"] == N - meta["scheduled"]
    # the last task to end kept the ranking as a job (the others ended before it was decided)
    assert [log.results.early_stopping.metadata["job_id"] for log in logs].count(rk.job.job_id) == 1
    top = {log.eval.model.rsplit("/", 1)[-1]: log.results.early_stopping.metadata["scheduled"] for log in logs}
    assert top["a"] < N / 2 and top["b"] < N / 2  # the clear pairs settle early
    # a certsel job like any other
    assert cli.main(["jobs"]) == 0
    assert rk.job.job_id in capsys.readouterr().out
    assert cli.main(["show", rk.job.job_id, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ranking"]["rank_groups"] == [["a"], ["b"], ["c", "d"]] and shown["procedure"]["name"] == "pairwise"
    assert shown["job_id"] == rk.job.job_id and shown["selected"] == "a"


@pytest.mark.unit
@pytest.mark.parametrize("kw, words", [
    (dict(models=["a"]), "at least two distinct names"),
    (dict(models=["a", "a"]), "at least two distinct names"),
    (dict(goal="worst"), "goal must be one of"),
    (dict(goal="topk"), "goal 'topk' needs topk"),
    (dict(epsilon=1.5), "epsilon must be a number strictly between 0 and 1"),
    (dict(bet="kelly"), "pairwise.bet must be one of"),
    (dict(delta=0), "delta"),
])
def test_bad_rankings_are_refused(kw, words):
    args = dict(models=["a", "b", "c"]) | kw
    with pytest.raises(InputError) as err:
        CertifiedRanking(**args)
    assert words in str(err.value) and "\n" not in str(err.value)
