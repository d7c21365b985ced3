"""Policy snapshots and driver checkpoints: a job rebuilt from snapshot + log is the job
that never stopped (testing, Seq, Cer-Eval, pairwise), on the bundled real data."""

import copy
import dataclasses
import sqlite3

import numpy as np
import pytest
from certsel.orchestrator.engine.driver import (
    JobPlan,
    LocalRuntime,
    RayRuntime,
    run_job,
)
from certsel.orchestrator.engine.pilot import start_from_pilot
from certsel.orchestrator.engine.state import CHECKPOINT, read_checkpoint
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.workers.actor import CandidateHost
from certsel.workers.labellog import KEEP_SNAPSHOTS, LabelLog, log_path, pack, unpack
from certsel.workers.replay import DATA_DIR

from certsel.config import parse_config

# tiers by test: the in-process snapshot round trips on small jobs are in the fast tier; whole
# jobs run twice (about 10 s each) and Ray are integration

ALPACA = {"path": str(DATA_DIR / "alpacaeval_preferences.parquet"), "candidate": "model", "human": "loss",
          "features": str(DATA_DIR / "alpacaeval_embeddings.parquet")}
FOUR = ["FuseChat-Llama-3.2-1B-Instruct", "claude", "gpt4_gamed", "vicuna-13b"]


def job_cfg(kind: str, every: int, **over):
    if kind in ("r-eval", "r-autoeval+"):
        raw = {"data": {"path": str(DATA_DIR / "triviaqa_llama31_8b_mx.parquet"), "judge": "loss_judge_med",
                        "order": "rank"},
               "policy": {"kind": kind, "betting": "wsr"}, "objective": {"column": "avg_bitwidth"},
               "budget": {"n": 200, "r": 3, "batch": 10}, "seed": 3}
    else:
        raw = {"data": ALPACA, "policy": {"kind": kind}, "alpha": 0.85, "candidates": FOUR,
               "budget": {"n": 400, "batch": 20}, "seed": 4}
    raw.update(over)
    if raw.get("procedure", "fst") == "fst" and "order" not in raw["data"]:
        raw["order"] = FOUR
    raw["state"] = {"snapshot_every": every}
    raw["tracking"] = {"intervals": "final"}
    return parse_config(raw)


