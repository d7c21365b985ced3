"""inspect-ai's front ends keep one test per claim in the ledger (certsel/inspect/claims.py): a rerun of a task's
claim continues its test on samples it has not seen, a killed eval continues from what it wrote ahead, a selection
keeps its family, a ranking continues its pair tests, and store=None is a test of its own that says so. Real inspect
evals (mockllm), real SQLite ledgers; the e-values are checked against certsel's functional test on the order the
claim's test saw."""

import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from inspect_ai import Task

from certsel.inspect import CertifiedRanking, CertifiedSelection, CertifiedStopping
from certsel.policies import log_evalue_paths
from certsel.policies.sampling import WithoutReplacement
from helpers.inspect_tasks import dataset, recorded_answer, recorded_score, run, task

pytestmark = pytest.mark.integration

N = 300


@pytest.fixture(scope="module")
def scores():
    return (np.random.default_rng(11).random(N) < 0.86).astype(float)


def ledger_rows(home: pathlib.Path) -> list:
    with sqlite3.connect(home / "labels.db") as db:
        return db.execute("select claim, seq, base, t, outcome from claims order by claim, seq").fetchall()


def SKIPPED(log) -> set:
    return {s.id for s in log.results.early_stopping.early_stops if "earlier run" in s.reason}


def own_path(losses, horizon: int) -> np.ndarray:
    return log_evalue_paths(np.asarray(losses), alpha=0.2, delta=0.05, rhos=[0.0], horizon=horizon,
                            sampling=WithoutReplacement(N), observation="split", past_horizon=True)


def test_a_rerun_continues_its_claims_test_on_samples_it_has_not_seen(scores, tmp_path):
    home = pathlib.Path(os.environ["CERTSEL_HOME"])
    first = CertifiedStopping(at_least=0.8, delta=0.05, futility=None, budget=25)
    [log1] = run(task(scores, first, shuffle=1), tmp_path / "a")
    assert first.certificate.status == "budget" and not first.certificate.certified  # undecided at 25 samples
    ids1 = log1.eval.dataset.sample_ids[:25]

    second = CertifiedStopping(at_least=0.8, delta=0.05, futility=None)  # another shuffle, the whole budget
    [log2] = run(task(scores, second, shuffle=2), tmp_path / "b")
    cert = second.certificate
    assert cert.samples.earlier == 25 and cert.certified
    # the rerun skipped the 25 samples the test had seen and scored only new ones
    scored2 = {s.id for s in log2.samples if s.scores}
    assert scored2.isdisjoint(ids1) and SKIPPED(log2) == set(ids1)
    # its e-process is one test over both runs: certsel's functional test on the order it saw
    order2 = [i for i in log2.eval.dataset.sample_ids if i not in set(ids1)][: cert.samples.scored - 25]
    losses = 1.0 - scores[np.array([*ids1, *order2], dtype=int)]
    path = own_path(losses, horizon=25)  # the first run's horizon stays the test's
    assert cert.log_e_value == pytest.approx(float(path.max()), abs=1e-9)
    assert "25 by earlier runs of its claim" in cert.words()
    # the ledger holds one chain: the rerun continued the first run
    (claim, s1, b1, t1, o1), (claim2, s2, b2, t2, o2) = ledger_rows(home)
    assert claim == claim2 and (b1, t1, o1) == (0, 25, "undecided") and (b2, t2, o2) == (s1, cert.samples.scored, "pass")
    assert "a rerun continues it" in second.selection.result.statement

    # a third run of the decided claim runs no sample and states where its test stands
    third = CertifiedStopping(at_least=0.8, delta=0.05, futility=None)
    [log3] = run(task(scores, third, shuffle=3), tmp_path / "c")
    assert third.certificate.certified and third.certificate.log_e_value == cert.log_e_value
    assert not [s for s in log3.samples if s.scores]
    assert len(ledger_rows(home)) == 2  # it added nothing: no run recorded


def test_a_rerun_that_changes_the_test_is_refused_in_one_line(scores, tmp_path):
    run(task(scores, CertifiedStopping(at_least=0.8, delta=0.05, budget=20), shuffle=1), tmp_path / "a")
    for kw, words in [(dict(delta=0.1), "at delta 0.05; a rerun states it at that level or a stricter one"),
                      (dict(delta=0.05, betting="wsr"), "betting="),
                      (dict(delta=0.05, futility=None), "futility_level=0.05 (now None)")]:
        [log] = run(task(scores, CertifiedStopping(at_least=0.8, **kw), shuffle=2), tmp_path / "b")
        assert log.status == "error" and words in log.error.message and "\n" not in log.error.message.strip()
    # a stricter delta continues it; another target is another claim
    [log] = run(task(scores, CertifiedStopping(at_least=0.8, delta=0.01), shuffle=2), tmp_path / "c")
    assert log.status == "success" and log.results.early_stopping.metadata["samples"]["earlier"] == 20
    [log] = run(task(scores, CertifiedStopping(at_least=0.7, delta=0.1), shuffle=2), tmp_path / "d")
    assert log.status == "success" and log.results.early_stopping.metadata["samples"]["earlier"] == 0


