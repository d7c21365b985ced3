"""Judge-assisted testing inside inspect (R-AutoEval+ with a cheap scorer as the judge).

The expensive scorer is wrapped (:func:`gated_scorer`) to run only on one sample in every ratio + 1 in schedule order;
the cheap scorer runs on every sample. :class:`JudgeFeed` groups the released samples into Algorithm 1's blocks.
"""

from __future__ import annotations

import numpy as np

from .scores import ScoreReader

NOT_LABELLED = "not labelled"  # the gated scorer's metadata on a sample that needs no label


class JudgeFeed:
    """Judge-assisted testing's blocks: released samples, in schedule order, grouped as one
    labelled sample and ``ratio`` judge-only ones (Algorithm 1 with r = ratio)."""

    def __init__(self, reader: ScoreReader, ratio: int):
        self.reader, self.ratio = reader, ratio
        self.pending = np.zeros((0, 2))
        self.h, self.jl, self.ju = [], [], []

    def blocks(self, released) -> tuple | None:
        """(labels, their judge scores, judge-only scores) of the blocks now complete."""
        if len(released):
            self.pending = np.concatenate([self.pending, np.asarray(released, dtype=np.float64).reshape(-1, 2)])
        b = len(self.pending) // (self.ratio + 1)
        if b == 0:
            return None
        rows, self.pending = self.pending[: b * (self.ratio + 1)], self.pending[b * (self.ratio + 1):]
        rows = rows.reshape(b, self.ratio + 1, 2)
        return rows[:, 0, 0], rows[:, 0, 1], rows[:, 1:, 1].reshape(-1)

    def fed(self, h, jl, ju) -> None:
        self.h.extend(h.tolist())
        self.jl.extend(jl.tolist())
        self.ju.extend(ju.tolist())

    def all(self):
        return np.asarray(self.h), np.asarray(self.jl), np.asarray(self.ju)

    def summary(self) -> dict:
        h, jl, ju = self.all()
        return {"scorer": self.reader.words, "ratio": self.ratio, "labels": len(h), "judge_only": len(ju),
                "agreement": None if not len(h) else float(np.mean(np.abs(h - jl) < 1e-12))}


def labelled_mean():
    """The mean of a gated scorer's values over the samples it labelled (inspect metric)."""
    from inspect_ai.scorer import SampleScore, metric, value_to_float

    @metric(name="labelled_mean")
    def _labelled_mean():
        to_float = value_to_float()

        def compute(scores) -> float:
            vals = [to_float(s.score.value) for s in scores if (s.score.metadata or {}).get("certsel") != NOT_LABELLED]
            return float(np.mean(vals)) if vals else float("nan")

        # inspect reads the annotation to pass SampleScores (this module's annotations are strings)
        compute.__annotations__ = {"scores": list[SampleScore], "return": float}

        return compute

    return _labelled_mean()




def gated_scorer(scorer, name: str | None, needs_label):
    """``scorer`` wrapped to run only where ``needs_label(sample_id)``; elsewhere a 0 marked "not labelled", left
    out by its metric (:func:`labelled_mean`). Returns the scorer and its name."""
    from inspect_ai._util.registry import registry_unqualified_name
    from inspect_ai.scorer import Score
    from inspect_ai.scorer import scorer as register

    name = name or registry_unqualified_name(scorer)

    @register(metrics=[labelled_mean()], name=name)
    def gated():
        async def score(state, target):
            if not needs_label(state.sample_id):
                return Score(value=0, explanation="certsel: the test needs no label for this sample",
                             metadata={"certsel": NOT_LABELLED})
            return await scorer(state, target)

        return score

    return gated(), name
