"""Pairwise ranking: every pair of models compared by Seq or Cer-Eval on paired losses.

Every pair (i, j) is compared on u = (loss_i - loss_j + 1)/2 with threshold 1/2 at level delta/P (Bonferroni over the P
pairs, :class:`~certsel.policies.procedures.PairwiseRanking`); a pair stops as soon as its sign is certified, or, with
``pairwise.epsilon``, once the same bounds certify |R_i - R_j| < epsilon (a tie). The pair policies live in the driver;
the models' label sources live in the hosts (label servers). All pairs share one seed, so they ask for the same items
for as long as their states agree, and a model is labelled once per item whatever the number of pairs it is in.
"""

from __future__ import annotations

import numpy as np

from certsel.policies.comparison import implied_orders, sign_policy_delta
from certsel.policies.pair_bets import MarginBet, pair_bet as named_pair_bet, pair_claims
from certsel.policies.kinds import PolicyInputs, PolicySettings
from certsel.workers.contracts import ModelLosses

from .pair_policies import PairPolicies, pair_policies
from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, Status, totals

from . import decisions
from .decisions import Pairs, RankingRules


def _mark_failed(records, dead: set, answers: dict[str, ModelLosses], names: list) -> dict:
    """Losses per model from the replies; a model whose source failed for good is dead (its pairs end undecided)."""
    out = {}
    for nm, reply in answers.items():
        m = names.index(nm)
        if reply.error is not None:
            dead.add(m)
            records[m].end(Status.SOURCE_FAILED, f"source failed: {reply.error}")
        else:
            out[m] = np.asarray(reply.losses, dtype=np.float64)
    return out


def _pair_scores(plan, pool, records, dead, ii, jj):
    """Cer-Eval's judge strata per pair, as paired scores of every model's judge losses (None: no strata)."""
    P = ii.size
    if not plan.judge_strata:
        return [None] * P
    names, I = plan.data.names, plan.data.n_items
    everything = np.arange(I, dtype=np.int64)
    judged = _mark_failed(records, dead, pool.losses_of({nm: everything for nm in names}, "judge", names), names)
    return [None if ii[p] in dead or jj[p] in dead else (judged[ii[p]] - judged[jj[p]] + 1.0) / 2.0
            for p in range(P)]


_CHANGES = ("certified_wins", "certified_losses", "open_pairs")


def _model_row(r, wins: int, losses: int, open_pairs: int) -> dict:
    return {"labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests, "estimate": r.estimate,
            "certified_wins": wins, "certified_losses": losses, "open_pairs": open_pairs, "step": r.t}