def same_states(a, b):
    """Two state dicts are equal, arrays bit for bit."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            same_states(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same_states(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


def test_pack_round_trips_exactly_and_never_pickles():
    state = {"x": 0.1 + 0.2, "big": 2**127 + 1, "nan": float("nan"), "inf": -float("inf"), "none": None,
             "tup": (1, (2.5, "a")), "lst": [np.arange(3), {"k": np.eye(2, dtype=np.float32)}],
             "rng": np.random.default_rng(5).bit_generator.state, "flag": True, "scalar": np.float64(1 / 3)}
    back = unpack(pack(state))
    expected = copy.deepcopy(state)
    expected["scalar"] = float(state["scalar"])  # numpy scalars are stored as Python numbers
    same_states(back, expected)
    gen = np.random.default_rng()
    gen.bit_generator.state = back["rng"]  # an exact generator state
    assert gen.random() == np.random.default_rng(5).random()
    for bad in ({"o": np.array([{}], dtype=object)}, {1: "non-string key"}, {"f": lambda: 0}, {"s": {1, 2}}):
        with pytest.raises(TypeError, match="snapshot"):
            pack(bad)


def _host(cfg, job_dir):
    data = load_job_data(cfg)
    plan = JobPlan(cfg, data, str(job_dir))
    host = CandidateHost()
    host.load(plan.specs, plan.arrays, plan.rows)
    return host, data.names


@pytest.mark.parametrize("kind", ["r-autoeval+", "seq", "cer-eval"])
def test_snapshot_restore_is_the_state_before_the_crash(tmp_path, kind):
    cfg = job_cfg(kind, every=3, delta=1e-6)  # no candidate decides within these steps
    a, names = _host(cfg, tmp_path)
    names = names[:3]
    batches = [10, 7, 10, 3, 10, 10, 4]  # uneven steps: Cer-Eval's choices depend on them
    for b in batches:
        a.step(names, b)
    history = {n: list(a.history[n]) for n in names}
    assert all(h == batches for h in history.values())
    at_crash = {n: a.candidates[n].state_dict() for n in names}
    requests = {n: a.candidates[n].source.requests for n in names}
    later = [a.step(names, b) for b in (10, 10, 5)]  # what the uninterrupted candidates do next
    for n in names:
        a.candidates[n].source.log.close()

    b_host, _ = _host(cfg, tmp_path)  # a restarted actor: same job, empty process state
    snaps = b_host.restore(history)
    assert [s.restored_steps for s in snaps] == [6, 6, 6]  # the newest snapshot, then 1 step replayed
    for n in names:
        same_states(at_crash[n], b_host.candidates[n].state_dict())
        assert b_host.candidates[n].source.requests == requests[n]
    # it goes on as the uninterrupted candidates did (the labels come from the log)
    for b, want in zip((10, 10, 5), later, strict=True):
        for x, y in zip(want, b_host.step(names, b), strict=True):
            x, y = dataclasses.asdict(x), dataclasses.asdict(y)
            np.testing.assert_array_equal(x.pop("path") if x["path"] is not None else [],
                                          y.pop("path") if y["path"] is not None else [])
            same_states(x, y)

    # only the newest snapshots are kept; a history that is not the snapshot's is replayed
    db = log_path(tmp_path, names[0])
    with sqlite3.connect(db) as con:
        assert [r[0] for r in con.execute("select steps from snapshots order by steps")] == [6, 9][-KEEP_SNAPSHOTS:]
    log = LabelLog(db, names[0])
    assert log.latest_snapshot(batches + [10, 10])[0] == 9
    assert log.latest_snapshot(batches[:8])[0] == 6  # a driver checkpoint one behind
    assert log.latest_snapshot(batches[:5]) is None  # older than both kept snapshots: replay from start
    assert log.latest_snapshot([10, 7, 10, 3, 10, 9, 4, 10, 10]) is None  # another history
    c = _host(cfg, tmp_path)[0]
    assert c.restore({names[0]: batches[:5]})[0].restored_steps == 0
    same_states(c.candidates[names[0]].state_dict(), _replayed(cfg, names[0], batches[:5], tmp_path / "fresh"))


def _replayed(cfg, name, batches, job_dir):
    host, _ = _host(cfg, job_dir)
    for b in batches:
        host.step([name], b)
    return host.candidates[name].state_dict()


def test_restore_sent_twice_is_still_exact(tmp_path):
    """A retried restore call (its host was lost mid-restore) rebuilds from scratch again."""
    cfg = job_cfg("seq", every=100)  # no snapshot: the whole history is replayed
    a, names = _host(cfg, tmp_path)
    for b in (20, 20, 20):
        a.step(names[:2], b)
    b_host, _ = _host(cfg, tmp_path)
    hist = {n: [20, 20, 20] for n in names[:2]}
    first = b_host.restore(hist)
    second = b_host.restore(hist)
    assert [s.t for s in first] == [s.t for s in second] == [60, 60]
    for n in names[:2]:
        same_states(a.candidates[n].state_dict(), b_host.candidates[n].state_dict())


class Crash(Exception):
    pass


def crash_at(round_):
    def progress(records, rounds):
        if rounds == round_:
            raise Crash
    return progress


def assert_same_job(a, b):
    assert a.certified == b.certified and a.selected == b.selected and a.rounds == b.rounds
    assert a.spent == b.spent
    for x, y in zip(a.records, b.records, strict=True):
        assert (x.name, x.status, x.reason, x.t, x.n_human, x.n_judge, x.requests, x.decision) == \
               (y.name, y.status, y.reason, y.t, y.n_human, y.n_judge, y.requests, y.decision)
        assert x.max_log_e == y.max_log_e and x.path == y.path and x.rounds == y.rounds
        assert x.ci == y.ci
    if a.ranking is not None:
        assert a.ranking == b.ranking
    for name, log in a.labels.items():
        other = b.labels[name]
        np.testing.assert_array_equal(log.item, other.item)
        np.testing.assert_array_equal(log.loss, other.loss)
        assert log.role.tolist() == other.role.tolist()
        pairs = list(zip(other.item.tolist(), other.role.tolist(), strict=True))
        assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize("kind,procedure,crash", [
    pytest.param("r-autoeval+", "fst", 9, marks=pytest.mark.integration),
    pytest.param("r-autoeval+", "holm", 7, marks=pytest.mark.integration),
    ("r-eval", "bonferroni", 5), ("cer-eval", "fst", 5), ("seq", "fst", 4), ("cer-eval", "pairwise", 5),
])
def test_driver_crash_then_resume_from_checkpoint(tmp_path, kind, procedure, crash):
    """The driver dies after round ``crash`` (checkpoints every 2 rounds); the rerun starts
    from the last checkpoint and snapshots and ends with the uninterrupted job's certificate,
    e-value paths, label counts and label log."""
    cfg = job_cfg(kind, every=2, procedure=procedure)
    data = load_job_data(cfg)
    ref = run_job(cfg, data, LocalRuntime(2), n_hosts=2, job_dir=tmp_path / "ref")
    assert ref.resume is None and ref.rounds > crash

    job_dir = tmp_path / "job"
    with pytest.raises(Crash):
        run_job(cfg, data, LocalRuntime(2), n_hosts=2, job_dir=job_dir, progress=crash_at(crash))
    # the configs the job tested: a fixed sequence with a judge starts from its pilot (the same start
    # on the rerun, so the rerun resumes it)
    tested = start_from_pilot(cfg, data).names
    ckpt = read_checkpoint(job_dir, "pairwise" if procedure == "pairwise" else "select", tested)
    assert ckpt["round"] == crash - crash % 2
    res = run_job(cfg, data, LocalRuntime(3), n_hosts=3, job_dir=job_dir)  # another packing, too
    assert res.resume.from_round == crash - crash % 2
    if procedure != "pairwise":
        assert res.resume.steps_from_snapshots > 0
    assert_same_job(ref, res)


@pytest.mark.integration
def test_damaged_checkpoint_falls_back_to_a_full_replay(tmp_path, caplog):
    cfg = job_cfg("r-autoeval+", every=2, procedure="bonferroni")
    data = load_job_data(cfg)
    ref = run_job(cfg, data, LocalRuntime(1), n_hosts=1)
    with pytest.raises(Crash):
        run_job(cfg, data, LocalRuntime(1), n_hosts=1, job_dir=tmp_path, progress=crash_at(5))
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    res = run_job(cfg, data, LocalRuntime(1), n_hosts=1, job_dir=tmp_path)
    assert res.resume is None and "ignoring the driver checkpoint" in caplog.text
    ref.labels = res.labels  # the reference ran without a log; compare everything else
    assert_same_job(ref, res)


@pytest.mark.integration
def test_resume_through_ray_from_snapshots(ray_session, tmp_path):
    cfg = job_cfg("cer-eval", every=3, procedure="fst")
    data = load_job_data(cfg)
    rt = RayRuntime()
    try:
        ref = run_job(cfg, data, rt, job_dir=tmp_path / "ref")
        with pytest.raises(Crash):
            run_job(cfg, data, rt, job_dir=tmp_path / "job", progress=crash_at(7))
        res = run_job(cfg, data, rt, job_dir=tmp_path / "job")
    finally:
        rt.close()
    assert res.resume.from_round == 6 and res.resume.steps_from_snapshots > 0
    assert_same_job(ref, res)


def test_an_unreadable_snapshot_falls_back_to_an_older_one_or_a_replay(tmp_path, caplog):
    cfg = job_cfg("seq", every=2)
    a, names = _host(cfg, tmp_path)
    for b in (20, 20, 20, 20):
        a.step(names[:1], b)
    want = a.candidates[names[0]].state_dict()
    a.candidates[names[0]].source.log.close()
    with sqlite3.connect(log_path(tmp_path, names[0])) as con:
        con.execute("update snapshots set state = x'00' where steps = 4")
    b_host, _ = _host(cfg, tmp_path)
    assert b_host.restore({names[0]: [20, 20, 20, 20]})[0].restored_steps == 2
    same_states(want, b_host.candidates[names[0]].state_dict())
    assert "ignoring the snapshot at step 4" in caplog.text
