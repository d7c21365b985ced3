"""A sample's score as a number in [0, 1]: which scorer, which key, and no silent zeros.

inspect's ``value_to_float`` maps "C"/"I"/"P"/"N", booleans, "yes"/"no" and numeric strings to floats, and anything
else to 0.0 with a warning. A certificate cannot rest on a made-up 0, so :func:`score_value` refuses the rest with a
one-line :class:`ScoreError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from certsel.errors import InputError

_LITERALS = {"c", "i", "p", "n", "yes", "no", "true", "false"}


class ScoreError(InputError):
    """A scorer, key or score value the certificate cannot use (one line)."""


def _scalar(value) -> bool:
    if isinstance(value, bool | int | float):
        return math.isfinite(float(value))
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _LITERALS:
            return True
        try:
            return math.isfinite(float(text))
        except ValueError:
            return False
    return False


def score_value(value, where: str) -> float:
    """``value`` through inspect's value-to-float, in [0, 1]; ``where`` names the sample in a refusal."""
    from inspect_ai.scorer import value_to_float

    if not _scalar(value):
        raise ScoreError(f"{where}: score {value!r} is not a number or one of C/I/P/N, yes/no, true/false")
    x = float(value_to_float()(value))
    if not 0.0 <= x <= 1.0:
        raise ScoreError(f"{where}: score {x:g} is outside [0, 1] (certsel certifies a mean score in [0, 1])")
    return x


@dataclass(frozen=True)
class ScoreReader:
    """Reads one scorer's value (one key of a dict-valued score) from inspect's scores."""

    scorer: str | None = None  # None: the task's first scorer
    key: str | None = None  # the key of a dict-valued score

    def resolve(self, scorers: list) -> "ScoreReader":
        """The reader bound to a task's scorers (``EvalSpec.scorers``): the one named, or the first; refuses an
        unknown name and a dict-valued scorer without ``key``."""
        names = [s.name for s in scorers or []]
        if not names:
            raise ScoreError("the task has no scorer, so there is no score to certify")
        name = self.scorer if self.scorer is not None else names[0]
        if name not in names:
            raise ScoreError(f"unknown scorer {name!r}; the task's scorers are: {', '.join(names)}")
        metrics = next(s.metrics for s in scorers if s.name == name)
        keyed = isinstance(metrics, dict) or (isinstance(metrics, list) and any(isinstance(m, dict) for m in metrics))
        if keyed and self.key is None:
            keys = sorted(metrics) if isinstance(metrics, dict) else sorted(k for m in metrics if isinstance(m, dict)
                                                                          for k in m)
            raise ScoreError(f"scorer {name!r} gives a score per key ({', '.join(keys)}); choose one with key=")
        return ScoreReader(name, self.key)

    def read(self, scores: dict, where: str) -> float:
        """The number of one sample's scores (``{scorer: SampleScore}``)."""
        if self.scorer not in scores:
            raise ScoreError(f"{where}: no score from scorer {self.scorer!r} (it gave {', '.join(scores) or 'none'})")
        return self.value(scores[self.scorer].score, where)

    def value(self, score, where: str) -> float:
        """The number of one ``Score`` of this scorer (the key's value of a dict-valued one)."""
        value = score.value
        if self.key is not None:
            if not isinstance(value, dict) or self.key not in value:
                raise ScoreError(f"{where}: scorer {self.scorer!r} gave no value for key {self.key!r}")
            value = value[self.key]
        return score_value(value, where)

    @property
    def words(self) -> str:
        return f"scorer {self.scorer!r}" + (f", key {self.key!r}" if self.key else "")
