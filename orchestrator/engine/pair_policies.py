"""The pair policies of a ranking, read and fed as arrays over the P pairs.

:class:`PairPolicies` is what :class:`~certsel.orchestrator.engine.pairwise.PairwiseRounds` needs from them.
:class:`PolicyList` holds one policy object per pair (any policy kind); :class:`BankedPairs` holds Seq's pairs as one
:class:`~certsel.policies.seq_bank.SeqBank`, whose rows are exactly those objects (a round is one vectorised update
instead of P). :func:`pair_policies` picks the bank wherever the policy kind builds one.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from certsel.policies.kinds import PolicyInputs, PolicyKind, PolicySettings
from certsel.policies.seq_bank import SeqBank


class PairPolicies(Protocol):
    """P pair policies: per-pair readouts as arrays, items asked per pair, values fed per pair."""

    @property
    def n_labeled(self) -> np.ndarray: ...

    @property
    def decision(self) -> np.ndarray: ...

    @property
    def done(self) -> np.ndarray: ...

    def bounds(self) -> np.ndarray:
        """(P, 4): one-sided lower and upper bounds, then the two-sided interval."""

    def next_items(self, pair: int, batch: int) -> np.ndarray: ...

    def feed(self, fed: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Pair -> (the items it asked for, their values)."""

    def state_dict(self) -> dict: ...

    def restore(self, state: dict | list) -> PairPolicies: ...


class PolicyList:
    """One policy object per pair."""

    def __init__(self, kind: PolicyKind, policies: list):
        self.kind, self.policies = kind, policies

    @property
    def n_labeled(self) -> np.ndarray:
        return np.array([p.n_labeled for p in self.policies], dtype=np.int64)

    @property
    def decision(self) -> np.ndarray:
        return np.array([p.decision for p in self.policies], dtype=np.int64)

    @property
    def done(self) -> np.ndarray:
        return np.array([p.done for p in self.policies], dtype=bool)

    def bounds(self) -> np.ndarray:
        return np.array([p.bounds() for p in self.policies], dtype=np.float64).reshape(-1, 4)

    def next_items(self, pair: int, batch: int) -> np.ndarray:
        return self.policies[pair].next_items(batch)

    def feed(self, fed: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for p, (items, values) in fed.items():
            self.policies[p].update(items, values)

    def state_dict(self) -> dict:
        return {"pairs": [p.state_dict() for p in self.policies]}

    def restore(self, state: dict | list) -> PolicyList:
        if isinstance(state, list):  # a checkpoint written before banks: the pairs' states alone
            state = {"pairs": state}
        if "pairs" not in state:
            raise ValueError("the checkpoint holds the pairs as a bank; this job runs one policy per pair")
        return PolicyList(self.kind, [self.kind.restore(p, s) for p, s in zip(self.policies, state["pairs"],
                                                                               strict=True)])


class BankedPairs:
    """Seq's pairs as the rows of one :class:`SeqBank`; pairs fed equally far are fed together."""

    def __init__(self, bank: SeqBank):
        self.bank = bank

    @property
    def n_labeled(self) -> np.ndarray:
        return self.bank.n_labeled

    @property
    def decision(self) -> np.ndarray:
        return self.bank.decision

    @property
    def done(self) -> np.ndarray:
        return self.bank.done

    def bounds(self) -> np.ndarray:
        return self.bank.bounds()

    def next_items(self, pair: int, batch: int) -> np.ndarray:
        return self.bank.next_items(pair, batch)

    def feed(self, fed: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        pairs = np.fromiter(fed, dtype=np.int64, count=len(fed))
        n = self.bank.n_labeled[pairs]
        length = np.array([len(fed[int(p)][1]) for p in pairs], dtype=np.int64)
        for at, size in sorted(set(zip(n.tolist(), length.tolist()))):  # rows that start and end together
            rows = pairs[(n == at) & (length == size)]
            self.bank.feed(rows, np.stack([fed[int(p)][1] for p in rows]))

    def state_dict(self) -> dict:
        return {"bank": self.bank.state_dict()}

    def restore(self, state: dict | list) -> BankedPairs:
        if not isinstance(state, dict) or "bank" not in state:
            raise ValueError("the checkpoint holds one policy per pair; this job runs the pairs as a bank")
        return BankedPairs(SeqBank.from_state_dict(state["bank"]))


def pair_policies(kind: PolicyKind, settings: PolicySettings, inputs: list[PolicyInputs], bet=None) -> PairPolicies:
    """The P pair policies of ``kind``: a bank where the kind builds one for these settings
    (:meth:`~certsel.policies.kinds.PolicyKind.build_bank`), betting ``bet`` if given, else one object per pair."""
    bank = kind.build_bank(settings, inputs[0].n_items, len(inputs), bet)
    if bank is not None:
        return BankedPairs(bank)
    return PolicyList(kind, [kind.build(settings, x) for x in inputs])
