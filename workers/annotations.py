"""People's answers as losses: the answer scale, the labelling config certsel writes for it, the rule that makes one
loss of several annotators' answers, and their agreement.

* :class:`AnswerScale` maps one annotation to a loss in [0, 1]: ``Choices`` (each declared choice has its loss) or
  ``Rating`` (1..``scale`` stars, linear from 1 at one star to 0 at ``scale`` unless declared). An annotation certsel
  cannot map is a :class:`Refusal`: recorded with its reason, never a loss of 0 or 1. Label Studio's server validates
  nothing, so this is the only check there is.
* :func:`labelling_config` writes a job's project config; :func:`control_of` finds, in an existing config, the control
  the scale maps (or says why none fits).
* :data:`COMBINE`: how ``annotators_per_item`` losses make the item's loss (the certificate is about it; default: mean).
* :func:`agreement`: Krippendorff's alpha and mean pairwise Cohen's kappa over items with two or more answers.
"""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

# the item's loss from its annotators' losses (the certificate is about this loss)
COMBINE = {"mean": np.mean, "median": np.median, "max": np.max, "min": np.min}


class Refusal(ValueError):
    """An annotation that cannot be mapped to a loss (recorded, not used)."""


@dataclass(frozen=True)
class AnswerScale:
    """The control annotators answer with and the loss of each answer. ``control``: its name in the labelling config;
    ``kind``: ``"choices"`` or ``"rating"``; ``losses``: the loss of each choice (its label) or star (``"1"`` ..
    ``str(scale)``)."""

    control: str
    kind: str
    losses: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in ("choices", "rating"):
            raise ValueError(f"answer kind must be 'choices' or 'rating', got {self.kind!r}")
        if not self.losses:
            raise ValueError("the answer scale declares no answers")
        bad = {k: v for k, v in self.losses.items() if not (math.isfinite(float(v)) and 0.0 <= float(v) <= 1.0)}
        if bad:
            k, v = next(iter(bad.items()))
            raise ValueError(f"the loss of answer {k!r} must lie in [0, 1], got {v!r}")

    @classmethod
    def rating(cls, control: str, scale: int, losses: list[float] | None = None) -> AnswerScale:
        """1..``scale`` stars; loss (scale - stars) / (scale - 1) unless ``losses`` gives each star's."""
        if scale < 2:
            raise ValueError(f"a rating scale needs at least 2 stars, got {scale}")
        if losses is None:
            losses = [(scale - s) / (scale - 1) for s in range(1, scale + 1)]
        if len(losses) != scale:
            raise ValueError(f"rating losses: one per star, {scale} in all, got {len(losses)}")
        return cls(control, "rating", {str(s): float(x) for s, x in zip(range(1, scale + 1), losses, strict=True)})

    @property
    def answers(self) -> list[str]:
        return list(self.losses)

    @property
    def scale(self) -> int:
        return len(self.losses)

    def answer(self, result: list) -> str:
        """The answer an annotation's ``result`` gives for this control (a choice label, or the number of stars as a
        string); :class:`Refusal` when there is none certsel can map."""
        mine = [r for r in result or [] if isinstance(r, dict) and r.get("from_name") == self.control]
        if not mine:
            raise Refusal(f"no answer for {self.control!r}")
        if len(mine) > 1:
            raise Refusal(f"{len(mine)} answers for {self.control!r}")
        value = mine[0].get("value") or {}
        if self.kind == "choices":
            got = value.get("choices")
            if not isinstance(got, list) or len(got) != 1:
                raise Refusal(f"{self.control!r} needs exactly one choice, got {got!r}")
            ans = got[0]
        else:
            got = value.get("rating")
            if isinstance(got, bool) or not isinstance(got, (int, float)) or float(got) != int(got):
                raise Refusal(f"{self.control!r} needs a whole number of stars, got {got!r}")
            ans = str(int(got))
        if ans not in self.losses:
            raise Refusal(f"{ans!r} is not one of the declared answers of {self.control!r} "
                          f"({', '.join(self.answers)})")
        return ans

    def loss(self, result: list) -> float:
        return float(self.losses[self.answer(result)])


