"""The engine's one loop (orchestrator.engine.driver.run_rounds), with rounds defined here.

The loop owns resume, checkpoints, the tracker's and the progress hooks; a ``Rounds``
object only decides. A counting ``Rounds`` from this file shows the contract: rounds run
until ``advance`` says None, the tracker sees what each round moved, a checkpoint is
written every ``every`` rounds with the rounds' own state, and a second run of the same
job starts from that checkpoint (records, round number and state) instead of round 0.
"""

import numpy as np
import pytest

from certsel.orchestrator.engine.driver import run_rounds
from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, Status
from certsel.orchestrator.engine.state import CHECKPOINT


class Counting:
    """Each round gives every open candidate one label; a candidate stops at ``stop_at``."""

    kind = "counting-test"

    def __init__(self, records, stop_at, crash_at=None):
        self.records, self.stop_at, self.crash_at = records, stop_at, crash_at
        self.labels_seen = np.zeros(len(records), dtype=np.int64)  # the rounds' own state
        self.restored_from = None

    def restore(self, saved):
        self.labels_seen = np.asarray(saved["labels_seen"], dtype=np.int64)
        self.restored_from = int(saved["round"])
        return Resume(self.restored_from, steps_from_snapshots=0, steps_replayed=0)

    def state(self):
        return {"labels_seen": self.labels_seen.copy()}

    def advance(self):
        open_ = [r for r in self.records if not r.finished]
        if not open_:
            return None
        if self.crash_at is not None and int(self.labels_seen.sum()) >= self.crash_at:
            raise RuntimeError("driver crashed")
        for r in open_:
            r.t = r.n_human = r.t + 1
            self.labels_seen[r.index] += 1
            r.status = Status.RUNNING
            r.rounds.append(r.round_row())
            if r.t >= self.stop_at[r.index]:
                r.end(Status.NOT_CERTIFIED, "budget spent")
        return open_

    def result(self, rounds):
        return JobResult(None, None, self.records, [], None, "test", {"human": int(self.labels_seen.sum())}, {},
                         rounds)


class Tracker:
    def __init__(self):
        self.moved = []

    def on_round(self, records):
        self.moved.append([r.name for r in records])


def records():
    return [CandidateRecord(f"c{k}", k, None) for k in range(3)]


def test_the_loop_runs_the_rounds_to_the_end_and_calls_its_hooks():
    recs = records()
    tracker, seen = Tracker(), []
    res = run_rounds(Counting(recs, [2, 3, 5]), recs, tracker=tracker,
                     progress=lambda rs, n: seen.append((n, sum(r.t for r in rs))))
    assert res.rounds == 5 and res.spent == {"human": 10} and res.resume is None and res.seconds > 0
    assert tracker.moved == [["c0", "c1", "c2"]] * 2 + [["c1", "c2"], ["c2"], ["c2"]]
    assert seen == [(1, 3), (2, 6), (3, 8), (4, 9), (5, 10)]
    assert [r.t for r in recs] == [2, 3, 5]


@pytest.mark.parametrize("every", [1, 2, 3])
def test_a_rerun_resumes_from_the_last_checkpoint(tmp_path, every):
    recs = records()
    with pytest.raises(RuntimeError, match="driver crashed"):  # dies in its fifth round
        run_rounds(Counting(recs, [2, 3, 6], crash_at=9), recs, job_dir=tmp_path, every=every)
    assert (tmp_path / CHECKPOINT).is_file()
    last = 4 - 4 % every  # rounds completed before the crash, down to the last checkpoint
    recs = records()
    rounds, tracker = Counting(recs, [2, 3, 6]), Tracker()
    res = run_rounds(rounds, recs, job_dir=tmp_path, every=every, tracker=tracker)
    assert rounds.restored_from == last and res.resume == Resume(last)
    assert res.rounds == 6 and [r.t for r in recs] == [2, 3, 6]  # the same end as a run without a crash
    assert rounds.labels_seen.tolist() == [2, 3, 6]  # the rounds' own state came back
    assert tracker.moved[0] == ["c0", "c1", "c2"]  # the tracker first gets the restored records


def test_a_checkpoint_of_another_kind_of_rounds_is_not_resumed(tmp_path):
    recs = records()
    run_rounds(Counting(recs, [1, 1, 1]), recs, job_dir=tmp_path)

    class Other(Counting):
        kind = "other-test"

    recs = records()
    rounds = Other(recs, [1, 1, 1])
    res = run_rounds(rounds, recs, job_dir=tmp_path)
    assert rounds.restored_from is None and res.resume is None and res.rounds == 1
