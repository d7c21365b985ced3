"""certsel.inspect.CertifiedStopping inside the real inspect-ai: tasks whose samples have known
scores stop early with a certificate that certsel's own functions reproduce from the log."""

import json
import math

import numpy as np
import pytest
from inspect_ai.log import read_eval_log
from inspect_ai.scorer import match

from certsel import cli
from certsel.errors import InputError
from certsel.inspect import CertifiedSelection, CertifiedStopping
from certsel.inspect.schedule import ScheduleLedger
from certsel.inspect.scores import ScoreError, ScoreReader, score_value
from certsel.policies import log_evalue_paths
from certsel.policies.autoeval_bounds import decision_upper_bound
from certsel.policies.sampling import WithoutReplacement
from helpers.inspect_tasks import (Counted, judged_dataset, recorded_answer, recorded_judge, recorded_score, run,
                                   task)

pytestmark = pytest.mark.integration


def scores_in_schedule_order(log):
    """The scored samples' epoch means in the shuffled order the log records (inspect schedules
    samples in its dataset's order), as certsel's independent recomputation reads them."""
    values = {}
    for s in log.samples:
        v = s.scores["recorded_score"].value
        values.setdefault(s.id, []).append(float(v))
    return [float(np.mean(values[i])) for i in log.eval.dataset.sample_ids if i in values]


def recompute(log, cert: dict, delta: float):
    """certsel's functional test on the log's scores, in schedule order: (max log e, bound)."""
    n = cert["samples"]["scored"]
    losses = 1.0 - np.asarray(scores_in_schedule_order(log)[:n])
    N = cert["samples"]["total"]
    alpha = 1.0 - cert["at_least"]
    kw = dict(rhos=[0.0], betting="up", horizon=N, sampling=WithoutReplacement(N), observation="split")  # as a certsel job tests
    log_e = log_evalue_paths(losses, alpha=alpha, delta=delta, **kw)
    bound = 1.0 - decision_upper_bound(losses, level=delta, delta=delta, alpha=alpha, **kw)
    return float(log_e.max()), float(bound), losses


