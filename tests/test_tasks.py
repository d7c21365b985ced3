"""Multi-task jobs (``tasks:``): the intersection-union combination, the config's and the
tables' one-line errors, a job over two bundled tables through a real Ray and MLflow (a
candidate certified on one task and failing the other is not certified), and the family-wise
error of the combination at the boundary by simulation."""

import json
import subprocess
import sys

import numpy as np
import pytest
from certsel.config import ConfigError, parse_config
from certsel.errors import InputError
from certsel.orchestrator.inputs.stacked_tasks import load_tasks
from certsel.orchestrator.outputs.tasks_schema import TasksCertificate
from certsel.orchestrator.results.task_combination import intersection_union
from certsel.policies.procedures import get_procedure
from certsel.workers.replay import DATA_DIR

TASK = {t: DATA_DIR / f"prompts_{t}.parquet" for t in ("sentiment", "sum", "larger_animal")}
# prompt_088 is good on sentiment (R = 0.087) and fails sum (R = 0.905); prompt_032 and prompt_060
# are good on both; prompt_012 fails sentiment (0.276)
SLOTS = ["prompt_012", "prompt_032", "prompt_060", "prompt_088", "prompt_096"]


def _raw(tmp_path, **over):
    raw = {"name": "two-tasks",
           "tasks": [{"name": "sentiment", "data": {"path": str(TASK["sentiment"]), "judge": "loss_judge_icl5"},
                      "alpha": 0.2},
                     {"name": "sum", "data": {"path": str(TASK["sum"]), "judge": "loss_judge_icl5"}, "alpha": 0.15,
                      "budget": {"n": 200}}],
           "candidates": SLOTS, "policy": {"kind": "r-autoeval+"}, "procedure": "bonferroni", "delta": 0.1,
           "objective": {"column": "prompt_len"}, "budget": {"n": 250, "r": 3}, "seed": 0,
           "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")}}
    return {**raw, **over}


def _rows(db) -> int:
    """The labels in a candidate's label log (a SQLite file)."""
    import sqlite3

    with sqlite3.connect(db) as con:
        tables = [t for (t,) in con.execute("select name from sqlite_master where type = 'table'")]
        return sum(con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables)


def test_the_combined_evidence_is_the_smallest_e_value_then_the_procedure():
    rng = np.random.default_rng(0)
    log_e = rng.normal(2.5, 2.0, size=(3, 12))
    for name in ("fst", "bonferroni", "holm"):
        combined, mask = intersection_union(log_e, get_procedure(name), 0.1)
        assert np.array_equal(combined, log_e.min(axis=0))
        assert np.array_equal(mask, get_procedure(name).certified(log_e.min(axis=0), 0.1))
        # a candidate below the laxest threshold (1/delta) on any one task is never certified
        assert not np.any(mask & (log_e.min(axis=0) < -np.log(0.1)))
        # and certifying it takes what every one of its tasks alone would need
        for t in range(3):
            assert np.all(get_procedure(name).certified(log_e[t], 0.1)[mask]) or name != "bonferroni"
    with pytest.raises(ValueError, match="tasks, candidates"):
        intersection_union(np.zeros(4), get_procedure("fst"), 0.1)


def test_each_task_is_a_job_of_its_own(tmp_path):
    cfg = parse_config(_raw(tmp_path))
    cfgs = cfg.task_configs()
    assert [c.name for c in cfgs] == ["two-tasks/sentiment", "two-tasks/sum"]
    assert [c.alpha for c in cfgs] == [0.2, 0.15] and [c.budget.n for c in cfgs] == [250, 200]
    assert all(c.budget.r == 3 and c.candidates == SLOTS and c.tasks is None for c in cfgs)
    rec = parse_config(_raw(tmp_path, tasks=[{**_raw(tmp_path)["tasks"][0], "alpha": None,
                                              "data": {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"),
                                                       "score": "score_human", "reference": "score_fp_human"},
                                              "recovery": 0.9}], candidates=None, policy={"kind": "r-eval"},
                                objective={"column": "avg_bitwidth"}))
    assert rec.task_configs()[0].recovery.at_least == 0.9 and rec.task_configs()[0].alpha == pytest.approx(1 / 1.9)


