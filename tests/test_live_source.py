"""The live label source against a real local HTTP server that answers additions.

The server (tests/helpers/servers.py) plays an OpenAI-compatible endpoint with served models: ``exact`` adds
correctly, ``weak`` is off by one when a*b is a multiple of 7, ``grader`` grades an answer
("Score: 10" / "Score: 0"); it answers prose instead of a score for a = 7 unless the request
carries a sampling seed, and always for a = 9.
"""

import numpy as np
import pytest
from helpers.policies import candidate
from certsel.workers.live import Item, LiveSource
from certsel.workers.openai_source import Endpoint, OpenAIClient, ResponseCache, SourceError
from helpers.servers import adder_server

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, HTTP servers or the CLI)


@pytest.fixture()
def adder():
    with adder_server() as (url, srv):
        yield url, srv


ITEMS = [Item(f"q{a}_{b}", f"{a}+{b}", (str(a + b),)) for a in range(1, 9) for b in range(10, 15)]


def make(url, tmp_path, model, **kw):
    return OpenAIClient(Endpoint(url, model, backoff=0.01, timeout=5), ResponseCache(tmp_path / f"{model}.db"))


def truth_weak(item):
    a, b = map(int, item.question.split("+"))
    return float((a * b) % 7 == 0)


@pytest.mark.integration
def test_human_and_judge_answer_losses(adder, tmp_path):
    url, srv = adder
    src = LiveSource(ITEMS, make(url, tmp_path, "weak"), "What is {question}? Reply with the number only.",
                     judge=make(url, tmp_path, "exact"), judge_mode="answer")
    idx = np.arange(len(ITEMS))
    human = src.human(idx)
    np.testing.assert_array_equal(human, [truth_weak(it) for it in ITEMS])
    # an exact judge answering the question itself gives the human loss back
    np.testing.assert_array_equal(src.judge(idx), human)
    assert (src.human_labels, src.judge_labels, src.requests) == (40, 40, 80)
    src.human(idx[:5])
    src.judge(idx[:5])
    assert src.requests == 80 and srv.calls == {"weak": 40, "exact": 40}  # asking again is free


@pytest.mark.integration
def test_losses_other_than_exact_match(adder, tmp_path):
    url, _ = adder
    src = LiveSource(ITEMS[:5], make(url, tmp_path, "chatty"), "What is {question}?", loss="numeric")
    np.testing.assert_array_equal(src.human(range(5)), np.zeros(5))  # "The answer is 11." -> 11
    strict = LiveSource(ITEMS[:5], make(url, tmp_path, "chatty"), "What is {question}?", loss="exact_match")
    np.testing.assert_array_equal(strict.human(range(5)), np.ones(5))


@pytest.mark.integration
def test_grading_judge_retries_unparsable_verdicts(adder, tmp_path):
    url, srv = adder
    items = [it for it in ITEMS if not it.id.startswith("q9")]
    src = LiveSource(items, make(url, tmp_path, "weak"), "{question}", judge=make(url, tmp_path, "grader"),
                     judge_mode="grade", judge_template="Question: {question}\nAnswer: {answer}\nGrade it.",
                     judge_constrained=False)
    idx = np.arange(len(items))
    np.testing.assert_array_equal(src.judge(idx), src.human(idx))  # a = 7 needed a second, seeded request
    assert srv.calls["grader"] == len(items) + 5


@pytest.mark.integration
def test_constrained_verdicts_need_no_second_request(adder, tmp_path):
    """With structured outputs (the default) the verdict is one of "Score: 0".."Score: 10":
    no unparsable verdict, no retry. A server that refuses them (HTTP 400) is asked again
    without, once, and its verdicts are parsed from then on."""
    url, srv = adder
    items = [it for it in ITEMS if not it.id.startswith("q9")]
    idx = np.arange(len(items))
    tmpl = "Question: {question}\nAnswer: {answer}\nGrade it."
    src = LiveSource(items, make(url, tmp_path, "weak"), "{question}", judge=make(url, tmp_path, "grader"),
                     judge_mode="grade", judge_template=tmpl)
    np.testing.assert_array_equal(src.judge(idx), src.human(idx))
    assert srv.calls["grader"] == len(items)
    srv.no_structured, srv.calls = True, {}
    old = LiveSource(items, make(url, tmp_path / "other", "weak"), "{question}",
                     judge=make(url, tmp_path / "other", "grader"), judge_mode="grade", judge_template=tmpl)
    np.testing.assert_array_equal(old.judge(idx), old.human(idx))
    assert srv.calls["grader"] == 2 * len(items) + 5 and not old._constrain  # refused, then parsed (and retried)