class PairwiseRounds:
    """The rounds of a pairwise ranking job (see the module docstring), driven by
    :func:`~certsel.orchestrator.engine.driver.run_rounds`."""

    kind = "pairwise"

    def __init__(self, plan, pool, records: list[CandidateRecord]):
        self.plan, self.pool, self.records = plan, pool, records
        cfg, data = plan.cfg, plan.data
        self.names = data.names
        K, I = len(self.names), data.n_items
        self.ii, self.jj = np.triu_indices(K, 1)
        P = self.ii.size
        self.cap = min(cfg.budget.n, I)
        # each direction of a pair's sign at delta/(2P): a false order, an exact tie included, has
        # probability <= delta/P, and <= delta over all P pairs
        self.pair_delta = sign_policy_delta(plan.procedure.pair_delta(cfg.delta, K), cfg.policy.radius)
        self.dead: set = set()
        scores = _pair_scores(plan, pool, records, self.dead, self.ii, self.jj)
        self.kind_of_policy = cfg.policy.policy_kind
        settings = PolicySettings(alpha=0.5, delta=self.pair_delta, budget=I, seed=cfg.seed,
                                  radius=cfg.policy.radius, partition=cfg.policy.partition, strict=True)
        self.pairs: PairPolicies = pair_policies(self.kind_of_policy, settings, [PolicyInputs(
            I, features=data.features, judge_scores=scores[p] if scores[p] is not None else np.full(I, 0.5))
            for p in range(P)], pair_bet(cfg))
        self.known = [dict() for _ in range(K)]  # item -> loss, per model
        self.tied = np.zeros(P, dtype=bool)  # pairs certified tied within pairwise.epsilon

    @property
    def rules(self) -> RankingRules:
        pw = self.plan.cfg.pairwise
        return RankingRules(pw.goal, pw.topk, pw.epsilon, self.cap)

    def evidence(self) -> Pairs:
        """The pairs' evidence now, as the decision core reads it."""
        return pair_evidence(self.names, self.pairs, self.ii, self.jj, self.tied, self.dead)

    def _check_ties(self, which) -> None:
        """Mark the pairs among ``which`` whose bounds now certify a tie (:func:`~.decisions.new_ties`)."""
        self.tied[decisions.new_ties(self.evidence(), self.rules, which)] = True

    def _round_sizes(self, which: np.ndarray) -> np.ndarray:
        """Each pair's next round: ``budget.batch``, or (``scheduling.rounds: predicted``) what its bounds say it needs.
        """
        cfg = self.plan.cfg
        if cfg.scheduling.rounds != "predicted":
            return np.full(which.size, cfg.budget.batch)
        return pair_round_sizes(self.pairs.bounds()[which], self.pairs.n_labeled[which],
                                pair_claims(cfg.pairwise.epsilon), cfg.budget.batch, cfg.budget.smallest_round,
                                self.plan.data.n_items)

    def restore(self, saved: dict) -> Resume:
        """The pair policies and the losses they saw, as they were (the pairs live here)."""
        self.pairs = self.pairs.restore(saved["pairs"])
        if "tied" in saved:  # the ties as they were certified (a checkpoint without them: none yet)
            self.tied = np.asarray(saved["tied"], dtype=bool).copy()
        self.known = [dict(zip(k["item"].tolist(), k["loss"].tolist(), strict=True)) for k in saved["known"]]
        self.dead = {m for m, r in enumerate(self.records) if r.status is Status.SOURCE_FAILED}
        rounds = int(saved["round"])
        return Resume(rounds, steps_from_snapshots=rounds, steps_replayed=0)

    def state(self) -> dict:
        return {"pairs": self.pairs.state_dict(), "tied": self.tied.copy(),
                "known": [{"item": np.fromiter(k.keys(), dtype=np.int64, count=len(k)),
                           "loss": np.fromiter(k.values(), dtype=np.float64, count=len(k))} for k in self.known]}

    def advance(self) -> list[CandidateRecord] | None:
        names, pairs, known, dead = self.names, self.pairs, self.known, self.dead
        ii, jj, cap = self.ii, self.jj, self.cap
        n = pairs.n_labeled
        open_pairs = np.flatnonzero(decisions.open_pairs(self.evidence(), self.rules))
        if not open_pairs.size:
            return None
        sizes = self._round_sizes(open_pairs)
        asks = {int(p): pairs.next_items(int(p), int(min(sizes[k], cap - n[p]))) for k, p in enumerate(open_pairs)}
        asked = [[] for _ in names]  # every model's items over its open pairs (mostly the same ones)
        for p, items in asks.items():
            asked[ii[p]].append(items)
            asked[jj[p]].append(items)
        need = [[i for i in np.unique(np.concatenate(a)).tolist() if i not in known[m]] if a else []
                for m, a in enumerate(asked)]
        requests = {names[m]: np.array(need[m], dtype=np.int64) for m in range(len(names)) if need[m]}
        still = {names[m] for p in open_pairs for m in (ii[p], jj[p])}  # models whose servers stay useful
        got = _mark_failed(self.records, dead, self.pool.losses_of(requests, open_names=sorted(still)), names)
        for m, losses in got.items():
            known[m].update(zip(requests[names[m]].tolist(), losses.tolist(), strict=True))
        fed = {}
        for p, items in asks.items():
            if ii[p] in dead or jj[p] in dead:
                continue  # stopped undecided (stopping is always allowed)
            a = np.array([known[ii[p]][int(i)] for i in items])
            b = np.array([known[jj[p]][int(i)] for i in items])
            fed[p] = (items, (a - b + 1.0) / 2.0)
        pairs.feed(fed)
        self._check_ties(asks)
        _fold(self.plan, self.records, known, self.evidence(), self.rules)
        return self.records

    def result(self, rounds: int) -> JobResult:
        plan, cfg = self.plan, self.plan.cfg
        K = len(self.names)
        out = decisions.ranking_outcome(self.evidence(), self.rules, plan.procedure.pair_delta(cfg.delta, K),
                                        self.pair_delta)
        for r, end in zip(self.records, out.ends, strict=True):
            if end is not None:
                r.end(*end)
        level = decisions.ranking_level(plan.procedure, cfg.delta, K, self.pair_delta)
        return JobResult(cfg, plan.data, self.records, out.top, out.selected, level, totals(self.records),
                         plan.full_budget(), rounds, ranking=out.ranking)