KILLED = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
from certsel.inspect import CertifiedStopping
from helpers.inspect_tasks import run, task
scores = np.load({scores!r})
run(task(scores, CertifiedStopping(at_least=0.8, delta=0.05, futility=None), shuffle=1), {logs!r}, max_samples=1)
"""


def test_a_killed_eval_continues_from_what_it_wrote_ahead(scores, tmp_path):
    """kill -9 in the middle of an eval: the rerun continues the claim from the test written ahead, never from 0."""
    np.save(tmp_path / "scores.npy", scores)
    script = KILLED.format(tests=str(pathlib.Path(__file__).parent), scores=str(tmp_path / "scores.npy"),
                           logs=str(tmp_path / "killed"))
    env = {**os.environ, "CERTSEL_TEST_KILL_AFTER": "40"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 9, done.stderr[-2000:]
    home = pathlib.Path(os.environ["CERTSEL_HOME"])
    [(_, _, _, t_killed, held)] = ledger_rows(home)
    assert held == "running" and 0 < t_killed < 40  # written ahead while it ran

    again = CertifiedStopping(at_least=0.8, delta=0.05, futility=None)
    [log] = run(task(scores, again, shuffle=1), tmp_path / "again", max_samples=1)
    cert = again.certificate
    assert cert.samples.earlier == t_killed
    (_, s1, _, _, o1), (_, _, b2, _, _) = ledger_rows(home)
    assert o1 == "interrupted" and b2 == s1
    # the same shuffle: the killed run's order, continued; its e-process is the uninterrupted one's
    order = list(log.eval.dataset.sample_ids)
    path = own_path(1.0 - scores[np.array(order[: cert.samples.scored], dtype=int)], horizon=N)
    assert cert.log_e_value == pytest.approx(float(path.max()), abs=1e-9)
    assert not SKIPPED(log) - set(order[:t_killed])  # only what the test had seen was skipped


def selection(scores, names, procedure, tmp_path, **kw):
    sel = CertifiedSelection(names, at_least=0.8, delta=0.05, procedure=procedure, futility=None, **kw)
    per = [{m: float(scores[m][i]) for m in names} for i in range(N)]
    tasks = [task(per, sel.member(m), name=f"qa_{m}", model=f"mockllm/{m}") for m in names]
    return sel, run(tasks, tmp_path, max_tasks=len(names))


def test_a_selection_keeps_its_family_and_its_claims_continue(tmp_path):
    rng = np.random.default_rng(5)
    scores = {m: (rng.random(N) < a).astype(float) for m, a in {"m1": 0.9, "m2": 0.86, "m3": 0.5}.items()}
    sel, logs = selection(scores, ["m1", "m2", "m3"], "fst", tmp_path / "a", budget=15)
    assert all(log.status == "success" for log in logs)
    for names, procedure, words in [(["m2", "m1", "m3"], "fst", "differs. A rerun keeps its claims' family"),
                                    (["m1", "m2", "m3"], "bonferroni", "a fst selection of 3 candidates"),
                                    (["m1", "m2"], "fst", "a fst selection of 3 candidates")]:
        _, logs = selection(scores, names, procedure, tmp_path / "b")
        errors = [log.error.message for log in logs if log.status == "error"]
        assert errors and all(words in e and "store=None" in e for e in errors), (names, procedure, errors)
        # the others run no sample once one claim is refused
        assert all(not [s for s in log.samples if s.scores] for log in logs if log.status == "success")
    # the same family continues every claim's test
    sel, logs = selection(scores, ["m1", "m2", "m3"], "fst", tmp_path / "c")
    assert all(log.status == "success" for log in logs)
    assert all(c.certificate.samples.earlier >= 15 or c.certificate.samples.earlier == 0 for c in sel.result.candidates)
    assert sel.result.candidates[0].certificate.samples.earlier == 15
    # a claim gated on its own first cannot join a selection: its family would be chosen after its evidence
    run(task(scores["m1"], CertifiedStopping(at_least=0.8, budget=10), name="qa_solo", model="mockllm/m1"),
        tmp_path / "d")
    sel = CertifiedSelection(["m1", "m2"], at_least=0.8, procedure="holm")
    [log, _] = run([task(scores["m1"], sel.member("m1"), name="qa_solo", model="mockllm/m1"),
                    task(scores["m2"], sel.member("m2"), name="qa_solo2", model="mockllm/m2")], tmp_path / "e",
                   max_tasks=2)
    assert log.status == "error" and "was tested before on its own" in log.error.message


def test_store_none_is_a_test_of_its_own_and_says_so(scores, tmp_path, monkeypatch):
    home = tmp_path / "fresh-home"
    monkeypatch.setenv("CERTSEL_HOME", str(home))
    for _ in range(2):
        m = CertifiedStopping(at_least=0.8, delta=0.05, store=None, keep=False)
        run(task(scores, m, shuffle=1), tmp_path / "logs")
        assert m.certificate.samples.earlier == 0
        assert "this statement holds for this eval alone" in m.selection.result.statement
    assert not (home / "labels.db").exists()
    with pytest.raises(Exception, match="store must be a path"):
        CertifiedStopping(at_least=0.8, store=3)


def test_two_tasks_of_one_claim_at_once_are_refused(scores, tmp_path):
    logs = run([task(scores, CertifiedStopping(at_least=0.8), shuffle=k, name="twice") for k in (1, 2)],
               tmp_path, max_tasks=2)
    errors = [log.error.message for log in logs if log.status == "error"]
    assert len(errors) == 1 and "under test by another eval that has not ended" in errors[0]


def ranking(per, budget, shuffle, tmp_path, **kw):
    rk = CertifiedRanking(["a", "b", "c"], delta=0.05, budget=budget, **kw)
    t = Task(dataset=dataset(per, shuffle=shuffle), solver=recorded_answer(), scorer=recorded_score(),
             early_stopping=rk, name="rank")
    logs = run(t, tmp_path, model=["mockllm/a", "mockllm/b", "mockllm/c"])
    assert [log.status for log in logs] == ["success"] * 3
    return rk


def test_a_ranking_rerun_continues_its_pair_tests(tmp_path):
    rng = np.random.default_rng(3)
    sc = {m: (rng.random(400) < p).astype(float) for m, p in {"a": 0.9, "b": 0.8, "c": 0.6}.items()}
    per = [{m: float(sc[m][i]) for m in sc} for i in range(400)]
    first = ranking(per, 30, 0, tmp_path / "a")
    assert first.result.positions == 30
    again = ranking(per, None, 0, tmp_path / "b")
    # continued on the same shuffle: exactly the ranking one uninterrupted eval states, at its cost less what was run
    whole = ranking(per, None, 0, tmp_path / "c", store=None)
    assert again.result.ranking.rank_groups == whole.result.ranking.rank_groups
    assert again.result.positions == whole.result.positions
    np.testing.assert_array_equal(again.session.pairs.n_labeled, whole.session.pairs.n_labeled)
    assert sum(again.result.samples_run.values()) < sum(whole.result.samples_run.values())
    assert "a rerun continues it" in again.result.ledger and "eval alone" in whole.result.ledger


def test_the_protocol_driver_states_what_a_real_eval_states(scores, tmp_path):
    """benchmarks/inspect_reruns.py drives the managers without inspect's runner (helpers/inspect_protocol.py): one
    sample at a time, a driven eval and a real eval() of the same task on the same shuffle state the same test."""
    from helpers.inspect_protocol import drive_all, shuffled_samples, spec_like

    real = CertifiedStopping(at_least=0.8, delta=0.05, store=None, keep=False)
    [log] = run(task(scores, real, shuffle=4, name="real"), tmp_path, max_samples=1)
    driven = CertifiedStopping(at_least=0.8, delta=0.05, store=None, keep=False)
    drive_all([(driven, spec_like(log.eval, "driven"), shuffled_samples(N, 4), scores)], concurrency=1)
    a, b = real.certificate, driven.certificate
    assert (a.certified, a.status, a.samples.scored, a.samples.scheduled) == \
        (b.certified, b.status, b.samples.scored, b.samples.scheduled)
    assert a.log_e_value == b.log_e_value and a.lower_bound == b.lower_bound


def test_a_killed_eval_that_gave_its_test_nothing_continues_with_a_larger_budget(scores, tmp_path):
    """Killed after its first score, which finished ahead of the first sample in the order: nothing reached the test,
    but its started samples keep their places; a rerun with a larger budget than the first's horizon continues."""
    from helpers.inspect_protocol import drive, shuffled_samples, spec_like
    import asyncio

    [log] = run(task(scores, CertifiedStopping(at_least=0.8, store=None, keep=False), shuffle=0), tmp_path)
    spec = spec_like(log.eval, "killed-early")
    rng = np.random.default_rng(3)
    while True:  # a kill whose one score is not the order's first: the test saw nothing
        first = CertifiedStopping(at_least=0.8, delta=0.05, budget=20, store=tmp_path / f"l{rng.integers(1e9)}.db")
        asyncio.run(drive(first, spec, shuffled_samples(N, 1), scores, rng=rng, kill_after=1))
        if first.run.scored == 0:
            break
    again = CertifiedStopping(at_least=0.8, delta=0.05, budget=60, store=first.selection.store)
    asyncio.run(drive(again, spec, shuffled_samples(N, 2), scores, rng=rng))
    cert = again.certificate
    assert cert is not None and cert.samples.scored > 20  # past the first run's horizon of 20
    # the killed run's started samples came first, in their order
    assert again.run.tested_ids()[:10] == first.run.ledger.order[:10]