@pytest.mark.parametrize("change, message", [
    ({"data": {"path": str(TASK["sum"])}}, "give exactly one label source"),
    ({"procedure": "pairwise", "policy": {"kind": "seq"}}, "procedure 'pairwise' ranks models"),
    ({"tasks": []}, "tasks: list at least one task"),
    ({"tasks": [{"name": "a", "data": {"path": str(TASK["sum"])}}] * 2}, "duplicate task names: a"),
    ({"tasks": [{"name": "a", "data": {"path": str(TASK["sum"])}, "alpha": 0.1, "recovery": 0.9}]},
     "task 'a': give one target"),
    ({"tasks": [{"name": "a", "data": {"path": str(TASK["sum"])}}]}, "task 'a': policy 'r-autoeval\\+' needs data.judge"),
    ({"tasks": [{"name": "a", "data": {"path": str(TASK["sum"]), "judge": "loss_judge_icl5"},
                 "budget": {"batches": 3}}]}, "task 'a': budget.batches: Extra inputs"),
])
def test_config_mistakes_are_one_line_errors(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(_raw(tmp_path, **change))
    assert "\n" not in str(err.value)


def test_tables_that_do_not_fit_together_are_refused_before_anything_runs(tmp_path):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    trivia = {"name": "trivia", "data": {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"),
                                         "judge": "loss_judge_best"}, "alpha": 0.1}
    with pytest.raises(InputError, match="task 'trivia': .*missing column 'prompt_len'"):
        load_tasks(parse_config(_raw(tmp_path, tasks=[_raw(tmp_path)["tasks"][0], trivia])))
    table = pq.read_table(TASK["sum"])
    pq.write_table(table.filter(pc.not_equal(table["candidate"], "prompt_088")), tmp_path / "sum_less.parquet")
    fewer = {**_raw(tmp_path)["tasks"][1], "data": {"path": str(tmp_path / "sum_less.parquet"), "judge": "loss_judge_icl5"}}
    with pytest.raises(InputError, match="task 'sum' does not have the candidates of task 'sentiment' \\(missing: "
                                         "prompt_088; extra: none\\)"):
        load_tasks(parse_config(_raw(tmp_path, candidates=None, tasks=[_raw(tmp_path)["tasks"][0], fewer])))
    with pytest.raises(InputError, match="task 'sum': candidates: unknown candidate"):
        load_tasks(parse_config(_raw(tmp_path, tasks=[_raw(tmp_path)["tasks"][0], fewer])))
    with pytest.raises(InputError, match="task 'sentiment': budget: n\\*\\(1\\+r\\) = 1600"):
        load_tasks(parse_config(_raw(tmp_path, budget={"n": 400, "r": 3})))
    with pytest.raises(InputError, match="combines e-values; policy 'seq' has none"):
        load_tasks(parse_config(_raw(tmp_path, policy={"kind": "seq"})))


@pytest.mark.integration
def test_a_candidate_failing_one_task_is_not_certified(tmp_path):
    from certsel.orchestrator.commands.tasks_job import execute_tasks
    from certsel.orchestrator.outputs.tasks_outputs import tasks_certificate
    from mlflow.tracking import MlflowClient

    cfg = parse_config(_raw(tmp_path))
    res = execute_tasks(cfg, output=tmp_path / "out")
    cert = json.loads((tmp_path / "out" / "selection.json").read_text())
    assert cert["kind"] == "multi-task" and [t["name"] for t in cert["tasks"]] == ["sentiment", "sum"]
    own = {t: json.loads((tmp_path / "out" / t / "selection.json").read_text()) for t in ("sentiment", "sum")}
    by_task = {t: {c["candidate"]: c for c in own[t]["candidates"]} for t in own}
    log_e = np.array([[by_task[t][n]["log_e_value"] for n in res.names] for t in ("sentiment", "sum")])
    combined = np.array([c["log_e_value"] for c in cert["candidates"]])
    np.testing.assert_allclose(combined, log_e.min(axis=0), atol=1e-6)
    K = len(SLOTS)
    want = [n for n, lv in zip(res.names, combined, strict=True) if lv >= np.log(K / 0.1)]
    assert cert["certified_set"] == want == res.certified
    rows = {c["candidate"]: c for c in cert["candidates"]}
    # certified on sentiment by its own test, failing sum: not certified by the job
    assert "prompt_088" in own["sentiment"]["certified_set"] and "prompt_088" not in own["sum"]["certified_set"]
    assert not rows["prompt_088"]["certified"]
    assert res.certified and set(res.certified) <= set(own["sentiment"]["certified_set"]) & set(own["sum"]["certified_set"])
    objective = {n: np.mean([by_task[t][n]["objective"] for t in own]) for n in res.names}
    assert res.selected == min(res.certified, key=lambda n: objective[n])
    assert cert["candidates"][0]["tasks"]["sum"]["labels_human"] == by_task["sum"][res.names[0]]["labels_human"]
    assert cert["labels"]["spent"]["human"] == sum(o["labels"]["spent"]["human"] for o in own.values())
    # one typed certificate per job (built once), written as the file; a changed file is refused
    typed = tasks_certificate(res)
    assert typed is tasks_certificate(res) and typed.as_json() == cert and TasksCertificate.model_validate(cert) == typed
    for broken in ({**cert, "surprise": 1}, {**cert, "kind": "one-task"},
                   {**cert, "candidates": [{**cert["candidates"][0], "certified": "maybe"}]},
                   {k: v for k, v in cert.items() if k != "guarantee"}):
        with pytest.raises(ValueError):
            TasksCertificate.model_validate(broken)
    assert "meets the target of every task (sentiment: R <= 0.2; sum: R <= 0.15)" in cert["certificate"]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<td>1167</td>" in page and "<td>4950</td>" in page
    assert f'href="{tmp_path / "out" / "sum"}/report.html"' in page
    # MLflow: the job's run holds its tasks' runs, each a whole job with its own candidates
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    run = client.get_run(res.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["n_certified"] == len(res.certified)
    kids = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{res.run_id}'")
    assert sorted(k.info.run_name for k in kids) == ["two-tasks/sentiment", "two-tasks/sum"]
    assert all(k.info.status == "FINISHED" for k in kids)
    out = subprocess.run([sys.executable, "-m", "certsel.cli", "show", res.run_id[:8], "--tracking-uri",
                          cfg.tracking.uri, "--format", "csv"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("candidate,task,certified") and len(lines) == 1 + 2 * K


@pytest.mark.integration
def test_the_multi_task_job_is_a_job_its_tasks_name_and_a_rerun_is_answered_by_it(tmp_path, capsys):
    """The multi-task job has a folder of its own through the one job lifecycle: listed by ``certsel jobs``, its
    tasks' folders naming it as their parent; the same job again is answered by its certificate, no task run again."""
    import yaml

    from certsel import cli

    job = tmp_path / "tasks.yaml"
    job.write_text(yaml.safe_dump(_raw(tmp_path, budget={"n": 100, "r": 3}, tasks=[
        {**_raw(tmp_path)["tasks"][0]}, {**_raw(tmp_path)["tasks"][1], "budget": {"n": 100}}])))
    assert cli.main(["run", str(job), "--no-progress", "--no-tracking"]) == 0
    capsys.readouterr()
    metas = [json.loads(p.read_text()) for p in (tmp_path / "jobs").glob("*/job.json")]
    [parent] = [m for m in metas if m.get("front_end") == "multi-task"]
    tasks = [m for m in metas if m is not parent]
    assert parent["status"] == "finished" and parent["name"] == "two-tasks" and parent["output"]
    assert len(tasks) == 2 and all(m["parent"] == parent["job_id"] and m["status"] == "finished" for m in tasks)
    assert cli.main(["run", str(job), "--no-progress", "--no-tracking"]) == 0
    out = capsys.readouterr().out
    assert f"job {parent['job_id']} already finished" in out and "no label bought now" in out
    assert len(list((tmp_path / "jobs").glob("*/job.json"))) == 3  # no task ran again
    # the job failed after its tasks finished (say, while writing its report): a rerun resumes it, and its
    # finished tasks run again from their label logs, buying nothing
    path = tmp_path / "jobs" / parent["job_id"] / "job.json"
    path.write_text(json.dumps({**parent, "status": "failed"}))
    logs = {p: _rows(p) for p in (tmp_path / "jobs").glob("*/labels/*.db")}  # each candidate's label log
    assert logs and cli.main(["run", str(job), "--no-progress", "--no-tracking"]) == 0
    metas = {m["job_id"]: m for m in (json.loads(p.read_text()) for p in (tmp_path / "jobs").glob("*/job.json"))}
    assert len(metas) == 3 and metas[parent["job_id"]]["status"] == "finished"
    assert all(metas[m["job_id"]]["attempts"] == 2 and metas[m["job_id"]]["status"] == "finished" for m in tasks)
    assert {p: _rows(p) for p in logs} == logs  # no label bought twice


@pytest.mark.slow
def test_the_familywise_error_at_the_boundary_stays_below_delta(tmp_path):
    """The least favourable case: the first slot of a fixed sequence exactly at one task's
    target (a null by 1e-9) and well inside the other's; its combined test must certify it at
    most delta of the time (measured: about the boundary task's own type-I error)."""
    from certsel.orchestrator.audit.base import clopper_pearson
    from certsel.orchestrator.audit.tasks_audit import audit_tasks

    sentiment_032, sum_032 = 0.09683, 0.00416  # prompt_032's risks on the two tables
    cfg = parse_config(_raw(tmp_path, procedure="fst", candidates=["prompt_032", "prompt_060", "prompt_012"],
                            order=["prompt_032", "prompt_060", "prompt_012"], objective=None, tasks=[
                                {**_raw(tmp_path)["tasks"][0], "alpha": None},
                                {**_raw(tmp_path)["tasks"][1], "alpha": 0.2}]))
    cfgs, datas = load_tasks(cfg)
    truth = float(datas[0].table.true_risk[0])
    assert abs(truth - sentiment_032) < 1e-4 and float(datas[1].table.true_risk[0]) == pytest.approx(sum_032, abs=1e-4)
    boundary = cfg.model_copy(update={"tasks": [cfg.tasks[0].model_copy(update={"alpha": truth - 1e-9}),
                                                cfg.tasks[1]]})
    reps = 400
    au = audit_tasks(boundary, boundary.task_configs(), datas, reps=reps, seed=3)
    fails = round(au.overall["familywise_failure"] * reps)
    assert au.rows[0]["h0"]  # a null by 1e-9 on sentiment, well inside the sum target
    assert clopper_pearson(fails, reps, 0.99)[0] <= 0.1  # not shown to exceed delta
    assert au.overall["familywise_failure"] <= 0.1 + 0.03
