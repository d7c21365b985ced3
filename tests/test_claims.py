"""One claim, one test (workers/claims.py, orchestrator/engine/claims.py): a rerun of a claim continues its test.

The continued test against an independent computation (the e-process of one test on the consumed items, then the new
ones, from ``log_evalue_paths``), a decided claim that stays decided and buys nothing, the exact recomputation of a
configuration already recorded, a resumed job's pinned start, a rerun with another policy refused as bad input, and
the error rates of reruns at the boundary (the benchmark's simulation, smaller)."""

import json
import pathlib
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from certsel import cli
from certsel.gates import gate_config
from certsel.orchestrator.engine.driver import LocalRuntime, run_job
from certsel.orchestrator.engine.plan import JobPlan
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.policies.autoeval import log_evalue_paths
from certsel.policies.autoeval_bounds import decision_upper_bound
from certsel.workers.claims import ClaimLedger, continued_orders
from certsel.workers.replay import label_orders


def _table(path, means=(0.095,), n=400, seed=4):
    rng = np.random.default_rng(seed)
    rows = {"candidate": [], "item": [], "loss": []}
    for k, m in enumerate(means):
        rows["candidate"] += [f"c{k}"] * n
        rows["item"] += list(range(n))
        rows["loss"] += (rng.random(n) < m).astype(float).tolist()
    pq.write_table(pa.table(rows), path)
    return path


def _cfg(tmp_path, seed, n, **more):
    job = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss"}, "alpha": 0.1, "delta": 0.1,
           "policy": {"kind": "r-eval"}, "seed": seed, "budget": {"n": n, "batch": 20},
           "state": {"dir": str(tmp_path / "jobs")},
           # each run spends its whole budget (near the boundary the budget stop would end it early): the runs' items
           # are then known in advance
           "scheduling": {"budget_stop": None}, **more}
    return gate_config(job, labels=tmp_path / "labels.db")


def _run(cfg, job_dir=None):
    return run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False, job_dir=job_dir)


def _judged_table(path, n=1000, seed=4):
    rng = np.random.default_rng(seed)
    loss = (rng.random(n) < 0.12).astype(float)  # near the boundary: neither test decides within these budgets
    judge = np.where(rng.random(n) < 0.15, 1 - loss, loss)
    pq.write_table(pa.table({"candidate": ["c0"] * n, "item": list(range(n)), "loss": loss.tolist(),
                             "judge": judge.tolist()}), path)


@pytest.mark.parametrize("kind, r, sampling", [("r-eval", 0, "iid"), ("r-autoeval+", 2, "iid"),
                                               ("r-autoeval+", 2, "without-replacement"), ("r-eval", 0, "without-replacement")])
def test_reruns_continue_the_claims_test_as_one_test_on_one_sequence(tmp_path, kind, r, sampling):
    """Three runs of one claim (seed 0 with 60 labels, seed 1 with 100, seed 2 with 140) give the e-values, futility
    evidence and bound of one test with the first run's horizon on one sequence: the first run's items, then the items
    not consumed in the first run's order (i.i.d.: one order for human and judge items; without replacement: each
    stream its own), computed here by that rule and the functional form of the test."""
    from certsel.policies.autoeval import scheme_rhos
    from certsel.policies.sampling import IID, WithoutReplacement
    from certsel.workers.replay import JUDGE_ORDER_STREAM, item_order

    _judged_table(tmp_path / "t.parquet")
    more = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss", "judge": "judge" if r else None},
            "policy": {"kind": kind, "sampling": sampling}, "budget": {"n": 60, "r": max(r, 1), "batch": 20}}

    def cfg(seed, n):
        return _cfg(tmp_path, seed, n, **{**more, "budget": {**more["budget"], "n": n}})

    ts = [_run(cfg(seed, n)).records[0].t for seed, n in ((0, 60), (1, 100))]
    last = _run(cfg(2, 140)).records[0]
    assert ts == [60, 100] and last.t > 100, "every run adds labels to the claim's test"
    assert last.claim is not None and (last.claim.runs, last.claim.before) == (2, 100)
    data = load_job_data(cfg(2, 140)).table
    wor = sampling == "without-replacement"
    if wor:  # the consumed prefix of each stream's own order, then the rest of it
        h_items = item_order(1000, 0)[: last.t]
        j_items = item_order(1000, [0, JUDGE_ORDER_STREAM])[: r * last.t]
    else:  # per run: its human items, then its judge items, from what the first run's order has left
        order, h_items, j_items, t = list(item_order(1000, 0)), [], [], 0
        for n in (60, 100, last.t):
            m = n - t
            h_items += order[:m]
            j_items += order[m: m + r * m]
            order, t = order[m + r * m:], n
    h_items, j_items = np.asarray(h_items), np.asarray(j_items, dtype=np.int64)
    np.testing.assert_array_equal(last.claim.items[: last.t], h_items)
    x = data.human[0, h_items]
    jl = None if not r else data.judge[0, h_items]
    ju = None if not r else data.judge[0, j_items]
    kw = dict(rhos=scheme_rhos(kind), betting="up", horizon=60, observation="split", past_horizon=True,
              sampling=WithoutReplacement(1000) if wor else IID())
    path = log_evalue_paths(x, jl, ju, alpha=0.1, delta=0.1, **kw)
    np.testing.assert_allclose(last.path, path, rtol=0, atol=1e-9)
    fut = log_evalue_paths(1 - x, None if jl is None else 1 - jl, None if ju is None else 1 - ju, alpha=0.9,
                           delta=0.1, **kw)
    assert last.max_log_futility == pytest.approx(max(0.0, fut.max()), abs=1e-9)
    kw.pop("past_horizon")
    bound = decision_upper_bound(x, jl, ju, level=0.1, delta=0.1, alpha=0.1, max_log_evalue=last.max_log_e,
                                 past_horizon=True, **kw)
    assert last.upper_bound == pytest.approx(float(bound), abs=1e-12)
    assert last.n_human == last.t - 100  # this run's labels only; the test used all three runs'