def pair_evidence(names, pairs: PairPolicies, ii, jj, tied, dead) -> Pairs:
    """Pair policies' readouts as the decision core's frozen :class:`~.decisions.Pairs`."""
    return Pairs(tuple(names), ii, jj, pairs.decision, pairs.bounds(), pairs.n_labeled, pairs.done, tied.copy(),
                 frozenset(dead))


def pair_round_sizes(bounds: np.ndarray, n: np.ndarray, claims, batch: int, smallest: int,
                     n_items: int) -> np.ndarray:
    """Items each pair asks for next: about what its one-sided bounds (``bounds[:, :2]``, on u) say it still needs for
    the claim among ``claims`` it is closest to, between ``smallest`` and ``batch`` (``batch`` before any label). The
    half-width h = (U - L) / 2 after n of N = ``n_items`` items shrinks about as sqrt((N - n) / (N n)) (sampling without
    replacement); a claim whose nearer end lies m from the centre needs h <= m: the n' with (N - n') / n' = (m / h)^2
    (N - n) / n. Rounds sized from a pair's own past keep its guarantee (the bounds hold at any stopping time)."""
    lo, hi = bounds[:, 0], bounds[:, 1]
    mid, half = (lo + hi) / 2.0, np.maximum((hi - lo) / 2.0, 0.0)
    ends = np.array(claims, dtype=np.float64)  # (claims, 2)
    margin = np.minimum(mid[:, None] - ends[None, :, 0], ends[None, :, 1] - mid[:, None])
    N = float(n_items)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (margin / half[:, None]) ** 2 * ((N - n) / np.maximum(n, 1))[:, None]
        total = np.where(margin > 0, N / (1.0 + ratio), np.inf).min(axis=1)
    need = np.ceil(np.nan_to_num(total - n, nan=batch, posinf=batch))
    return np.where(n > 0, np.clip(need, min(smallest, batch), batch), batch).astype(np.int64)


def pair_bet(cfg) -> MarginBet | None:
    """The pair tests' bet (``pairwise.bet``): sized for the claims a pair stops on -- an order either way, a tie within
    epsilon -- where the pair policies take a bet and the job did not ask for the policy's own (``plug-in``)."""
    if not cfg.policy.policy_kind.banks(cfg.policy.radius):
        return None
    return named_pair_bet(cfg.pairwise.bet or "margin").for_claims(pair_claims(cfg.pairwise.epsilon))


def _fold(plan, records, known, pairs: Pairs, rules: RankingRules) -> None:
    """Counters, status and a metrics row for every model whose labels or pairs moved."""
    K, I = len(records), plan.data.n_items
    better = implied_orders(decisions.direct_orders(pairs))
    running = decisions.open_pairs(pairs, rules)
    still = np.bincount(pairs.ii[running], minlength=K) + np.bincount(pairs.jj[running], minlength=K)
    for m, r in enumerate(records):
        r.n_human = r.t = len(known[m])
        r.n_judge = I if plan.judge_strata else 0
        r.requests = len(known[m]) + r.n_judge
        r.estimate = float(np.mean(list(known[m].values()))) if known[m] else float("nan")
        if r.status is Status.PENDING and known[m]:
            r.status = Status.RUNNING
        row = _model_row(r, int(better[m].sum()), int(better[:, m].sum()), int(still[m]))
        if not r.rounds or any(r.rounds[-1][k] != row[k] for k in ("step", *_CHANGES)):
            r.rounds.append(row)  # a row when its labels or its pairs' state changed
