"""A regression candidate's labels: its own and its baseline's on the same items, paired by the claim's transform
(:class:`~certsel.policies.regression.Regression`).

The two sides are labelled apart, each under its own identity in the label store: the baseline's labels one job bought
(when the baseline was gated itself, or compared with another candidate) serve every later comparison with it, and a
candidate's own labels serve it when it becomes the next baseline. A paired label is the pair (candidate's, baseline's)
on one item; the policy sees only the transformed loss, and the store is asked per side, so reuse never changes an
observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.policies.regression import Regression

from .label_store import LabelStore, StoredSource
from .replay import ReplaySource


@dataclass(frozen=True)
class PairedReplaySpec:
    """Recorded losses of a candidate and its baseline: ``rows`` is (human, judge, baseline human, baseline judge);
    ``baseline_identity`` the baseline's identity in the label store (None: no store)."""

    claim: Regression
    baseline: str
    baseline_identity: str | None = None

    kind = "replay"

    def build(self, arrays, rows) -> PairedSource:
        return PairedSource(ReplaySource(rows[0], rows[1]), ReplaySource(rows[2], rows[3]), self.claim,
                            self.baseline_identity)


@dataclass(frozen=True)
class PairedSpec:
    """Any two sources' specs paired: the candidate's and its baseline's (a model of an lm-eval task, say), each built
    as it would be alone; ``baseline_identity`` as in :class:`PairedReplaySpec`."""

    candidate: object
    baseline_spec: object
    claim: Regression
    baseline: str
    baseline_identity: str | None = None

    kind = "paired"

    def build(self, arrays, rows) -> PairedSource:
        return PairedSource(self.candidate.build(arrays, rows), self.baseline_spec.build(arrays, rows), self.claim,
                            self.baseline_identity)


class PairedSource:
    """A label source of paired losses u = (l - b + 1) / 2 over a candidate's source and its baseline's."""

    def __init__(self, candidate, baseline, claim: Regression, baseline_identity: str | None = None):
        self.candidate, self.baseline, self.claim = candidate, baseline, claim
        self.baseline_identity = baseline_identity
        self.log: list = []  # (items, role, paired losses) of every paired label bought, in order
        self._done: dict[str, set] = {"human": set(), "judge": set()}

    def in_store(self, store: LabelStore, identity: str) -> PairedSource:
        """This source with each side kept in ``store`` under its own identity (the candidate's ``identity``, the
        baseline's from the spec)."""
        base = self.baseline if self.baseline_identity is None else \
            StoredSource(self.baseline, store, self.baseline_identity)
        return PairedSource(StoredSource(self.candidate, store, identity), base, self.claim, self.baseline_identity)

    @property
    def n_items(self) -> int:
        return self.candidate.n_items

    @property
    def human_labels(self) -> int:
        """Paired items labelled (each a candidate's and a baseline's label)."""
        return self.candidate.human_labels

    @property
    def judge_labels(self) -> int:
        return self.candidate.judge_labels

    @property
    def requests(self) -> int:
        return self.candidate.requests + self.baseline.requests

    @property
    def reused_labels(self) -> int:
        """The candidate's human labels the store gave."""
        return self.candidate.reused_labels if isinstance(self.candidate, StoredSource) else 0

    @property
    def baseline_labels(self) -> tuple[int, int]:
        """The baseline's human labels this source used: (bought, reused from the store)."""
        reused = self.baseline.reused_labels if isinstance(self.baseline, StoredSource) else 0
        return self.baseline.human_labels - reused, reused

    def prime(self, items) -> None:
        for side in (self.candidate, self.baseline):  # a side that counts generations (a replay source's)
            prime = getattr(side, "prime", None)
            if prime is not None:
                prime(items)

    def origins(self, role: str, items) -> list[bool]:
        """Whether each of ``items`` came from the store: the candidate's side (a paired label is reused when its
        candidate's label is; the baseline's reuse is counted apart, :attr:`baseline_labels`)."""
        if isinstance(self.candidate, StoredSource):
            return self.candidate.origins(role, items)
        return [False] * len(items)

    def human(self, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        return self._logged("human", items, self.claim.losses(self.candidate.human(items), self.baseline.human(items)))

    def judge(self, items) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        return self._logged("judge", items, self.claim.losses(self.candidate.judge(items), self.baseline.judge(items)))

    def _logged(self, role: str, items: np.ndarray, losses: np.ndarray) -> np.ndarray:
        """``losses``, with the items labelled in ``role`` for the first time added to :attr:`log`."""
        done = self._done[role]
        new = [k for k, i in enumerate(items.tolist()) if i not in done and not done.add(i)]
        if new:
            self.log.append((items[new], role, losses[new]))
        return losses

    def losses(self, items) -> np.ndarray:
        return self.human(items)
