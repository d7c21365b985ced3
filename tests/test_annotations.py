"""People's answers as losses (workers/annotations.py): the scale, refusals, the labelling
config certsel writes and reads, and agreement against independent computations."""

import itertools

import numpy as np
import pytest
from certsel.workers.annotations import AnswerScale, Refusal, agreement, control_of, data_keys, labelling_config
from sklearn.metrics import cohen_kappa_score

CHOICES = AnswerScale("verdict", "choices", {"Correct": 0.0, "Partly": 0.5, "Wrong": 1.0})


def choice(*labels, name="verdict"):
    return [{"from_name": name, "to_name": "answer", "type": "choices", "value": {"choices": list(labels)}}]


def test_choices_and_stars_map_to_their_declared_losses():
    assert CHOICES.loss(choice("Partly")) == 0.5 and CHOICES.loss(choice("Wrong")) == 1.0
    stars = AnswerScale.rating("score", 5)
    got = [stars.loss([{"from_name": "score", "type": "rating", "value": {"rating": r}}]) for r in range(1, 6)]
    assert got == [1.0, 0.75, 0.5, 0.25, 0.0]


@pytest.mark.parametrize("result, why", [
    (choice("Maybe"), "'Maybe' is not one of the declared answers"),
    (choice("Correct", "Wrong"), "needs exactly one choice"),
    (choice("Correct", name="other"), "no answer for 'verdict'"),
    ([], "no answer for 'verdict'"),
    (choice("Correct") + choice("Wrong"), "2 answers for 'verdict'"),
])
def test_an_answer_outside_the_scale_is_refused_never_a_loss(result, why):
    with pytest.raises(Refusal, match=why):
        CHOICES.loss(result)


def test_a_rating_off_the_scale_is_refused():
    stars = AnswerScale.rating("score", 5)
    for bad in (11, 0, 2.5, "4", True):
        with pytest.raises(Refusal):
            stars.loss([{"from_name": "score", "type": "rating", "value": {"rating": bad}}])


def test_bad_scales_are_refused_when_declared():
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        AnswerScale("v", "choices", {"a": 0.0, "b": 2.0})
    with pytest.raises(ValueError, match="one per star"):
        AnswerScale.rating("v", 5, [0.0, 1.0])


def test_the_config_certsel_writes_is_one_it_can_read_and_hides_the_judge_unless_asked():
    xml = labelling_config(CHOICES, instructions="Is it right?", reference=True, judge=False)
    assert control_of(xml, CHOICES) is None
    assert data_keys(xml) == {"question", "answer", "reference"}
    assert "judge" not in xml
    assert "judge_loss" in data_keys(labelling_config(CHOICES, instructions="x", reference=False, judge=True))


@pytest.mark.parametrize("xml, why", [
    ('<View><Text name="q" value="$question"/></View>', "no Choices or Rating control"),
    ('<View><Text name="a" value="$answer"/><Choices name="grade" toName="a"><Choice value="Correct"/>'
     '<Choice value="Wrong"/></Choices></View>', "no Choices control named 'verdict'"),
    ('<View><Text name="a" value="$answer"/><Choices name="verdict" toName="a"><Choice value="Correct"/>'
     '<Choice value="Wrong"/></Choices></View>', "offers ['Correct', 'Wrong']"),
    ('<View><Text name="a"', "not XML"),
])
def test_an_existing_config_that_cannot_be_mapped_says_why(xml, why):
    assert why in control_of(xml, CHOICES)


def test_agreement_matches_independent_computations():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, 60)
    people = [np.where(rng.random(60) < p, rng.integers(0, 3, 60), truth) for p in (0.1, 0.2, 0.3)]
    labels = CHOICES.answers
    answers = [(i, w, labels[people[w][i]]) for w in range(3) for i in range(60) if not (w == 2 and i % 4 == 0)]
    got = agreement(answers, CHOICES)
    # Cohen's kappa of each pair on the items both answered, averaged
    kappas = []
    for a, b in itertools.combinations(range(3), 2):
        both = [i for i in range(60) if not ((a == 2 or b == 2) and i % 4 == 0)]
        kappas.append(cohen_kappa_score(people[a][both], people[b][both], labels=[0, 1, 2]))
    assert got["cohen_kappa"] == pytest.approx(np.mean(kappas))
    # Krippendorff's nominal alpha from its definition: 1 - D_o / D_e over pairable values
    units = [[people[w][i] for w in range(3) if not (w == 2 and i % 4 == 0)] for i in range(60)]
    pairs = [(x, y) for u in units for x, y in itertools.permutations(u, 2) for _ in [1] if len(u) > 1]
    weights = [1 / (len(u) - 1) for u in units for _ in itertools.permutations(u, 2) if len(u) > 1]
    n = sum(len(u) for u in units if len(u) > 1)
    d_o = sum(w * (x != y) for (x, y), w in zip(pairs, weights)) / n
    counts = np.bincount([v for u in units if len(u) > 1 for v in u], minlength=3)
    d_e = (n * n - (counts ** 2).sum()) / (n * (n - 1))
    assert got["krippendorff_alpha"] == pytest.approx(1 - d_o / d_e)
    assert got["items"] == 60 and got["annotators"] == 3


def test_agreement_needs_two_answers_on_an_item():
    assert agreement([(0, 1, "Correct"), (1, 1, "Wrong")], CHOICES) is None
    assert agreement([(0, 1, "Correct"), (0, 2, "Correct")], CHOICES)["krippendorff_alpha"] == 1.0