def test_the_continued_orders_take_new_items_only(tmp_path):
    _table(tmp_path / "t.parquet")
    _run(_cfg(tmp_path, 0, 60))
    cfg = _cfg(tmp_path, 5, 100)
    ledger = ClaimLedger(cfg.state.store)
    (run,) = [r for c in {r[0] for r in ledger._db.execute("select claim from claims")} for r in ledger.runs(c)]
    human, judge = continued_orders(run, 400, 100, False)
    ledger.close()
    assert human.size == 100 and judge.size == 0 and np.unique(human).size == 100
    np.testing.assert_array_equal(human[:60], run.state["human_items"])
    # without replacement, each stream its own order; a budget already spent adds nothing
    human, _ = continued_orders(run, 400, 40, True)
    np.testing.assert_array_equal(human, run.state["human_items"])


@pytest.mark.integration
def test_a_decided_claim_stays_decided_and_a_recomputation_adds_no_run(tmp_path, capsys):
    _table(tmp_path / "t.parquet", means=(0.0, 0.6))
    store = tmp_path / "labels.db"
    base = ["gate", str(tmp_path / "g.yaml"), "--no-tracking", "--labels", str(store), "--home", str(tmp_path / "h")]
    (tmp_path / "g.yaml").write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.1\n"
                                     "policy: {kind: r-eval}\nbudget: {n: 100}\n")
    assert cli.main([*base, "--json", str(tmp_path / "1.json")]) == 1
    one = {c["candidate"]: c for c in json.loads((tmp_path / "1.json").read_text())["candidates"]}
    assert one["c0"]["outcome"] == "pass" and one["c1"]["outcome"] == "fail"
    capsys.readouterr()
    assert cli.main([*base, "--set", "seed=7", "--set", "budget.n=200", "--json", str(tmp_path / "2.json")]) == 1
    lines = capsys.readouterr().out
    two = {c["candidate"]: c for c in json.loads((tmp_path / "2.json").read_text())["candidates"]}
    for name in ("c0", "c1"):  # decided before: nothing bought, the same evidence
        assert two[name]["outcome"] == one[name]["outcome"] and two[name]["labels"] == 0
        assert two[name]["earlier_labels"] == one[name]["labels"] and two[name]["earlier_runs"] == 1
        assert two[name]["e_value"] == one[name]["e_value"]
    assert f"in 1 earlier run of its claim, last job {json.loads((tmp_path / '1.json').read_text())['job_id']}" in lines
    ledger = ClaimLedger(store)
    claims = [r[0] for r in ledger._db.execute("select distinct claim from claims")]
    assert len(claims) == 2 and all(len(ledger.runs(c)) == 1 for c in claims)  # a run that added nothing: no run
    # the first configuration again, anew: the same numbers, recomputed from where it started, and no run added
    assert cli.main([*base, "--fresh", "--json", str(tmp_path / "3.json")]) == 1
    three = {c["candidate"]: c for c in json.loads((tmp_path / "3.json").read_text())["candidates"]}
    assert all(three[n]["e_value"] == one[n]["e_value"] and three[n]["earlier_runs"] == 0 for n in three)
    assert all(len(ledger.runs(c)) == 1 for c in claims)
    ledger.close()


def test_a_job_holds_its_claims_until_it_ends(tmp_path):
    """A job plans (and pins) the runs it continues and holds its claims: another configuration is refused while it
    holds them, the job planned again (resumed) starts where it started, and a job whose folder is gone lets go, the
    items it had planned staying consumed."""
    from certsel.errors import InputError

    _table(tmp_path / "t.parquet")
    _run(_cfg(tmp_path, 0, 60))
    job_dir = tmp_path / "jobs" / "resumed"
    job_dir.mkdir(parents=True)
    cfg = _cfg(tmp_path, 1, 100)
    before = JobPlan(cfg, load_job_data(cfg), str(job_dir)).specs[0].claim
    other = _cfg(tmp_path, 2, 120)
    with pytest.raises(InputError, match="is under test by the unfinished job resumed"):
        JobPlan(other, load_job_data(other), None)
    again = JobPlan(cfg, load_job_data(cfg), str(job_dir)).specs[0].claim
    assert before.base.seq == again.base.seq == 1
    np.testing.assert_array_equal(before.human_items, again.human_items)
    for f in job_dir.iterdir():
        f.unlink()
    job_dir.rmdir()  # the holder is gone: its hold is dropped, its planned items stay consumed
    fresh = JobPlan(other, load_job_data(other), None).specs[0].claim
    assert fresh.base.seq == 1 and not set(fresh.human_items[60:]) & set(before.human_items[60:])


