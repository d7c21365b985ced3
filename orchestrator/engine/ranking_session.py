"""One ranking's decisions as a session: its pair tests and its models' records, fed paired observations as they
arrive; it answers which pairs are still open (and so which models still need labels) and, at its end, the certified
partial order, ties, rank intervals and top-k set applied to the records.

The Ray driver's rounds (:class:`~.pairwise.PairwiseRounds`) and ``certsel.inspect``'s
:class:`~certsel.inspect.CertifiedRanking` both feed one; neither builds pair tests, records or outcomes of its own.
Every pair (i, j) is tested on u = (loss_i - loss_j + 1)/2 against 1/2, each direction of its sign at
delta / (2P) (:class:`~certsel.policies.procedures.PairwiseRanking`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.policies.comparison import implied_orders, sign_policy_delta
from certsel.policies.kinds import PolicyInputs, PolicySettings
from certsel.policies.pair_bets import MarginBet
from certsel.policies.procedures import Procedure

from certsel.orchestrator.results.records import CandidateRecord, JobResult, Status, totals

from . import decisions
from .decisions import Pairs, RankingOutcome, RankingRules
from .pair_policies import PairPolicies, pair_policies

_CHANGES = ("certified_wins", "certified_losses", "open_pairs")


@dataclass(frozen=True)
class PairTests:
    """How a ranking's pairs test: the pair policy kind and its radius and partition, their seed, the bet sized for
    their claims (None: the policy's own) and what each pair knows before any label (``inputs``, one per pair)."""

    kind: object
    n_items: int
    seed: int = 0
    radius: str = "betting"
    partition: str = "embeddings"
    bet: MarginBet | None = None
    inputs: list | None = None  # PolicyInputs per pair (default: no features, no judge strata)


class RankingSession:
    """The pairs, ties and dead models of one ranking over ``records`` (see the module docstring)."""

    def __init__(self, records: list[CandidateRecord], *, procedure: Procedure, delta: float, rules: RankingRules,
                 tests: PairTests):
        self.records, self.procedure, self.delta, self.rules = records, procedure, delta, rules
        K = len(records)
        self.names = [r.name for r in records]
        self.ii, self.jj = np.triu_indices(K, 1)
        P = self.ii.size
        self.pair_delta = procedure.pair_delta(delta, K)
        # each direction of a pair's sign at delta/(2P): a false order, an exact tie included, has
        # probability <= delta/P, and <= delta over all P pairs
        self.pair_delta_per_direction = sign_policy_delta(self.pair_delta, tests.radius)
        settings = PolicySettings(alpha=0.5, delta=self.pair_delta_per_direction, budget=tests.n_items,
                                  seed=tests.seed, radius=tests.radius, partition=tests.partition, strict=True)
        inputs = tests.inputs or [PolicyInputs(tests.n_items, judge_scores=np.full(tests.n_items, 0.5))
                                  for _ in range(P)]
        self.pairs: PairPolicies = pair_policies(tests.kind, settings, inputs, tests.bet)
        self.tied = np.zeros(P, dtype=bool)  # pairs certified tied within epsilon
        self.dead: set = {m for m, r in enumerate(records) if r.status is Status.SOURCE_FAILED}

    # -- evidence in, decisions out -------------------------------------------------------------
    def evidence(self) -> Pairs:
        """The pairs' evidence now, as the decision core reads it."""
        p = self.pairs
        return Pairs(tuple(self.names), self.ii, self.jj, p.decision, p.bounds(), p.n_labeled, p.done,
                     self.tied.copy(), frozenset(self.dead))

    def open_pairs(self) -> np.ndarray:
        """The indices of the pairs that take more items (:func:`~.decisions.open_pairs`)."""
        return np.flatnonzero(decisions.open_pairs(self.evidence(), self.rules))

    def feed(self, fed: dict) -> None:
        """``{pair: (items, u)}``: each pair's new paired observations; then the ties they certify."""
        self.pairs.feed(fed)
        self.tied[decisions.new_ties(self.evidence(), self.rules, fed)] = True

    def fail(self, m: int, reason: str) -> None:
        """Model ``m``'s label source failed for good: its pairs end undecided, the others go on."""
        self.dead.add(m)
        self.records[m].end(Status.SOURCE_FAILED, reason)

    def settled_models(self) -> set[int]:
        """The models none of whose pairs is open."""
        running = decisions.open_pairs(self.evidence(), self.rules)
        still = set(self.ii[running].tolist()) | set(self.jj[running].tolist())
        return set(range(len(self.names))) - still

    def fold(self, known: list[dict], n_judge: int = 0) -> None:
        """Each model's counters from ``known`` (item -> loss, the labels it has), its status, and a metrics row when
        its labels or its pairs' state changed."""
        pairs = self.evidence()
        K = len(self.records)
        better = implied_orders(decisions.direct_orders(pairs))
        running = decisions.open_pairs(pairs, self.rules)
        still = np.bincount(pairs.ii[running], minlength=K) + np.bincount(pairs.jj[running], minlength=K)
        for m, r in enumerate(self.records):
            r.n_human = r.t = len(known[m])
            r.n_judge = n_judge
            r.requests = len(known[m]) + r.n_judge
            r.estimate = float(np.mean(list(known[m].values()))) if known[m] else float("nan")
            if r.status is Status.PENDING and known[m]:
                r.status = Status.RUNNING
            row = {"labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests,
                   "estimate": r.estimate, "certified_wins": int(better[m].sum()),
                   "certified_losses": int(better[:, m].sum()), "open_pairs": int(still[m]), "step": r.t}
            if not r.rounds or any(r.rounds[-1][k] != row[k] for k in ("step", *_CHANGES)):
                r.rounds.append(row)

    # -- checkpoints ------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"pairs": self.pairs.state_dict(), "tied": self.tied.copy()}

    def restore(self, saved: dict) -> None:
        self.pairs = self.pairs.restore(saved["pairs"])
        if "tied" in saved:  # the ties as they were certified (a checkpoint without them: none yet)
            self.tied = np.asarray(saved["tied"], dtype=bool).copy()
        self.dead = {m for m, r in enumerate(self.records) if r.status is Status.SOURCE_FAILED}

    # -- the end ------------------------------------------------------------------------------------
    def level(self) -> str:
        return decisions.ranking_level(self.procedure, self.delta, len(self.names), self.pair_delta_per_direction)

    def finish(self) -> RankingOutcome:
        """The certified partial order, ties, rank intervals and top-k set, each model's end applied to its record."""
        out = decisions.ranking_outcome(self.evidence(), self.rules, self.pair_delta, self.pair_delta_per_direction)
        for r, end in zip(self.records, out.ends, strict=True):
            if end is not None:
                r.end(*end)
        return out

    def result(self, out: RankingOutcome, cfg, data, *, rounds: int, full: dict) -> JobResult:
        """The job's result from the ranking's end (``cfg``, ``data``: the job's; ``full``: its full budget)."""
        return JobResult(cfg, data, self.records, out.top, out.selected, self.level(), totals(self.records), full,
                         rounds, ranking=out.ranking)
