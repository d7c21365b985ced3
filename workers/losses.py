"""Losses of a generated answer against references, and judge verdicts parsed into scores.

Every loss is in [0, 1] (0 = correct). Answers are compared after :func:`normalize` (the usual open-QA normalisation)
except by :func:`exact_match_loss`; with several references the best match counts. Judge verdicts are parsed strictly:
one that does not state one unambiguous score raises :class:`UnparsableVerdict` (the caller retries or counts a failed
request, never a loss of 0 or 1).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter

import numpy as np

from certsel.errors import CertselError

_ARTICLES = {"a", "an", "the"}
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"


class UnparsableVerdict(CertselError, ValueError):
    """A judge's reply that states no single score in range."""


def _refs(references) -> list[str]:
    refs = [references] if isinstance(references, str) else list(references)
    if not refs or not all(isinstance(r, str) for r in refs):
        raise ValueError("references must be a string or a non-empty list of strings")
    return refs


def normalize(text: str) -> str:
    """NFKC, lower case, drop punctuation (any Unicode P* category) and articles, collapse spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return " ".join(w for w in text.split() if w not in _ARTICLES)


def exact_match_loss(prediction: str, references) -> float:
    """0 if the prediction equals a reference up to surrounding whitespace, else 1."""
    p = prediction.strip()
    return 0.0 if any(p == r.strip() for r in _refs(references)) else 1.0


def normalized_exact_match_loss(prediction: str, references) -> float:
    """0 if the normalised prediction equals a normalised reference, else 1."""
    p = normalize(prediction)
    return 0.0 if any(p == normalize(r) for r in _refs(references)) else 1.0


def contains_answer_loss(prediction: str, references) -> float:
    """0 if a normalised reference occurs in the normalised prediction as whole words ("4" is not found in "14"), else
    1. An empty normalised reference never matches."""
    words = normalize(prediction).split()
    for r in _refs(references):
        ref = normalize(r).split()
        if ref and any(words[i : i + len(ref)] == ref for i in range(len(words) - len(ref) + 1)):
            return 0.0
    return 1.0


def token_f1_loss(prediction: str, references) -> float:
    """1 - max over references of the token-level F1 of the normalised strings (SQuAD's F1); two empty strings match
    (F1 = 1)."""
    p = normalize(prediction).split()
    best = 0.0
    for r in _refs(references):
        ref = normalize(r).split()
        if not p or not ref:
            f1 = float(p == ref)
        else:
            common = sum((Counter(p) & Counter(ref)).values())
            f1 = 0.0 if common == 0 else 2 * common / (len(p) + len(ref))
        best = max(best, f1)
    return 1.0 - best


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands separators and exponents allowed). The last, because models often
    restate the question first ("12+30 = 42")."""
    found = re.findall(_NUMBER, text)
    return None if not found else float(found[-1].replace(",", ""))


def numeric_match_loss(prediction: str, references, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> float:
    """0 if the last number in the prediction equals a reference's within tolerance; a reference without a number is a
    data error."""
    x = last_number(prediction)
    ok = False
    for r in _refs(references):
        y = last_number(r)
        if y is None:
            raise ValueError(f"reference {r!r} contains no number")
        ok = ok or (x is not None and math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol))
    return 0.0 if ok else 1.0


LOSSES = {
    "exact_match": exact_match_loss,
    "normalized_exact_match": normalized_exact_match_loss,
    "contains": contains_answer_loss,
    "token_f1": token_f1_loss,
    "numeric": numeric_match_loss,
}


# what each loss measures, in the words an answer states ("R: a candidate's mean ...")
LOSS_WORDS = {
    "exact_match": "error (1 when the answer is not exactly a reference)",
    "normalized_exact_match": "error (1 when the normalised answer is not a normalised reference)",
    "contains": "error (1 when no reference occurs in the answer as whole words)",
    "token_f1": "1 - token F1 of the answer against the references",
    "numeric": "error (1 when the last number in the answer is not the reference's)",
}


def answer_loss(kind: str, prediction: str, references) -> float:
    """Dispatch on ``kind`` (a key of :data:`LOSSES`)."""
    try:
        fn = LOSSES[kind]
    except KeyError:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {kind!r}") from None
    return fn(prediction, references)


# -- judge verdicts ------------------------------------------------------------------------

_SCORE_PATTERNS = (
    re.compile(r"\[\[\s*(" + _NUMBER + r")\s*\]\]"),  # MT-bench style [[7]]
    re.compile(r"\b(?:score|rating|grade|verdict)\s*[:=]?\s*(" + _NUMBER + r")(?:\s*(?:/|out of)\s*(" + _NUMBER + r"))?",
               re.IGNORECASE),
    re.compile(r"(?<![\w.])(" + _NUMBER + r")\s*(?:/|out of)\s*(" + _NUMBER + r")\b", re.IGNORECASE),
)


def parse_score(text: str, scale=(0.0, 10.0)) -> float:
    """A judge's rubric score mapped to [0, 1]: ``(x - lo) / (hi - lo)``. Accepted, in order: ``[[x]]``; ``Score: x``
    (also rating/grade/verdict, optionally ``x/y`` or ``x out of y``); ``x/y`` or ``x out of y`` anywhere; a reply that
    is only a number. A denominator y makes the scale (0, y). Every match of the first pattern that applies must agree
    and lie in the scale; otherwise :class:`UnparsableVerdict`."""
    lo, hi = (float(v) for v in scale)
    if not hi > lo:
        raise ValueError(f"scale must be (lo, hi) with lo < hi, got {scale!r}")
    if not isinstance(text, str) or not text.strip():
        raise UnparsableVerdict("empty verdict")
    for pattern in _SCORE_PATTERNS:
        found = pattern.findall(text)
        if not found:
            continue
        values = set()
        for m in found:
            x, y = (m, "") if isinstance(m, str) else (m[0], m[1] if len(m) > 1 else "")
            x = float(x.replace(",", ""))
            if y:
                den = float(y.replace(",", ""))
                if den <= 0:
                    raise UnparsableVerdict(f"score {x}/{den} has a non-positive denominator")
                values.add((x, 0.0, den))
            else:
                values.add((x, lo, hi))
        if len(values) > 1:
            raise UnparsableVerdict(f"verdict states {len(values)} different scores")
        x, a, b = values.pop()
        if not a <= x <= b:
            raise UnparsableVerdict(f"score {x:g} outside its scale [{a:g}, {b:g}]")
        return (x - a) / (b - a)
    stripped = text.strip().rstrip(".")
    if re.fullmatch(_NUMBER, stripped):
        x = float(stripped.replace(",", ""))
        if lo <= x <= hi:
            return (x - lo) / (hi - lo)
        raise UnparsableVerdict(f"score {x:g} outside its scale [{lo:g}, {hi:g}]")
    raise UnparsableVerdict("no score found in the verdict")


_YES = {"yes", "correct", "right", "true", "pass"}
_NO = {"no", "incorrect", "wrong", "false", "fail"}


def parse_binary(text: str) -> float:
    """1.0 for a verdict that says yes/correct/true/pass, 0.0 for no/incorrect/false/fail (whole words, after
    normalisation); both or neither is :class:`UnparsableVerdict`."""
    if not isinstance(text, str):
        raise UnparsableVerdict("verdict is not text")
    words = set(normalize(text).split())
    yes, no = bool(words & _YES), bool(words & _NO)
    if yes == no:
        raise UnparsableVerdict("verdict is neither clearly yes nor clearly no" if not yes else
                                "verdict says both yes and no")
    return 1.0 if yes else 0.0


def relative_loss(candidate, reference) -> np.ndarray:
    """A candidate's drop against a reference model on the same items: max(loss(candidate) - loss(reference), 0), in
    [0, 1]; an item where the candidate does better costs nothing (the quantization loss of R-AutoEval+'s experiments:
    the drop against the full-precision model)."""
    return np.maximum(np.asarray(candidate, dtype=np.float64) - np.asarray(reference, dtype=np.float64), 0.0)


def preference_loss(candidate, reference) -> np.ndarray:
    """Whether the candidate's answer loses to the reference's on the same item, from their losses against the human
    references: (1 + loss(candidate) - loss(reference)) / 2, for 0/1 losses 1 (loses), 1/2 (tie) or 0 (wins). Its mean
    is the loss rate against the reference with ties as half, what a pairwise judge estimates (1 - the win rate, as
    AlpacaEval counts it)."""
    return (1.0 + np.asarray(candidate, dtype=np.float64) - np.asarray(reference, dtype=np.float64)) / 2.0


_PAIR = re.compile(r"\[\[\s*([ABC])\s*\]\]")


def pairwise_verdict(reply, candidate_first: bool, soft: bool) -> float:
    """The probability that the candidate's answer loses, from a pairwise judge's verdict on (A, B), the candidate being
    A when ``candidate_first``. Soft (``top`` log-probabilities of the first token): P(other) / (P(A) + P(B)), every
    spelling of each letter summed; without either letter, the text decides. Hard: ``A`` or ``B``, or ``[[A]]``,
    ``[[B]]``, ``[[C]]`` (a tie: 1/2). Anything else is :class:`UnparsableVerdict`."""
    other = "b" if candidate_first else "a"
    if soft:
        p = {"a": 0.0, "b": 0.0}
        for token, logprob in reply.get("top", {}).items():
            word = token.strip().lower()
            if word in p:
                p[word] += math.exp(logprob)
        if p["a"] + p["b"] > 0.0:
            return p[other] / (p["a"] + p["b"])
        reply = str(reply.get("text", ""))
    if not isinstance(reply, str):
        raise UnparsableVerdict("not a text verdict")
    text = reply.strip()
    found = {m.upper() for m in _PAIR.findall(text)}
    if not found and text.strip(".!:) ").upper() in ("A", "B"):
        found = {text.strip(".!:) ").upper()}
    if len(found) != 1:
        raise UnparsableVerdict(f"not a verdict between A and B: {text[:80]!r}")
    choice = found.pop().lower()
    return 0.5 if choice == "c" else float(choice == other)


def soft_verdict(reply: dict) -> float | None:
    """The loss of a yes/no verdict from its token probabilities: P(no) / (P(yes) + P(no)), summing the first token's
    top log-probabilities over the spellings of each word ("yes", " Yes", ...). Without either word among them, the
    verdict's text decides (yes: 0, no: 1); None when that is not a yes or a no either (the caller asks again)."""
    p_yes = p_no = 0.0
    for token, logprob in reply.get("top", {}).items():
        word = token.strip().lower()
        if word == "yes":
            p_yes += math.exp(logprob)
        elif word == "no":
            p_no += math.exp(logprob)
    if p_yes + p_no > 0.0:
        return p_no / (p_yes + p_no)
    word = str(reply.get("text", "")).strip().strip(".!").lower()
    return {"yes": 0.0, "no": 1.0}.get(word)