def labelling_config(scale: AnswerScale, *, instructions: str, reference: bool, judge: bool) -> str:
    """The labelling config of a project certsel creates: the question, the candidate's answer, the reference answer (if
    the items have one), the judge's loss (only if the job shows it) and the control of ``scale``. The candidate's name
    is never shown."""
    view = ET.Element("View")

    def text(title, name):
        ET.SubElement(view, "Header", value=title)
        ET.SubElement(view, "Text", name=name, value=f"${name}")

    text("Question", "question")
    text("Answer to grade", "answer")
    if reference:
        text("Reference answer", "reference")
    if judge:
        text("An automatic judge's loss (0: best, 1: worst)", "judge_loss")
    ET.SubElement(view, "Header", value=instructions)
    if scale.kind == "choices":
        ctl = ET.SubElement(view, "Choices", name=scale.control, toName="answer", choice="single-radio",
                            required="true")
        for label in scale.answers:
            ET.SubElement(ctl, "Choice", value=label)
    else:
        ET.SubElement(view, "Rating", name=scale.control, toName="answer", maxRating=str(scale.scale),
                      icon="star", size="medium", required="true")
    ET.indent(view)
    return ET.tostring(view, encoding="unicode")


def control_of(label_config: str, scale: AnswerScale) -> str | None:
    """Why the labelling config ``label_config`` cannot be answered on ``scale`` (None: it can). It needs a control
    named ``scale.control`` of the scale's kind whose answers are exactly the declared ones (Choices: the same labels;
    Rating: the same number of stars)."""
    try:
        root = ET.fromstring(label_config)
    except ET.ParseError as err:
        return f"its labelling config is not XML ({err})"
    controls = {el.get("name"): el for el in root.iter() if el.tag in ("Choices", "Rating") and el.get("name")}
    if not controls:
        return "its labelling config has no Choices or Rating control certsel can map to a loss"
    found = ", ".join(f"{el.tag} {n!r}" for n, el in controls.items())
    el = controls.get(scale.control)
    want = "Choices" if scale.kind == "choices" else "Rating"
    if el is None or el.tag != want:
        return (f"its labelling config has no {want} control named {scale.control!r} to map to a loss "
                f"(it has {found})")
    if scale.kind == "choices":
        labels = [c.get("value") for c in el.iter("Choice")]
        if sorted(labels) != sorted(scale.answers):
            return (f"its {want} control {scale.control!r} offers {labels}, the job declares losses for "
                    f"{scale.answers}")
    else:
        stars = int(el.get("maxRating", "5"))
        if stars != scale.scale:
            return f"its Rating control {scale.control!r} has {stars} stars, the job declares {scale.scale}"
    return None


def data_keys(label_config: str) -> set[str]:
    """The task data keys a labelling config shows (its ``$name`` values)."""
    root = ET.fromstring(label_config)
    return {v[1:] for el in root.iter() for v in el.attrib.values() if v.startswith("$") and len(v) > 1}


def agreement(answers: list[tuple[int, int, str]], scale: AnswerScale) -> dict | None:
    """Agreement of the annotators over the items two or more of them answered: ``answers`` is (item, annotator, answer)
    per valid annotation. Krippendorff's alpha (nominal for choices, ordinal for ratings; the ``krippendorff`` package)
    and the mean Cohen's kappa over annotator pairs with two or more items in common (scikit-learn; quadratic weights
    for ratings). None when no item has two answers."""
    import krippendorff
    from sklearn.metrics import cohen_kappa_score

    by_item: dict = {}
    for item, who, ans in answers:
        by_item.setdefault(item, {})[who] = ans
    shared = {i: a for i, a in by_item.items() if len(a) >= 2}
    if not shared:
        return None
    people = sorted({w for a in shared.values() for w in a})
    code = {ans: k for k, ans in enumerate(scale.answers)}  # ordinal for stars: "1" < "2" < ...
    items = sorted(shared)
    mat = np.full((len(people), len(items)), np.nan)
    row = {w: k for k, w in enumerate(people)}
    for j, i in enumerate(items):
        for w, ans in shared[i].items():
            mat[row[w], j] = code[ans]
    values = np.unique(mat[~np.isnan(mat)])
    if values.size < 2:  # everyone gave one answer: perfect agreement, alpha undefined (0/0)
        alpha = 1.0
    else:
        alpha = float(krippendorff.alpha(reliability_data=mat, level_of_measurement=(
            "nominal" if scale.kind == "choices" else "ordinal"), value_domain=np.arange(len(code))))
    kappas = []
    for a, b in itertools.combinations(range(len(people)), 2):
        both = ~np.isnan(mat[a]) & ~np.isnan(mat[b])
        if both.sum() < 2:
            continue
        x, y = mat[a, both].astype(int), mat[b, both].astype(int)
        if np.array_equal(x, y):
            kappas.append(1.0)  # identical answers (kappa is 0/0 when both used a single answer)
            continue
        k = cohen_kappa_score(x, y, labels=np.arange(len(code)),
                              weights=None if scale.kind == "choices" else "quadratic")
        if math.isfinite(k):
            kappas.append(float(k))
    return {"krippendorff_alpha": alpha, "cohen_kappa": float(np.mean(kappas)) if kappas else None,
            "items": len(items), "annotators": len(people), "pairs": len(kappas)}