@pytest.mark.integration
def test_a_rerun_with_another_test_is_refused_as_bad_input(tmp_path, capsys):
    _table(tmp_path / "t.parquet")
    _run(_cfg(tmp_path, 0, 60))
    job = tmp_path / "g.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.1\npolicy: {{kind: r-eval}}\n"
                   f"budget: {{n: 100}}\nstate: {{dir: {tmp_path / 'jobs'}}}\n")
    code = cli.main(["gate", str(job), "--no-tracking", "--labels", str(tmp_path / "labels.db"), "--set",
                     "policy.betting=wsr"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "c0: its claim (R <= 0.1 on these labels) was tested before" in err and "policy.betting" in err
    # a looser level than the first run's would be a level chosen after seeing the evidence
    assert cli.main(["gate", str(job), "--no-tracking", "--labels", str(tmp_path / "labels.db"), "--set",
                     "delta=0.2"]) == 2
    assert "at delta 0.1; a rerun states it at that level or a stricter one" in capsys.readouterr().err
    # another alpha is another claim: a test of its own
    assert cli.main(["gate", str(job), "--no-tracking", "--labels", str(tmp_path / "labels.db"), "--set",
                     "alpha=0.2"]) in (0, 1, 3)


@pytest.mark.slow
def test_reruns_at_the_boundary_pass_and_fail_at_most_delta():
    """The benchmark's simulation (benchmarks/reruns.py), 300 sequences of 5 reruns with rising budgets: with the ledger
    any pass and any fail stay below delta (binomial tolerance); each rerun a new test passes far more often."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    from reruns import clopper_pearson, run_sequences

    o, bought = run_sequences("risk", 300, 5, 100, 0.1, ledger=True, seed=1)
    passes, fails = int((o == "pass").any(axis=1).sum()), int((o == "fail").any(axis=1).sum())
    assert clopper_pearson(passes, 300)[0] <= 0.1 and clopper_pearson(fails, 300)[0] <= 0.1
    assert passes / 300 <= 0.13 and fails / 300 <= 0.13
    # a claim's test never holds more labels than the rerun's budget (a budget stop may leave some of one run's budget
    # for the next, larger one): rerun k has bought, over all runs, at most k * 100
    assert (np.cumsum(bought, axis=1) <= 100 * np.arange(1, 6)).all()
    # each rerun a new test: 100 sequences show it (about 0.27 of them pass against the ledger's 0.07 or so)
    o_new, _ = run_sequences("risk", 100, 5, 100, 0.1, ledger=False, seed=1)
    assert (o_new == "pass").any(axis=1).mean() > passes / 300


def test_a_ranking_claim_is_tested_once_per_configuration(tmp_path):
    """A ranking keeps no continuable state: its claim (the order of these models' labels) is recorded, a rerun of the
    same configuration recomputes it, another configuration of it is refused."""
    from certsel.config import parse_config
    from certsel.errors import InputError

    _table(tmp_path / "t.parquet", means=(0.1, 0.3, 0.5))
    raw = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss"}, "procedure": "pairwise",
           "policy": {"kind": "seq"},
           "budget": {"n": 200}, "state": {"store": str(tmp_path / "labels.db")}}
    cfg = parse_config(raw)
    run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False)
    run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False)  # the same configuration: recomputed
    again = parse_config({**raw, "seed": 3})
    with pytest.raises(InputError, match="the ranking of these models' labels was tested before"):
        JobPlan(again, load_job_data(again), None)


def test_a_claim_tested_by_a_policy_that_chooses_its_items_is_not_tested_again(tmp_path):
    from certsel.config import parse_config
    from certsel.errors import InputError

    _table(tmp_path / "t.parquet", means=(0.02, 0.3))
    raw = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss"}, "policy": {"kind": "seq"},
           "procedure": "gate", "alpha": 0.1, "budget": {"n": 200}, "state": {"store": str(tmp_path / "labels.db")}}
    cfg = parse_config(raw)
    run_job(cfg, load_job_data(cfg), LocalRuntime(), collect_labels=False)
    again = parse_config({**raw, "seed": 9})
    with pytest.raises(InputError, match="by policy 'seq', whose test cannot be continued"):
        JobPlan(again, load_job_data(again), None)
    other = parse_config({**raw, "policy": {"kind": "r-eval"}})
    with pytest.raises(InputError, match="with policy.kind 'seq'; a rerun continues that test"):
        JobPlan(other, load_job_data(other), None)


class _Killed(Exception):
    pass


def _killed_after(rounds):
    def progress(records, n):
        if n >= rounds:
            raise _Killed
    return progress


@pytest.mark.parametrize("kind, r", [("r-eval", 0), ("r-autoeval+", 2)])
def test_a_killed_job_whose_folder_is_cleaned_continues_where_it_stood(tmp_path, kind, r):
    """Kill, clean, new seed: a job killed between checkpoints, its folder removed, then a rerun with another seed and
    the same budget. The rerun continues the claim from the killed job's last write-ahead and replays the labels it
    bought since from the store, so its e-process is, to the last bit, that of the same job run without the kill (in
    a store of its own), and it buys only the labels the killed job had not."""
    import shutil

    _judged_table(tmp_path / "t.parquet")
    more = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss", "judge": "judge" if r else None},
            "policy": {"kind": kind}, "budget": {"n": 200, "r": max(r, 1), "batch": 10},
            "state": {"dir": str(tmp_path / "jobs"), "snapshot_every": 3}}

    def cfg(seed, store):
        return gate_config({**_cfg(tmp_path, seed, 200).model_dump(mode="json", exclude_none=True), **more,
                            "seed": seed}, labels=tmp_path / store)

    whole = _run(cfg(0, "whole.db")).records[0]
    job_dir = tmp_path / "jobs" / "killed"
    job_dir.mkdir(parents=True)
    killed = cfg(0, "labels.db")
    with pytest.raises(_Killed):  # 7 rounds of 10 labels: its last write-ahead was at round 6
        run_job(killed, load_job_data(killed), LocalRuntime(), collect_labels=False, job_dir=job_dir,
                progress=_killed_after(7))
    shutil.rmtree(job_dir)  # what certsel jobs --clean does to an unfinished job's folder
    again = cfg(5, "labels.db")
    (tmp_path / "jobs" / "next").mkdir()
    plan = JobPlan(again, load_job_data(again), str(tmp_path / "jobs" / "next")).specs[0].claim
    assert plan.continued and plan.base.outcome == "interrupted" and plan.base.t == 60
    ledger = ClaimLedger(tmp_path / "labels.db")
    (claim,) = {row[0] for row in ledger._db.execute("select claim from claims")}
    assert [run.outcome for run in ledger.runs(claim)] == ["interrupted", "running"]
    ledger.close()
    rerun = run_job(again, load_job_data(again), LocalRuntime(), collect_labels=False,
                    job_dir=tmp_path / "jobs" / "next").records[0]
    assert rerun.t == whole.t and rerun.path == whole.path and rerun.max_log_e == whole.max_log_e
    assert rerun.n_human - rerun.reused == whole.t - 70, "the killed job's 70 labels come from the store"


def test_a_dropped_first_run_before_any_label_leaves_its_items_consumed(tmp_path):
    """A held run that wrote nothing ahead (a store from before the write-ahead) and is gone: a continuation of the
    claim's last run does not take its planned items again."""
    _table(tmp_path / "t.parquet")
    _run(_cfg(tmp_path, 0, 60))
    ledger = ClaimLedger(tmp_path / "labels.db")
    (claim,) = {row[0] for row in ledger._db.execute("select claim from claims")}
    planned = np.arange(60, 160)
    ledger.begin(claim, "old", "gone-job", 1, {"jobs": ["gone-job"], "human_items": planned,
                                               "judge_items": np.zeros(0, dtype=np.int64)})
    ledger.close()
    cfg = _cfg(tmp_path, 3, 200)
    start = JobPlan(cfg, load_job_data(cfg), None).specs[0].claim
    assert start.base.seq == 1 and not set(start.human_items[60:]) & set(planned)


@pytest.mark.integration
def test_kill_clean_and_a_new_seed_continue_the_claim_through_every_front_end(tmp_path, monkeypatch, capsys):
    """The door the red team found: a job interrupted while undecided (here certsel.run, Ctrl-C after 4 rounds), its
    folder removed by ``certsel jobs --clean all``, then ``certsel gate`` with the next seed: the gate continues the
    claim's test (an earlier run of it, whose labels it replays from the store) instead of starting a new one."""
    import certsel

    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    _judged_table(tmp_path / "t.parquet")
    job = tmp_path / "g.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.1\npolicy: {{kind: r-eval}}\n"
                   "order: [c0]\nbudget: {n: 300, batch: 10}\nscheduling: {budget_stop: null}\nray: {num_cpus: 1}\n")
    with pytest.raises(KeyboardInterrupt):
        certsel.run(str(job), track=False, progress=lambda records, n: (_ for _ in ()).throw(KeyboardInterrupt)
                    if n >= 4 else None)
    assert cli.main(["jobs", "--clean", "all"]) == 0
    capsys.readouterr()
    code = cli.main(["gate", str(job), "--no-tracking", "--set", "seed=1", "--json", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    (row,) = json.loads((tmp_path / "g.json").read_text())["candidates"]
    # the interrupted run: an earlier run of the claim; its 40 labels, bought after its last write-ahead, replayed
    # from the store first (in its order), the new ones after them
    assert code in (0, 1, 3) and row["earlier_runs"] == 1 and row["reused"] >= 40, out
    assert "in 1 earlier run of its claim" in out


def test_a_jobs_identity_names_its_ledger(tmp_path):
    """A run without the ledger and a run in a store are two jobs, and so are runs in two stores: a finished job
    answers only a rerun in its own ledger."""
    from certsel.config.identity import config_fingerprint

    _table(tmp_path / "t.parquet")
    on = _cfg(tmp_path, 1, 100)
    off = on.model_copy(update={"state": on.state.model_copy(update={"store": None})})
    other = on.model_copy(update={"state": on.state.model_copy(update={"store": tmp_path / "other.db"})})
    assert len({config_fingerprint(c, "d") for c in (on, off, other)}) == 3


@pytest.mark.integration
def test_a_gate_never_answers_with_a_job_outside_its_ledger_or_behind_it(tmp_path, monkeypatch, capsys):
    """Sequence 1 of the red team: gates of a boundary claim (seed 1, budget 100; seed 2, budget 200), then the same
    claim run without the ledger (certsel run, store off: its output says its statement holds for it alone), then the
    gate with that run's seed and budget. The gate is not answered by the ledger-less job: it continues the claim and
    prints where the ledger holds it. And a gate rerun with its first configuration, after the claim moved on, prints
    the claim's state now, not its own old outcome."""
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    _table(tmp_path / "t.parquet", means=(0.1,), n=1200, seed=11)
    job = tmp_path / "g.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.1\npolicy: {{kind: r-eval}}\n"
                   "order: [c0]\nbudget: {n: 100}\nray: {num_cpus: 1}\n")

    def gate(*sets):
        capsys.readouterr()
        code = cli.main(["gate", str(job), "--no-tracking", "--json", str(tmp_path / "g.json"),
                         *(x for s in sets for x in ("--set", s))])
        (row,) = json.loads((tmp_path / "g.json").read_text())["candidates"]
        return code, row, capsys.readouterr().out

    _, first, _ = gate("seed=1")
    _, second, _ = gate("seed=2", "budget.n=200")
    assert second["earlier_runs"] == 1
    capsys.readouterr()
    assert cli.main(["run", str(job), "--no-tracking", "--no-progress", "--set", "procedure=gate", "--set", "order=null", "--set",
                     "state.store=null", "--set", "seed=11", "--set", "budget.n=1000"]) == 0
    assert "ledger: off (state.store: null): this statement holds for this run alone" in capsys.readouterr().out
    _, last, out = gate("seed=11", "budget.n=1000")
    assert "answered by the finished job" not in out
    assert last["earlier_runs"] == 2 and last["earlier_labels"] == second["earlier_labels"] + second["labels"]
    ledger = ClaimLedger(tmp_path / "home" / "labels.db")
    (claim,) = {row[0] for row in ledger._db.execute("select claim from claims")}
    assert ledger.runs(claim)[-1].outcome == last["outcome"]  # what it printed is the ledger's state
    ledger.close()
    # the first configuration again: the claim has moved on since, so no finished job answers it
    _, again, out = gate("seed=1")
    assert "answered by the finished job" not in out and again["labels"] == 0
    assert again["outcome"] == last["outcome"] and again["earlier_runs"] == 3 and first["earlier_runs"] == 0


@pytest.mark.slow
def test_killed_and_cleaned_reruns_at_the_boundary_pass_and_fail_at_most_delta():
    """The door benchmark's simulation (benchmarks/rerun_doors.py), smaller: 150 boundary claims, each rerun 4 times
    with every rerun but the last killed after 7 rounds and its folder removed: any pass and any fail stay within
    delta's binomial slack, and the killed runs' evidence is not lost (the last runs continue past their labels)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    from rerun_doors import killed_sequences
    from reruns import clopper_pearson

    o = killed_sequences("risk", 150, 4, 100, 0.1, kill_round=7, seed=3)
    passes, fails = int((o == "pass").any(axis=1).sum()), int((o == "fail").any(axis=1).sum())
    assert (o[:, :-1] == "killed").mean() > 0.5 and not (o[:, -1] == "killed").any()
    assert clopper_pearson(passes, 150)[0] <= 0.1 and clopper_pearson(fails, 150)[0] <= 0.1


@pytest.mark.integration
def test_a_gate_without_the_ledger_says_so_in_every_output(tmp_path, capsys):
    """``state.store: null`` turns the ledger off explicitly: the gate's lines, its step summary and selection.json
    say that its statement holds for this run alone, and nothing is written to a store."""
    _table(tmp_path / "t.parquet", means=(0.0,))
    job = tmp_path / "g.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\nalpha: 0.1\npolicy: {{kind: r-eval}}\n"
                   "budget: {n: 100}\nray: {num_cpus: 1}\n")
    code = cli.main(["gate", str(job), "--no-tracking", "--set", "state.store=null", "--summary",
                     str(tmp_path / "s.md"), "--json", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    said = "ledger: off (state.store: null): this statement holds for this run alone"
    assert code == 0 and said in out and said in (tmp_path / "s.md").read_text()
    folder = json.loads((tmp_path / "g.json").read_text())["files"]["selection"]
    ledger = json.loads(open(folder).read())["ledger"]
    assert ledger["store"] is None and ledger["statement"].startswith("off (state.store: null)")
    import os
    assert not (pathlib.Path(os.environ["CERTSEL_HOME"]) / "labels.db").exists()


def _family_cfg(tmp_path, order=None, procedure="fst", candidates=None, seed=0, n=60):
    from certsel.config import parse_config

    raw = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss"}, "alpha": 0.1, "delta": 0.1,
           "policy": {"kind": "r-eval"}, "seed": seed, "budget": {"n": n, "batch": 20}, "procedure": procedure,
           "scheduling": {"budget_stop": None}, "state": {"dir": str(tmp_path / "jobs"),
                                                         "store": str(tmp_path / "labels.db")}}
    if procedure == "fst":
        raw["order"] = order
    else:
        raw["objective"] = {"column": "size"}
    if candidates is not None:
        raw["candidates"] = candidates
    return parse_config(raw)


def test_a_selections_family_is_part_of_its_claims(tmp_path):
    """Sequence 3 of the red team: a fixed sequence rerun with its order re-sorted, or a Holm family shrunk to its
    leaders, or a selection over claims gated on their own before, is refused with one line naming what changed; the
    same family with a new seed and a larger budget continues."""
    from certsel.errors import InputError

    _table(tmp_path / "t.parquet", means=(0.09, 0.1, 0.11))
    t = pq.read_table(tmp_path / "t.parquet")
    sizes = [float(c[1:]) for c in t.column("candidate").to_pylist()]
    pq.write_table(t.append_column("size", pa.array(sizes)),
                   tmp_path / "t.parquet")
    first = _family_cfg(tmp_path, order=["c0", "c1", "c2"])
    _run(first)
    again = _family_cfg(tmp_path, order=["c0", "c1", "c2"], seed=4, n=120)
    assert JobPlan(again, load_job_data(again), None).specs[0].claim.continued  # the same family: continued
    resorted = _family_cfg(tmp_path, order=["c2", "c0", "c1"], seed=5, n=120)
    with pytest.raises(InputError, match="was tested before in a fst family of 3 candidates .*: its order changed"):
        JobPlan(resorted, load_job_data(resorted), None)
    shorter = _family_cfg(tmp_path, order=["c1", "c2"], seed=5, n=120)
    with pytest.raises(InputError, match="1 of its 3 candidates left out"):
        JobPlan(shorter, load_job_data(shorter), None)
    holm = _family_cfg(tmp_path, procedure="holm", seed=5, n=120)
    with pytest.raises(InputError, match=r"procedure fst \(now holm\)"):
        JobPlan(holm, load_job_data(holm), None)
    # a claim gated on its own, then taken into a selection: its family would be chosen after its evidence
    _run(_cfg(tmp_path, 0, 60, data={"path": str(tmp_path / "t.parquet"), "human": "loss"}, alpha=0.2))
    leaders = _family_cfg(tmp_path, procedure="holm", candidates=["c0", "c1"])
    leaders = leaders.model_copy(update={"alpha": 0.2})
    with pytest.raises(InputError, match="outside any recorded family"):
        JobPlan(leaders, load_job_data(leaders), None)


def _rewrites(src, tmp_path):
    """The same measurements written again as a user rewrites a table: a CSV round trip with the ids as strings, the
    values rounded to 6 places, the rows shuffled."""
    from pyarrow import csv

    t = pq.read_table(src)
    rng = np.random.default_rng(1)
    shuffled = t.take(rng.permutation(t.num_rows))
    as_str = shuffled.set_column(shuffled.column_names.index("item"), "item",
                                 pa.array([str(i) for i in shuffled.column("item").to_pylist()]))
    csv.write_csv(as_str, tmp_path / "t.csv")
    rounded = t.set_column(t.column_names.index("loss"), "loss", pa.array(np.round(t.column("loss").to_numpy(), 6)))
    pq.write_table(rounded, tmp_path / "rounded.parquet")
    return [tmp_path / "t.csv", tmp_path / "rounded.parquet"]


@pytest.mark.integration
def test_a_table_written_again_continues_its_claim_and_another_value_is_another_claim(tmp_path, monkeypatch, capsys):
    """Sequence 6 of the red team, through the real CLI: a gate of an undecided claim on a table of losses with many
    decimals, then the same measurements written again (a CSV round trip with string ids, rows shuffled; values
    rounded to 6 places), each gated with a new seed: each continues the claim's one test (its earlier runs and labels
    in the line), the e-process never restarts. A table whose values differ beyond 6 decimals is another claim."""
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    rng = np.random.default_rng(5)
    n = 1500
    loss = np.clip(rng.beta(1, 9, n) + rng.normal(0, 1e-3, n), 0, 1)  # mean about 0.1, values with 16 digits
    pq.write_table(pa.table({"candidate": ["c0"] * n, "item": list(range(n)), "loss": loss}), tmp_path / "t.parquet")

    def gate(path, *sets):
        job = tmp_path / "g.yaml"
        job.write_text(f"data: {{path: {path}, human: loss}}\nalpha: 0.1\npolicy: {{kind: r-eval}}\n"
                       "order: [c0]\nbudget: {n: 100}\n")
        capsys.readouterr()
        cli.main(["gate", str(job), "--no-tracking", "--json", str(tmp_path / "g.json"),
                  *(x for s in sets for x in ("--set", s))])
        (row,) = json.loads((tmp_path / "g.json").read_text())["candidates"]
        row["stderr"] = capsys.readouterr().err
        return row

    first = gate(tmp_path / "t.parquet", "seed=1")
    assert first["outcome"] == "undecided" and first["earlier_runs"] == 0
    runs, labels = 1, first["labels"]
    for k, path in enumerate(_rewrites(tmp_path / "t.parquet", tmp_path), start=2):
        row = gate(path, f"seed={k}", f"budget.n={100 * k}")
        assert (row["earlier_runs"], row["earlier_labels"]) == (runs, labels), path.name
        assert "a new claim" not in row["stderr"]
        runs, labels = runs + 1, labels + row["labels"]
    ledger = ClaimLedger(tmp_path / "home" / "labels.db")
    assert len({row[0] for row in ledger._db.execute("select claim from claims")}) == 1
    ledger.close()
    moved = pq.read_table(tmp_path / "t.parquet")
    moved = moved.set_column(2, "loss", pa.array(np.clip(loss + 1e-5, 0, 1)))
    pq.write_table(moved, tmp_path / "moved.parquet")
    assert gate(tmp_path / "moved.parquet", "seed=9")["earlier_runs"] == 0  # other measurements: another claim
    # the table edited in place (as a compress-then-gate flow rewrites it): another claim, and the gate says so
    pq.write_table(moved.set_column(2, "loss", pa.array(np.clip(loss + 2e-5, 0, 1))), tmp_path / "t.parquet")
    row = gate(tmp_path / "t.parquet", "seed=10")
    assert row["earlier_runs"] == 0
    [line] = [x for x in row["stderr"].splitlines() if "a new claim" in x]
    assert "c0: a new claim (R <= 0.1 on these labels): its measurements in t.parquet differ from those its claim " \
           "was tested on before (job " in line
    assert f"{labels} labels)" in line and "its test starts anew at delta" in line
    assert "a new claim" not in gate(tmp_path / "t.parquet", "seed=11")["stderr"]  # its own claim now


def test_a_claim_recorded_under_an_earlier_releases_identity_keeps_its_test(tmp_path):
    """A store written by certsel 0.2, whose claim keys digested a table's exact values: the claim moves to its key now
    (values at 6 decimals) with its family, and a rerun continues its test."""
    from certsel.orchestrator.engine.claims import claim_identities
    from certsel.orchestrator.inputs.sources import ReplayKind
    from certsel.workers.claims import claim_key
    from certsel.workers.label_store import identity_key

    rng = np.random.default_rng(2)
    loss = rng.beta(1, 9, 400)
    pq.write_table(pa.table({"candidate": ["c0"] * 400, "item": list(range(400)), "loss": loss}),
                   tmp_path / "t.parquet")
    cfg = _cfg(tmp_path, 0, 60)
    data = load_job_data(cfg)
    _run(cfg)
    (now,) = claim_identities(cfg, data)
    old = claim_key(identity_key({**ReplayKind().legacy_claim_identity(cfg, data, 0), "unit": data.unit}), 0.1)
    assert old != claim_key(now, 0.1)
    ledger = ClaimLedger(tmp_path / "labels.db")
    with ledger._db:  # the store as the earlier release left it
        ledger._db.execute("update claims set claim = ?", (old,))
    ledger.close()
    start = JobPlan(_cfg(tmp_path, 3, 200), data, None).specs[0].claim
    assert start.continued and start.base.t == 60 and start.key == claim_key(now, 0.1)
    ledger = ClaimLedger(tmp_path / "labels.db")
    assert [r[0] for r in ledger._db.execute("select distinct claim from claims")] == [claim_key(now, 0.1)]
    ledger.close()


def test_a_checkpoint_copied_or_its_arguments_respelled_is_the_same_claim(tmp_path):
    """Sequence 6 for lm-eval: a local checkpoint copied with ``cp -r`` (new files, new mtimes) or its model_args
    respaced and reordered is the same model, so the same claim; one weight byte changed is another claim."""
    import subprocess

    from certsel.config import parse_config
    from certsel.orchestrator.inputs.jobdata import JobData
    from certsel.orchestrator.inputs.lm_eval_kind import LmEvalCandidate, LmEvalKind

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"layers": 2}')
    (ckpt / "model.safetensors").write_bytes(bytes(range(256)) * 64)

    def identity(args):
        cand = {"id": "a", "model": "hf", "model_args": args}
        cfg = parse_config({"labels": {"kind": "lm-eval", "task": "t", "candidates": [cand]},
                            "policy": {"kind": "r-eval"}, "alpha": 0.3})
        data = JobData(table=None, features=None, fingerprint="task t", live=(LmEvalCandidate(**cand),),
                       function=("acc", True), n_source_items=10)
        return LmEvalKind().claim_identity(cfg, data, 0)

    base = identity(f"pretrained={ckpt},dtype=float16")
    subprocess.run(["cp", "-r", str(ckpt), str(tmp_path / "copy")], check=True)
    assert identity(f"pretrained={tmp_path / 'copy'},dtype=float16") == base
    assert identity(f" dtype = float16 , pretrained={ckpt}") == base
    assert identity(f"pretrained={ckpt},dtype=bfloat16") != base
    weights = bytearray((tmp_path / "copy" / "model.safetensors").read_bytes())
    weights[100] ^= 1
    (tmp_path / "copy" / "model.safetensors").write_bytes(bytes(weights))
    assert identity(f"pretrained={tmp_path / 'copy'},dtype=float16") != base
    # a served model's arguments name it: respelled, the same; another model, another claim
    served = identity("base_url=http://127.0.0.1:9/v1,model=m")
    assert identity("model=m, base_url=http://127.0.0.1:9/v1") == served != identity("base_url=http://127.0.0.1:9/v1,model=n")


def _pair_table(path, n=1000):
    rng = np.random.default_rng(8)
    x = (rng.random(n) < 0.30).astype(float)
    y = np.where(rng.random(n) < 0.1, (rng.random(n) < 0.1).astype(float), x)  # a little better than x
    pq.write_table(pa.table({"candidate": ["X"] * n + ["Y"] * n, "item": list(range(n)) * 2,
                             "loss": np.concatenate([x, y])}), path)


def _pair_gate(tmp_path, store, cand, base, seed, n, superiority=False, margin=0.02):
    job = {"data": {"path": str(tmp_path / "t.parquet"), "human": "loss"}, "policy": {"kind": "r-eval"},
           "candidates": [cand], "regression": {"baseline": base, "margin": margin, "superiority": superiority},
           "seed": seed, "budget": {"n": n, "batch": 20}, "state": {"dir": str(tmp_path / "jobs")},
           "scheduling": {"budget_stop": None}}
    cfg = gate_config(job, labels=tmp_path / store)
    return _run(cfg).records[0]


# 0.001: a margin whose levels (1 + m) / 2 and (1 - m) / 2 are not each other's 1 - x to the last bit
@pytest.mark.parametrize("margin", [0.02, 0.001])
def test_the_reversed_hypothesis_continues_the_same_test(tmp_path, margin):
    """Sequence 7 of the red team: "Y beats X by 0.02" gated as Y against X (superiority), then as X against Y
    (non-inferiority at margin 0.02, whose fail is the same statement). The second continues the first's one test
    from its other side: its e-process is, to the last bit, that of gating X against Y both times, and the ledger
    holds one claim."""
    _pair_table(tmp_path / "t.parquet")
    first = _pair_gate(tmp_path, "a.db", "Y", "X", 1, 120, superiority=True, margin=margin)
    assert first.t == 120 and first.status not in ("certified", "futile")  # undecided: a test to continue
    crossed = _pair_gate(tmp_path, "a.db", "X", "Y", 2, 240, margin=margin)
    assert crossed.claim is not None and crossed.claim.before == 120  # continued, not a fresh test
    _pair_gate(tmp_path, "b.db", "X", "Y", 1, 120, margin=margin)
    straight = _pair_gate(tmp_path, "b.db", "X", "Y", 2, 240, margin=margin)
    assert crossed.t == straight.t and crossed.path == straight.path and crossed.max_log_e == straight.max_log_e
    assert crossed.max_log_futility == straight.max_log_futility and crossed.status == straight.status
    ledger = ClaimLedger(tmp_path / "a.db")
    assert len({row[0] for row in ledger._db.execute("select claim from claims")}) == 1
    ledger.close()
    # and back again: Y against X continues the same test (its pass is the fail of X against Y)
    again = _pair_gate(tmp_path, "a.db", "Y", "X", 3, 360, superiority=True, margin=margin)
    assert again.claim is not None and again.claim.before == crossed.t


@pytest.mark.integration
def test_the_reversed_hypothesis_through_the_cli_continues_and_a_selection_is_refused(tmp_path, monkeypatch,
                                                                                      capsys):
    """The same through `certsel gate` (its line counts the earlier run of its claim), and a selection over the
    reversed claim refused in one line naming how the statement was tested."""
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path / "home"))
    _pair_table(tmp_path / "t.parquet")
    job = tmp_path / "g.yaml"
    job.write_text(f"data: {{path: {tmp_path / 't.parquet'}, human: loss}}\npolicy: {{kind: r-eval}}\n"
                   "budget: {n: 60}\nseed: 1\n")

    def gate(cand, base, *more):
        capsys.readouterr()
        code = cli.main(["gate", str(job), "--no-tracking", "--only", cand, "--baseline", base, "--margin", "0.02",
                         *more])
        return code, capsys.readouterr()

    code, _ = gate("Y", "X", "--superiority")
    assert code in (0, 1, 3)
    code, out = gate("X", "Y", "--set", "seed=2", "--set", "budget.n=120")
    assert code != 2 and "1 earlier run of its claim" in out.out, out.err
    code = cli.main(["run", str(job), "--no-tracking", "--no-progress", "--set", "regression={baseline: Y, margin: 0.02}",
                     "--set", "candidates=[X]", "--set", "procedure=fst", "--set", "order=[X]"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "X against Y: this claim's statement was tested before with the " \
        "sides exchanged (Y against X, superiority at margin 0.02" in err and "a selection cannot continue" in err


def test_a_rerun_starts_its_fixed_sequence_where_its_claims_first_selection_started(tmp_path):
    """The quickstart rerun with another seed: its own judge-only pilot would start the sequence elsewhere, which
    would be another family of claims (refused). It starts where the first selection of its claims started instead,
    continues their tests, and its certificate says so (pilot.pinned_by, the note, the statement)."""
    from certsel.config import load_config
    from certsel.orchestrator.outputs.certificate import certificate
    from certsel.policies.pilot import run_pilot

    def cfg(seed):
        return load_config("examples/quantization.yaml", [
            f"seed={seed}", "scheduling.start=pilot", "scheduling.pilot_items=8", "scheduling.pilot_check=0",
            "budget.n=100", f"state.store={tmp_path / 'labels.db'}", f"state.dir={tmp_path / 'jobs'}"])

    first = cfg(0)
    data = load_job_data(first)
    sch = first.scheduling

    def start(seed):
        return run_pilot(data.table.judge, data.policy_config(first).alpha, sch.pilot_items, sch.pilot_margin, seed,
                         human=data.table.human, check=0).start

    other = next(s for s in range(1, 200) if start(s) != start(0))
    (tmp_path / "jobs" / "first").mkdir(parents=True)
    res = run_job(first, data, LocalRuntime(), collect_labels=False, job_dir=tmp_path / "jobs" / "first")
    assert res.data.pilot.start == data.names[start(0)] and res.data.pilot.pinned_by is None
    again = cfg(other)
    (tmp_path / "jobs" / "again").mkdir()
    rerun = run_job(again, load_job_data(again), LocalRuntime(), collect_labels=False,
                    job_dir=tmp_path / "jobs" / "again")
    p = rerun.data.pilot
    assert p.start == res.data.pilot.start and p.pinned_by == "first" and p.piloted == data.names[start(other)]
    assert all(r.claim is not None for r in rerun.records if r.t > 0)  # each tested claim continued
    cert = certificate(rerun)
    assert cert.pilot.pinned_by == "first" and "where the first selection of its claims started (job first)" in \
        cert.pilot.note


def test_a_refusal_names_the_claim_in_the_users_units_and_the_way_out(tmp_path):
    """A recovery claim tested before with another bet: the one-line refusal states the claim as the user wrote it
    (recovery >= 0.95, not the risk test's alpha 0.512821) and both ways on (set the test as then, or a store of its
    own for another analysis)."""
    from certsel.errors import InputError

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    from reruns import boundary_tables, job_for

    boundary_tables(tmp_path / "r.parquet", np.random.default_rng(0), "recovery", 300)
    first = gate_config({**job_for("recovery", tmp_path / "r.parquet", 0.1), "budget": {"n": 60}}, labels=tmp_path / "l.db")
    _run(first)
    other = gate_config({**job_for("recovery", tmp_path / "r.parquet", 0.1), "budget": {"n": 60},
                         "policy": {"kind": "r-eval", "betting": "wsr"}}, labels=tmp_path / "l.db")
    with pytest.raises(InputError) as err:
        JobPlan(other, load_job_data(other), None)
    line = str(err.value)
    assert "\n" not in line and "c0: its claim (recovery >= 0.95 on these labels) was tested before" in line
    assert "0.5128" not in line and "set them as then; or, as another analysis of these claims, test them in a " \
        "store of their own (--set state.store=PATH)" in line
