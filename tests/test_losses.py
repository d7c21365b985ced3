"""Answer losses and judge-verdict parsing (live evaluation)."""

import string

import pytest
from certsel.workers.losses import (
    UnparsableVerdict,
    answer_loss,
    contains_answer_loss,
    exact_match_loss,
    last_number,
    normalize,
    normalized_exact_match_loss,
    numeric_match_loss,
    parse_binary,
    parse_score,
    token_f1_loss,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("text, want", [
    ("The  Eiffel Tower!", "eiffel tower"),
    ("An apple, a day.", "apple day"),
    ("ＡＢＣ", "abc"),  # NFKC folds full-width letters
    ("Paris — France", "paris france"),  # Unicode dash is punctuation
    ("", ""),
])
def test_normalize(text, want):
    assert normalize(text) == want


@pytest.mark.parametrize("fn, pred, refs, loss", [
    (exact_match_loss, " Paris ", "Paris", 0.0),
    (exact_match_loss, "paris", "Paris", 1.0),
    (normalized_exact_match_loss, "The Paris.", ["London", "paris"], 0.0),
    (normalized_exact_match_loss, "Paris, France", "Paris", 1.0),
    (contains_answer_loss, "It is Paris, of course", "paris", 0.0),
    (contains_answer_loss, "it is 14", "4", 1.0),  # whole words only
    (contains_answer_loss, "New York City", "york city", 0.0),
    (contains_answer_loss, "anything", "the", 1.0),  # empty after normalisation never matches
    (numeric_match_loss, "The sum is 1,234.", "1234", 0.0),
    (numeric_match_loss, "about 3.14159", "3.14159", 0.0),
    (numeric_match_loss, "-7 degrees", "−7", 1.0),  # U+2212 is not ASCII minus: no number 7 vs -7
    (numeric_match_loss, "no idea", "12", 1.0),
])
def test_answer_losses(fn, pred, refs, loss):
    assert fn(pred, refs) == loss


def _f1_by_hand(a: str, b: str) -> float:
    """Independent token F1: multiset intersection by removing matched tokens one by one."""
    x, y = normalize(a).split(), normalize(b).split()
    if not x or not y:
        return float(x == y)
    rest, common = list(y), 0
    for tok in x:
        if tok in rest:
            rest.remove(tok)
            common += 1
    if common == 0:
        return 0.0
    p, r = common / len(x), common / len(y)
    return 2 * p * r / (p + r)


words = st.lists(st.sampled_from(["a", "the", "cat", "dog", "sat", "on", "mat", "Cat", "mat."]), max_size=8)


@given(words, words)
def test_token_f1_matches_an_independent_computation(a, b):
    pa, pb = " ".join(a), " ".join(b)
    assert token_f1_loss(pa, pb) == pytest.approx(1 - _f1_by_hand(pa, pb))
    assert token_f1_loss(pa, pb) == pytest.approx(token_f1_loss(pb, pa))  # symmetric
    assert 0.0 <= token_f1_loss(pa, [pb, pa]) <= token_f1_loss(pa, pb)  # more references never hurt


@given(st.text(alphabet=string.printable, max_size=40), st.text(alphabet=string.printable, min_size=1, max_size=20))
def test_losses_are_zero_or_one_and_consistent(pred, ref):
    em, nem, con = exact_match_loss(pred, ref), normalized_exact_match_loss(pred, ref), contains_answer_loss(pred, ref)
    assert {em, nem, con} <= {0.0, 1.0}
    assert em >= nem  # exact match implies normalised exact match
    if normalize(ref):
        assert nem >= con  # normalised equality implies containment
    assert 0.0 <= token_f1_loss(pred, ref) <= 1.0


def test_bad_references_and_kinds():
    with pytest.raises(ValueError, match="references must be"):
        exact_match_loss("a", [])
    with pytest.raises(ValueError, match="contains no number"):
        numeric_match_loss("3", "three")
    with pytest.raises(ValueError, match="loss must be one of"):
        answer_loss("bleu", "a", "a")
    assert answer_loss("token_f1", "cat sat", "cat") == pytest.approx(1 - 2 / 3)
    assert last_number("x = 1.5e3") == 1500.0
    assert numeric_match_loss("12+30 = 42", "42") == 0.0  # the operands restated first do not count


@pytest.mark.parametrize("text, scale, want", [
    ("Good answer. Score: 8", (0, 10), 0.8),
    ("Score: 8/10", (0, 10), 0.8),
    ("Rating: 4 out of 5", (0, 10), 0.8),  # the stated denominator wins
    ("[[7]]", (0, 10), 0.7),
    ("Verdict: [[3]]", (1, 5), 0.5),
    ("I would give this 3/4.", (0, 10), 0.75),
    ("7", (0, 10), 0.7),
    ("0.9.", (0, 1), 0.9),
    ("score=1", (0, 1), 1.0),
])
def test_parse_score(text, scale, want):
    assert parse_score(text, scale) == pytest.approx(want)


@pytest.mark.parametrize("text, match", [
    ("A fine answer.", "no score found"),
    ("", "empty verdict"),
    ("Score: 11", "outside its scale"),
    ("[[3]] ... on reflection [[4]]", "2 different scores"),
    ("Score: 5/0", "non-positive denominator"),
    ("-1", "outside its scale"),
])
def test_unparsable_scores(text, match):
    with pytest.raises(UnparsableVerdict, match=match):
        parse_score(text, (0, 10))


def test_parse_binary():
    assert parse_binary("Yes, the answer is correct.") == 1.0
    assert parse_binary("Incorrect.") == 0.0
    assert parse_binary("FALSE") == 0.0
    for bad in ("yes and no", "maybe", ""):
        with pytest.raises(UnparsableVerdict):
            parse_binary(bad)


def test_relative_loss_and_soft_verdicts():
    import math

    import numpy as np
    from certsel.workers.losses import relative_loss, soft_verdict

    np.testing.assert_array_equal(relative_loss([1.0, 0.0, 0.5, 0.2], [0.0, 1.0, 0.25, 0.2]), [1.0, 0.0, 0.25, 0.0])
    top = {"Yes": math.log(0.3), " yes": math.log(0.3), "NO": math.log(0.2), "maybe": math.log(0.2)}
    assert soft_verdict({"text": "yes", "top": top}) == pytest.approx(0.2 / 0.8)
    assert soft_verdict({"text": "No.", "top": {}}) == 1.0 and soft_verdict({"text": "yes", "top": {}}) == 0.0
    assert soft_verdict({"text": "perhaps", "top": {"maybe": -0.1}}) is None


def test_every_loss_says_what_it_measures(tmp_path):
    from certsel.config import parse_config
    from certsel.orchestrator.inputs.sources import source_of
    from certsel.workers.losses import LOSS_WORDS, LOSSES

    assert set(LOSS_WORDS) == set(LOSSES)
    (tmp_path / "items.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    cfg = parse_config({"live": {"items": str(tmp_path / "items.jsonl"), "loss": "numeric",
                                 "candidates": [{"id": "a", "base_url": "http://127.0.0.1:1/v1", "model": "m",
                                                 "objective": 1}]},
                        "policy": {"kind": "r-eval"}, "procedure": "bonferroni", "objective": {"column": "size"}})
    assert source_of(cfg).loss_words(cfg) == LOSS_WORDS["numeric"]