@pytest.mark.integration
def test_soft_judge_uses_token_probabilities(adder, tmp_path):
    """judge soft: a yes/no verdict whose loss is P(no) / (P(yes) + P(no)) from the first
    token's log-probabilities (the grader says yes with 0.8 when right, 0.1 when wrong);
    relative to a reference model the soft losses are differenced like any other."""
    url, _ = adder
    src = LiveSource(ITEMS, make(url, tmp_path, "weak"), "{question}", judge=make(url, tmp_path, "grader"),
                     judge_mode="grade", judge_soft=True)
    idx = np.arange(len(ITEMS))
    wrong = src.human(idx)
    np.testing.assert_allclose(src.judge(idx), np.where(wrong == 1.0, 0.9, 0.2))
    rel = LiveSource(ITEMS, make(url, tmp_path, "weak"), "{question}", judge=make(url, tmp_path, "grader"),
                     judge_mode="grade", judge_soft=True, reference=make(url, tmp_path, "exact"))
    np.testing.assert_allclose(rel.judge(idx), np.where(wrong == 1.0, 0.7, 0.0))
    np.testing.assert_array_equal(rel.human(idx), wrong)  # the exact reference is always right
    with pytest.raises(ValueError, match="needs judge_mode 'grade'"):
        LiveSource(ITEMS, make(url, tmp_path, "weak"), judge=make(url, tmp_path, "grader"), judge_soft=True)


@pytest.mark.integration
def test_unparsable_to_the_end_is_a_failed_request(adder, tmp_path):
    url, _ = adder
    items = [Item("q9_1", "9+1", ("10",)), Item("q2_2", "2+2", ("4",))]
    src = LiveSource(items, make(url, tmp_path, "exact"), "{question}", judge=make(url, tmp_path, "grader"),
                     judge_mode="grade", judge_template="Question: {question}\nAnswer: {answer}",
                     judge_constrained=False)
    with pytest.raises(SourceError, match="unparsable after 3 attempts for item\\(s\\) q9_1"):
        src.judge([0, 1])
    assert src.judge_labels == 0  # nothing counted for the failed batch


@pytest.mark.integration
def test_a_testing_candidate_runs_on_live_labels(adder, tmp_path):
    """The driver's candidate object consumes the live source as it consumes a replay one."""
    url, _ = adder
    order = np.random.default_rng(0).permutation(len(ITEMS))
    src = LiveSource(ITEMS, make(url, tmp_path, "weak"), "{question}", judge=make(url, tmp_path, "exact"))
    cand = candidate("weak", src, "r-autoeval+", alpha=0.5, delta=0.1, n=8, human_items=order[:8],
                     judge_items=order[8:32], r=3)
    snaps = [cand.step(4), cand.step(4)]
    assert [s.n_human for s in snaps] == [4, 8] and snaps[-1].n_judge == 32
    assert snaps[-1].exhausted and len(snaps[0].path) == 4


def test_bad_configuration():
    client = OpenAIClient(Endpoint("http://127.0.0.1:9", "m"))
    with pytest.raises(ValueError, match="must contain \\{question\\}"):
        LiveSource(ITEMS, client, "no placeholder")
    with pytest.raises(ValueError, match="judge_mode must be"):
        LiveSource(ITEMS, client, judge_mode="vote")
    with pytest.raises(ValueError, match="loss must be one of"):
        LiveSource(ITEMS, client, loss="bleu")
    with pytest.raises(ValueError, match="no judge"):
        LiveSource(ITEMS, client).judge([0])


@pytest.mark.parametrize("content, match", [
    ('{"id": 1, "question": "1+1", "answers": ["2"]}\nnot json\n', "line 2 is not valid JSON"),
    ('{"id": 1, "question": "1+1"}\n', "needs answers"),
    ('{"id": 1, "question": "1+1", "answers": "2"}\n', "needs answers"),
    ('{"question": "1+1", "answer": "2"}\n', "needs an id and a question"),
    ('{"id": 1, "question": "1+1", "answer": "2"}\n{"id": 1, "question": "2+2", "answer": "4"}\n', "duplicated item id"),
    ("\n", "no items"),
])
def test_bad_item_files(tmp_path, content, match):
    from certsel.orchestrator.inputs.jobdata import load_items

    path = tmp_path / "items.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_items(path)


def test_item_files_parquet_and_single_answer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from certsel.orchestrator.inputs.jobdata import load_items

    pq.write_table(pa.table({"id": [1, 2], "question": ["1+1", "2+2"], "answer": ["2", "4"]}), tmp_path / "i.parquet")
    assert load_items(tmp_path / "i.parquet") == (Item("1", "1+1", ("2",)), Item("2", "2+2", ("4",)))
