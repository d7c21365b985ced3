"""A pairwise live judge (``judge.mode: pairwise``): the judge compares the candidate's answer
with the reference model's, in both orders or one seeded order.

The stand-in judge (tests/helpers/servers.py, served model ``grader``) names the right
answer when exactly one is right and says "A" when both or neither are (a position bias
of 100% on ties; with log-probabilities P(A) = 0.7 there). Both orders cancel the bias:
the judge's loss equals the human preference loss on every item. One order per item does
not. Then whole jobs through Ray and MLflow: a "win rate against the reference" test and a
live ranking, and the config's one-line errors.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from certsel.config import load_config
from certsel.orchestrator.commands.job import execute
from certsel.workers.live import Item, LiveSource
from certsel.workers.losses import UnparsableVerdict, pairwise_verdict, preference_loss
from certsel.workers.openai_source import Endpoint, OpenAIClient, ResponseCache
from helpers.servers import adder_server

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, servers)

ITEMS = [Item(f"{a}+{b}", f"{a}+{b}", (str(a + b),)) for a in range(1, 41) for b in range(10, 20)]


def right(model: str, a: int, b: int) -> bool:
    return not ((model == "weak" and (a * b) % 7 == 0) or (model.startswith("off") and (a + b) % int(model[3:]) == 0))


def client(url, tmp_path, model):
    return OpenAIClient(Endpoint(url, model, backoff=0.01, timeout=5), ResponseCache(tmp_path / "cache.db"))


def source(url, tmp_path, cand, ref, **kw):
    return LiveSource(ITEMS, client(url, tmp_path, cand), "{question}=", judge=client(url, tmp_path, "grader"),
                      judge_mode="pairwise", reference=client(url, tmp_path, ref), **kw)


def truth(cand, ref):
    """Human preference losses: 1 where only the reference is right, 0 where only the
    candidate is, 1/2 where both or neither are."""
    ab = [tuple(map(int, it.id.split("+"))) for it in ITEMS]
    return preference_loss([1.0 - right(cand, a, b) for a, b in ab], [1.0 - right(ref, a, b) for a, b in ab])


def test_verdict_parsing():
    assert pairwise_verdict("A", True, False) == 0.0 and pairwise_verdict("A", False, False) == 1.0
    assert pairwise_verdict(" b.", True, False) == 1.0
    assert pairwise_verdict("I prefer [[B]] overall", False, False) == 0.0
    assert pairwise_verdict("[[C]]", True, False) == 0.5  # a tie
    for bad in ("both", "[[A]] or [[B]]", "", "Answer A is better"):
        with pytest.raises(UnparsableVerdict):
            pairwise_verdict(bad, True, False)
    soft = {"text": "A", "top": {"A": np.log(0.6), " a": np.log(0.1), "B": np.log(0.3)}}
    assert pairwise_verdict(soft, True, True) == pytest.approx(0.3) and pairwise_verdict(soft, False, True) == \
        pytest.approx(0.7)
    assert pairwise_verdict({"text": "B", "top": {"yes": 0.0}}, True, True) == 1.0  # no letter among the tokens


@pytest.mark.integration
@pytest.mark.parametrize("soft", [False, True])
def test_both_orders_cancel_a_position_bias(tmp_path, soft):
    with adder_server() as (url, srv):
        src = source(url, tmp_path, "weak", "off5", judge_soft=soft)
        idx = np.arange(len(ITEMS))
        want = truth("weak", "off5")
        np.testing.assert_array_equal(src.human(idx), want)
        got = src.judge(idx)
        if soft:  # P(lose) 0.1 / 0.9 when one is right, (0.3 + 0.7) / 2 on ties
            np.testing.assert_allclose(got, np.select([want == 1, want == 0], [0.9, 0.1], 0.5))
        else:
            np.testing.assert_array_equal(got, want)  # exactly the human preference, ties included
        # each item in both orders; where the two answers are the same text (here: every tie) the two
        # orders are one request, sent once
        assert srv.calls["grader"] == 2 * int((want != 0.5).sum()) + int((want == 0.5).sum())
        assert {0.0, 0.5, 1.0} <= set(want.tolist())


@pytest.mark.integration
def test_one_seeded_order_keeps_the_bias(tmp_path):
    """One order per item (by its id): the tie items' losses are 0 or 1 by position, not 1/2;
    the orders are the same in every run."""
    with adder_server() as (url, srv):
        src = source(url, tmp_path, "weak", "off5", judge_order="random")
        idx = np.arange(len(ITEMS))
        want, got = truth("weak", "off5"), src.judge(idx)
        ties = want == 0.5
        firsts = np.array([src.candidate_first(i)[0] for i in idx])
        np.testing.assert_array_equal(got[~ties], want[~ties])  # the judge is right where one answer is
        np.testing.assert_array_equal(got[ties], np.where(firsts[ties], 0.0, 1.0))  # "A" wins every tie
        assert 0.2 < firsts.mean() < 0.8 and srv.calls["grader"] == len(ITEMS)
        assert [source(url, tmp_path, "weak", "off5", judge_order="random").candidate_first(i)[0] for i in idx] == \
            firsts.tolist()


def write_job(tmp_path, url, **update):
    with open(tmp_path / "additions.jsonl", "w") as f:
        for it in ITEMS:
            f.write(json.dumps({"id": it.id, "question": it.question, "answers": list(it.references)}) + "\n")
    cands = [{"id": m, "base_url": url, "model": m, "template": "{question}=", "objective": k}
             for k, m in enumerate(["off3", "off10", "weak"])]
    job = {"name": "win-rate", "live": {
        "items": "additions.jsonl", "cache_dir": "cache", "candidates": cands,
        "reference": {"base_url": url, "model": "off2", "template": "{question}="},
        "judge": {"base_url": url, "model": "grader", "mode": "pairwise"}},
        "policy": {"kind": "r-autoeval+"}, "alpha": 0.4, "delta": 0.1, "procedure": "bonferroni",
        "objective": {"column": "rank"}, "budget": {"n": 150, "r": 1, "batch": 20}, "seed": 2,
        "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}}
    job.update(update)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path / "job.yaml"


@pytest.mark.integration
def test_win_rate_against_the_reference_job(ray_session, tmp_path):
    """R = P(the candidate loses to the reference), ties half, against off2 (50% wrong):
    off10 (10% wrong) loses with R = 0.30, weak (21%) 0.36, off3 (33%) 0.42. Certified at
    alpha = 0.4: off10 (weak's margin, 0.04, is too thin for 150 labels), never off3; the labels
    are the human preferences, and the judge's (both orders) equal them."""
    with adder_server() as (url, srv):
        res, _ = execute(load_config(write_job(tmp_path, url)))
    means = {r.name: truth(r.name, "off2").mean() for r in res.records}
    assert means["off10"] < means["weak"] < 0.4 < means["off3"]
    assert "off10" in res.certified and "off3" not in res.certified and res.selected == "off10"
    for name in ("off10", "weak", "off3"):
        labels = res.labels[name]
        want = truth(name, "off2")
        np.testing.assert_array_equal(labels.loss, want[labels.item])  # human and judge labels alike


@pytest.mark.integration
def test_live_ranking_by_preference_against_a_reference(ray_session, tmp_path):
    """Models ranked by how often they lose to a common reference (Seq pairs on the human
    preferences): the certified orders agree with the error rates (off10 10%, weak 21%,
    off3 33% wrong)."""
    with adder_server() as (url, srv):
        res, _ = execute(load_config(write_job(tmp_path, url, procedure="pairwise", policy={"kind": "seq"},
                                               objective=None, delta=0.05, budget={"n": 400, "batch": 100})))
    better = res.ranking.better
    assert "off3" in better["off10"] and not better["off3"]
    assert all(m not in better[w] for w, m in (("weak", "off10"), ("off3", "off10"), ("off3", "weak")))


@pytest.mark.integration
@pytest.mark.parametrize("change, message", [
    (lambda j: j["live"].pop("reference"), "judge.mode 'pairwise' compares each candidate's answer with the "
                                           "reference model's: set live.reference"),
    (lambda j: j["live"]["judge"].update(template="Which is better? {answer_a}"), "must contain {question}, {answer_b}"),
    (lambda j: j["live"]["judge"].update(mode="grade", order="random"), "judge.order applies to judge.mode 'pairwise'"),
    (lambda j: j["live"]["judge"].update(mode="answer", soft=True), "judge.soft needs judge.mode 'grade' or 'pairwise'"),
])
def test_pairwise_judge_config_errors_are_one_line(tmp_path, change, message):
    path = write_job(tmp_path, "http://127.0.0.1:9")
    raw = yaml.safe_load(path.read_text())
    change(raw)
    path.write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-m", "certsel.cli", "run", str(path), "--no-progress"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and message in err[0], proc.stderr