def test_a_task_stops_early_and_its_log_carries_the_certificate_certsel_recomputes(tmp_path, capsys):
    rng = np.random.default_rng(1)
    scores = (rng.random(300) < 0.92).astype(float)
    manager = CertifiedStopping(at_least=0.75, delta=0.05)
    [log] = run(task(scores, manager, delays=0.004 + 0.02 * (1 - scores)), tmp_path)
    assert log.status == "success"
    log = read_eval_log(log.location)  # what a reader of the file gets
    summary = log.results.early_stopping
    cert = summary.metadata
    assert summary.manager == "certsel"
    assert cert["certified"] and cert["status"] == "certified" and not cert["exact"]
    counts = cert["samples"]
    assert counts["scheduled"] < 150 and counts["skipped"] == 300 - counts["scheduled"]
    # every sample that never ran is in the log's early-stopping summary, and nothing else
    ran = {s.id for s in log.samples}
    stopped = {e.id for e in summary.early_stops}
    assert stopped == set(range(300)) - ran and len(summary.early_stops) == counts["skipped_runs"]
    assert all(e.reason.startswith("certified") for e in summary.early_stops)
    # the samples ran in the log's shuffled order: the first `scheduled` of it
    assert ran == set(log.eval.dataset.sample_ids[: counts["scheduled"]])
    # the certificate is certsel's own computation on the same scores in the same order
    max_log_e, bound, losses = recompute(log, cert, 0.05)
    assert cert["log_e_value"] == pytest.approx(max_log_e, abs=1e-9)
    assert cert["lower_bound"] == pytest.approx(bound, abs=1e-9) and bound >= 0.75
    assert max_log_e >= math.log(20)
    first = int(np.argmax(log_evalue_paths(losses, alpha=0.25, delta=0.05, rhos=[0.0], horizon=300,
                                           sampling=WithoutReplacement(300), observation="split") >= math.log(20))) + 1
    # the stop was decided when the first certifying sample reached the test (with any released with it)
    assert first <= counts["at_decision"] < first + 8
    assert counts["scored"] == counts["at_decision"] + counts["in_flight_at_stop"]
    assert cert["estimate"] == pytest.approx(1.0 - losses.mean())
    assert manager.certificate.words().startswith("certified: the mean score over the task's samples")
    # one certificate: the task is a certsel job (a selection of one), the log's record names it and
    # agrees with the published certificate `certsel show JOB_ID --format json` prints
    assert cert["job_id"] == manager.selection.job.job_id
    assert cli.main(["show", cert["job_id"], "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    [row] = shown["candidates"]
    assert shown["selected"] == "mockllm/model" and row["status"] == "certified" and row["certified"]
    assert row["log_e_value"] == pytest.approx(cert["log_e_value"], abs=1e-6)
    assert 1.0 - row["simultaneous_bound"] == pytest.approx(cert["lower_bound"], abs=1e-4)
    assert row["labels_human"] == counts["scored"] and shown["procedure"]["delta"] == 0.05


def test_a_weak_model_stops_for_futility_and_claims_nothing(tmp_path):
    rng = np.random.default_rng(2)
    scores = (rng.random(300) < 0.5).astype(float)
    manager = CertifiedStopping(at_least=0.75, delta=0.05, futility=0.05)
    [log] = run(task(scores, manager), tmp_path)
    cert = log.results.early_stopping.metadata
    assert not cert["certified"] and cert["status"] == "futile"
    assert cert["samples"]["scheduled"] < 100
    assert cert["lower_bound"] < 0.75
    assert cert["futility_log_e_value"] >= math.log(20)


def test_every_sample_scored_gives_the_exact_mean(tmp_path, capsys):
    # 40 samples with mean 0.8: no test certifies >= 0.78 at delta 0.001 before the end, but with
    # every sample scored the mean is known exactly (and 0.7 of 40 is not >= 0.78)
    good = np.r_[np.ones(32), np.zeros(8)]
    bad = np.r_[np.ones(28), np.zeros(12)]
    managers = [CertifiedStopping(at_least=0.78, delta=0.001, futility=None) for _ in range(2)]
    logs = run([task(good, managers[0], name="good"), task(bad, managers[1], name="bad")], tmp_path)
    a, b = (log.results.early_stopping.metadata for log in logs)
    assert a["exact"] and a["certified"] and a["lower_bound"] == pytest.approx(0.8) and a["samples"]["skipped"] == 0
    assert b["exact"] and not b["certified"] and b["lower_bound"] == pytest.approx(0.7)
    # the job's certificate says what decided: the exact mean, not the e-value below its threshold
    job = managers[0].selection.job
    [row] = json.loads((job.output_dir / "selection.json").read_text())["candidates"]
    assert row["exact"] and row["certified"] and row["e_value"] < row["threshold"]
    assert cli.main(["show", job.job_id]) == 0 and "exact mean" in capsys.readouterr().out


def test_epochs_are_combined_per_sample(tmp_path):
    rng = np.random.default_rng(3)
    per_epoch = (rng.random((200, 2)) < 0.93).astype(float)
    manager = CertifiedStopping(at_least=0.7, delta=0.05)
    [log] = run(task(per_epoch.tolist(), manager, epochs=2), tmp_path)
    cert = log.results.early_stopping.metadata
    assert cert["certified"] and cert["epochs"] == 2
    # inspect runs every first epoch before any second: the stop comes in the second pass
    assert cert["samples"]["scored"] >= 1
    max_log_e, _, losses = recompute(log, cert, 0.05)
    order = log.eval.dataset.sample_ids
    expect = 1.0 - per_epoch[order[: len(losses)]].mean(axis=1)
    np.testing.assert_allclose(losses, expect)
    assert cert["log_e_value"] == pytest.approx(max_log_e, abs=1e-9)
    assert "each sample's mean over 2 epochs" in cert["claim"]


def test_a_budget_caps_the_samples_run(tmp_path):
    scores = np.r_[np.ones(150), np.zeros(150)]  # mean 0.5: never certified at 0.6
    manager = CertifiedStopping(at_least=0.6, delta=0.05, budget=40, futility=None)
    [log] = run(task(scores, manager), tmp_path)
    cert = log.results.early_stopping.metadata
    assert cert["samples"]["scheduled"] == 40 and cert["samples"]["skipped"] == 260
    assert cert["status"] == "budget" and not cert["certified"]


def test_match_scores_go_through_inspects_value_to_float(tmp_path):
    scores = np.ones(120)
    manager = CertifiedStopping(at_least=0.5, delta=0.05, scorer="match")
    [log] = run(task(scores, manager, scorer_=match()), tmp_path)
    cert = log.results.early_stopping.metadata
    assert cert["certified"] and cert["scorer"] == "scorer 'match'"


def judged_task(manager, human, judge, counted=None):
    from inspect_ai import Task

    counted = counted or Counted(recorded_score())
    return Task(dataset=judged_dataset(human, judge), solver=recorded_answer(), early_stopping=manager,
                scorer=[manager.gate(counted, name="recorded_score"), recorded_judge()])


def test_a_cheap_scorer_as_judge_runs_the_expensive_one_only_where_a_label_is_needed(tmp_path):
    from certsel.policies import scheme_rhos

    rng = np.random.default_rng(5)
    human = (rng.random(600) < 0.9).astype(float)
    judge = np.where(rng.random(600) < 0.9, human, 1 - human)  # agrees on 90% of the samples
    manager = CertifiedStopping(at_least=0.75, delta=0.05, judge="recorded_judge", ratio=3)
    counted = Counted(recorded_score())
    [log] = run(judged_task(manager, human, judge, counted), tmp_path)
    assert log.status == "success", log.error
    cert = log.results.early_stopping.metadata
    assert cert["certified"] and cert["sampling"] == "iid" and cert["judge"]["ratio"] == 3
    order = log.eval.dataset.sample_ids[: cert["samples"]["scheduled"]]
    labelled = order[::4]  # one in every ratio + 1, by schedule position
    assert sorted(counted.ids) == sorted(labelled)  # the expensive scorer ran there and nowhere else
    marks = {s.id: (s.scores["recorded_score"].metadata or {}).get("certsel") for s in log.samples}
    assert all((marks[i] is None) == (k % 4 == 0) for k, i in enumerate(order))
    # certsel's own R-AutoEval+ on the same blocks, in schedule order
    b = cert["judge"]["labels"]
    rows = np.asarray(order[: 4 * b]).reshape(b, 4)
    h, jl, ju = human[rows[:, 0]], judge[rows[:, 0]], judge[rows[:, 1:]].reshape(-1)
    kw = dict(rhos=scheme_rhos("r-autoeval+"), horizon=150, observation="split")
    log_e = log_evalue_paths(1 - h, 1 - jl, 1 - ju, alpha=0.25, delta=0.05, **kw)
    assert cert["log_e_value"] == pytest.approx(float(log_e.max()), abs=1e-9)
    bound = 1 - decision_upper_bound(1 - h, 1 - jl, 1 - ju, level=0.05, delta=0.05, alpha=0.25,
                                     max_log_evalue=log_e.max(), **kw)
    assert cert["lower_bound"] == pytest.approx(float(bound), abs=1e-9) and bound >= 0.75
    assert cert["judge"]["judge_only"] == 3 * b and cert["judge"]["agreement"] == pytest.approx(np.mean(h == jl))
    metric = next(s for s in log.results.scores if s.name == "recorded_score").metrics["labelled_mean"]
    assert metric.value == pytest.approx(np.mean(human[labelled]))  # inspect's metric skips the unlabelled


def test_judge_mistakes_are_refused_before_any_sample_runs(tmp_path):
    ones = np.ones(40)
    plain = CertifiedStopping(at_least=0.5, judge="recorded_judge")
    same = CertifiedStopping(at_least=0.5, scorer="recorded_judge", judge="recorded_judge")
    logs = run([task(ones, plain, name="ungated", scorer_=[recorded_score(), recorded_judge()]),
                judged_task(same, ones, ones)], tmp_path)
    _refused(logs[0], "scorer 'recorded_score' would run on every sample: wrap it with this manager's gate()")
    _refused(logs[1], "the judge and the scored label are the same scorer 'recorded_judge'")
    with pytest.raises(InputError, match="judge-assisted testing is the i.i.d. test"):
        CertifiedStopping(at_least=0.5, judge="j", sampling="without-replacement")
    with pytest.raises(InputError, match="ratio must be a positive number"):
        CertifiedStopping(at_least=0.5, judge="j", ratio=0)


# -- bad input: one line each, before any sample runs -------------------------------------------


@pytest.mark.parametrize("kw, words", [
    (dict(at_least=1.0), "at_least must be a number strictly between 0 and 1"),
    (dict(at_least=0.0), "at_least must be a number strictly between 0 and 1"),
    (dict(alpha=1.5), "alpha must be a number strictly between 0 and 1"),
    (dict(at_least=0.5, alpha=0.5), "exactly one of at_least"),
    (dict(at_least=0.5, delta=0), "delta must be in (0, 1)"),
    (dict(at_least=0.5, betting="kelly"), "betting must be one of up, wsr, ons"),
    (dict(at_least=0.5, budget=0), "budget must be a positive number"),
    (dict(at_least=0.5, sampling="bootstrap"), "sampling must be one of"),
])
def test_bad_settings_are_refused_when_the_manager_is_made(kw, words):
    with pytest.raises(InputError) as err:
        CertifiedStopping(**kw)
    assert words in str(err.value) and "\n" not in str(err.value)


def _refused(log, words):
    assert log.status == "error"
    assert words in log.error.message and "\n" not in log.error.message.strip()


def test_setup_mistakes_fail_the_task_before_any_sample_runs(tmp_path):
    scores = np.ones(30)
    logs = run([
        task(scores, CertifiedStopping(at_least=0.5, scorer="accuracy"), name="unknown_scorer"),
        task(scores, CertifiedStopping(at_least=0.5), shuffle=None, name="unshuffled"),
        task(scores, CertifiedStopping(at_least=0.5, budget=31), name="budget"),
    ], tmp_path)
    _refused(logs[0], "unknown scorer 'accuracy'; the task's scorers are: recorded_score")
    _refused(logs[1], "the task's samples are not shuffled")
    _refused(logs[1], "sample_shuffle=True")
    _refused(logs[2], "budget 31 is more than the task's 30 samples")
    for log in logs:
        assert not log.samples  # nothing ran


def test_sample_logging_off_is_refused(tmp_path):
    [log] = run(task(np.ones(20), CertifiedStopping(at_least=0.5)), tmp_path, log_samples=False)
    _refused(log, "drop log_samples=False")


def test_a_score_that_is_not_a_number_stops_the_run_and_says_so(tmp_path):
    manager = CertifiedStopping(at_least=0.5)
    [log] = run(task(["maybe"] * 30, manager), tmp_path)
    _refused(log, "score 'maybe' is not a number or one of C/I/P/N")
    assert manager.run.stop.value == "refused"


def test_one_manager_cannot_serve_two_tasks_at_once(tmp_path):
    shared = CertifiedStopping(at_least=0.5)
    logs = run([task(np.ones(30), shared, name="a", delays=np.full(30, 0.01)),
                task(np.ones(30), shared, name="b")], tmp_path, max_tasks=2)
    errors = [log for log in logs if log.status == "error"]
    assert len(errors) == 1
    _refused(errors[0], "this CertifiedStopping is already running task")


def test_a_selection_refuses_candidates_of_different_sizes(tmp_path):
    sel = CertifiedSelection(["a", "b"], at_least=0.5, procedure="bonferroni")
    logs = run([task(np.ones(30), sel.member("a"), name="a"), task(np.ones(40), sel.member("b"), name="b")],
               tmp_path, max_tasks=1)
    _refused(logs[1], "candidate 'b' has 40 samples but 'a' has 30")


# -- the pieces, without inspect running ----------------------------------------------------------


@pytest.mark.unit
def test_the_ledger_releases_samples_in_schedule_order_not_completion_order():
    ledger = ScheduleLedger(["a", "b", "c", "d"], epochs=2)
    for i in "abcd":
        ledger.schedule(i)
    ledger.complete("c", 1, 1.0)
    ledger.complete("c", 2, 0.0)
    ledger.complete("b", 1, 1.0)
    assert ledger.release().size == 0  # a has not finished: nothing after it counts yet
    ledger.complete("a", 1, 1.0)
    ledger.complete("a", 2, 1.0)
    np.testing.assert_array_equal(ledger.release(), [1.0])  # b still lacks its second epoch
    ledger.complete("b", 2, 0.0)
    np.testing.assert_array_equal(ledger.release(), [0.5, 0.5])  # b, then c: epoch means
    assert ledger.pending == 1 and ledger.released == 3
    with pytest.raises(ValueError, match="not one of the task's samples"):
        ledger.schedule("z")


@pytest.mark.unit
@pytest.mark.parametrize("value, expect", [("C", 1.0), ("I", 0.0), ("P", 0.5), ("N", 0.0), (True, 1.0),
                                           ("yes", 1.0), ("0.25", 0.25), (0.75, 0.75), (1, 1.0)])
def test_scores_convert_like_inspect(value, expect):
    assert score_value(value, "sample 1") == expect


@pytest.mark.unit
@pytest.mark.parametrize("value, words", [("maybe", "is not a number"), ([1, 0], "is not a number"),
                                          ({"a": 1}, "is not a number"), (float("nan"), "is not a number"),
                                          (1.5, "outside [0, 1]"), ("-0.1", "outside [0, 1]")])
def test_scores_inspect_would_turn_into_zero_are_refused(value, words):
    with pytest.raises(ScoreError, match=words.replace("[", r"\[").replace("]", r"\]")):
        score_value(value, "sample 1")


@pytest.mark.unit
def test_a_dict_valued_scorer_needs_a_key():
    class Scorer:
        def __init__(self, name, metrics):
            self.name, self.metrics = name, metrics

    keyed = [Scorer("rubric", {"clarity": [], "accuracy": []})]
    with pytest.raises(ScoreError, match="gives a score per key .accuracy, clarity.; choose one with key="):
        ScoreReader().resolve(keyed)
    assert ScoreReader(key="accuracy").resolve(keyed) == ScoreReader("rubric", "accuracy")


def test_an_errored_sample_holds_the_test_at_its_place(tmp_path):
    # sample 5 of the shuffled order raises; with fail_on_error=False the task goes on, but no
    # sample after it reaches the test (its failure may be related to its score)
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.solver import solver

    data = MemoryDataset([Sample(input=f"q{i}", target=f"a{i}", id=i, metadata={"scores": 1.0}) for i in range(60)])
    data.shuffle(seed=0)
    broken = data[5].id

    @solver
    def flaky():
        async def solve(state, generate):
            if state.sample_id == broken:
                raise RuntimeError("the model server went away")
            from inspect_ai.model import ModelOutput
            state.output = ModelOutput.from_content("m", state.target.text)
            return state

        return solve

    manager = CertifiedStopping(at_least=0.5, delta=0.001, futility=None)
    [log] = run(Task(dataset=data, solver=flaky(), scorer=recorded_score(), early_stopping=manager), tmp_path,
                fail_on_error=False)
    cert = log.results.early_stopping.metadata
    assert cert["samples"]["scored"] == 5 and cert["samples"]["unfinished"] == cert["samples"]["scheduled"] - 5
    assert not cert["certified"]


def test_a_reducer_other_than_mean_is_refused(tmp_path):
    from inspect_ai import Epochs

    [log] = run(task(np.ones(20), CertifiedStopping(at_least=0.5), epochs=Epochs(2, "max")), tmp_path)
    _refused(log, "certsel certifies the mean over epochs, so use the default reducer 'mean'")


def test_samples_sorted_after_the_shuffle_are_refused(tmp_path):
    # inspect keeps the "shuffled" flag through dataset.sort(), whose default key is the input length
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample

    data = MemoryDataset([Sample(input="q" * (1 + i % 37), target="a", id=i, metadata={"scores": 1.0})
                          for i in range(100)])
    data.shuffle(seed=0)
    data.sort()
    [log] = run(Task(dataset=data, solver=recorded_answer(), scorer=recorded_score(),
                     early_stopping=CertifiedStopping(at_least=0.5)), tmp_path)
    _refused(log, "the task's samples are in order of input length (sorted after shuffling?)")


@pytest.mark.unit
def test_the_sort_check_spares_shuffled_and_equal_lengths():
    from types import SimpleNamespace

    from certsel.inspect.setup import sorted_by_length

    def samples(lengths):
        return [SimpleNamespace(input="x" * n) for n in lengths]

    rng = np.random.default_rng(0)
    assert sorted_by_length(samples(sorted(rng.integers(1, 50, 100))))
    assert not sorted_by_length(samples(rng.integers(1, 50, 100)))
    assert not sorted_by_length(samples([7] * 100))  # a stable sort keeps a shuffle of equal lengths
    assert not sorted_by_length(samples([3, 5, 8]))  # 1 in 6 random orders is sorted: no evidence


@pytest.mark.unit
def test_the_reason_follows_the_final_status_and_a_certified_bound_is_at_least_t():
    from certsel.inspect.schedule import ScheduleLedger
    from certsel.inspect.scores import ScoreReader
    from certsel.inspect.task import StopReason, _Run
    from certsel.policies import SequentialTest

    # a stop for certification, then every sample scored with the exact mean below T
    m = CertifiedStopping(at_least=0.7, futility=None, keep=False)
    m.own_selection("m")  # what its task's start makes: a selection of one
    ledger = ScheduleLedger(list(range(12)), 1)
    for i in range(12):
        ledger.schedule(i)
    ledger.released = 12
    test = SequentialTest(alpha=0.3, delta=0.05, horizon=12, rhos=[0.0], sampling=WithoutReplacement(12))
    m.run = _Run(task="t", model="m", size=12, epochs=1, reader=ScoreReader("s"), ledger=ledger,
                 test=test, futility=None, horizon=12, losses=[0.0] * 8 + [1.0] * 4, skipped=set())
    m.run.stop, m.run.why = StopReason.CERTIFIED, "mean score >= 0.7 certified after 5 samples"
    m.selection.feed(m.snapshot())  # its evidence, as its scores would have brought it to the selection's session
    cert = m.make_certificate()
    assert not cert.certified and cert.exact and cert.status == "not certified"
    assert cert.reason.startswith("every sample scored: the mean score is 0.666667, below 0.7")
    # an exact mean of exactly T: 1 - (1 - 0.1) is one ulp below 0.1, the certified bound is not
    m = CertifiedStopping(at_least=0.1, futility=None, keep=False)
    m.own_selection("m")
    m.run = _Run(task="t", model="m", size=10, epochs=1, reader=ScoreReader("s"), ledger=ledger,
                 test=SequentialTest(alpha=0.9, delta=0.05, horizon=10, rhos=[0.0], sampling=WithoutReplacement(10)), futility=None,
                 horizon=10, losses=[0.0] + [1.0] * 9, skipped=set())
    m.run.size, ledger.released = 10, 10
    m.selection.feed(m.snapshot())
    cert = m.make_certificate()
    assert cert.certified and cert.lower_bound >= 0.1
