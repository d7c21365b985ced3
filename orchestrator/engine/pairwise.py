"""Pairwise ranking: every pair of models compared by Seq or Cer-Eval on paired losses.

Every pair (i, j) is compared on u = (loss_i - loss_j + 1)/2 with threshold 1/2 at level delta/P (Bonferroni over the P
pairs, :class:`~certsel.policies.procedures.PairwiseRanking`); a pair stops as soon as its sign is certified, or, with
``pairwise.epsilon``, once the same bounds certify |R_i - R_j| < epsilon (a tie). The pair tests and the decisions are
the job's :class:`~.ranking_session.RankingSession`; the models' label sources live in the hosts (label servers). All
pairs share one seed, so they ask for the same items for as long as their states agree, and a model is labelled once
per item whatever the number of pairs it is in.
"""

from __future__ import annotations

import numpy as np

from certsel.policies.pair_bets import MarginBet, pair_bet as named_pair_bet, pair_claims
from certsel.policies.kinds import PolicyInputs
from certsel.workers.contracts import ModelLosses

from certsel.orchestrator.results.records import CandidateRecord, JobResult, Resume, Status

from .decisions import RankingRules
from .ranking_session import PairTests, RankingSession


def _losses(answers: dict[str, ModelLosses], names: list, fail) -> dict:
    """Losses per model from the replies; ``fail(m, reason)`` for a model whose source failed for good (its pairs end
    undecided)."""
    out = {}
    for nm, reply in answers.items():
        m = names.index(nm)
        if reply.error is not None:
            fail(m, f"source failed: {reply.error}")
        else:
            out[m] = np.asarray(reply.losses, dtype=np.float64)
    return out


def _pair_scores(plan, pool, records, ii, jj):
    """Cer-Eval's judge strata per pair, as paired scores of every model's judge losses (None: no strata); a model
    whose judge source failed ends before the pairs start."""
    P = ii.size
    if not plan.judge_strata:
        return [None] * P
    names, I = plan.data.names, plan.data.n_items
    everything = np.arange(I, dtype=np.int64)
    judged = _losses(pool.losses_of({nm: everything for nm in names}, "judge", names), names,
                     lambda m, why: records[m].end(Status.SOURCE_FAILED, why))
    return [None if ii[p] not in judged or jj[p] not in judged else (judged[ii[p]] - judged[jj[p]] + 1.0) / 2.0
            for p in range(P)]


class PairwiseRounds:
    """The rounds of a pairwise ranking job (see the module docstring), driven by
    :func:`~certsel.orchestrator.engine.driver.run_rounds`: each round's paired losses go to the job's
    :class:`~.ranking_session.RankingSession`, which decides."""

    kind = "pairwise"

    def __init__(self, plan, pool, records: list[CandidateRecord]):
        self.plan, self.pool, self.records = plan, pool, records
        cfg, data = plan.cfg, plan.data
        self.names = data.names
        K, I = len(self.names), data.n_items
        self.cap = min(cfg.budget.n, I)
        ii, jj = np.triu_indices(K, 1)
        scores = _pair_scores(plan, pool, records, ii, jj)
        inputs = [PolicyInputs(I, features=data.features,
                               judge_scores=scores[p] if scores[p] is not None else np.full(I, 0.5))
                  for p in range(ii.size)]
        pw, pol = cfg.pairwise, cfg.policy
        self.session = RankingSession(records, procedure=plan.procedure, delta=cfg.delta,
                                      rules=RankingRules(pw.goal, pw.topk, pw.epsilon, self.cap),
                                      tests=PairTests(pol.policy_kind, I, cfg.seed, pol.radius, pol.partition,
                                                      pair_bet(cfg), inputs))
        self.known = [dict() for _ in range(K)]  # item -> loss, per model

    def _round_sizes(self, which: np.ndarray) -> np.ndarray:
        """Each pair's next round: ``budget.batch``, or (``scheduling.rounds: predicted``) what its bounds say it needs.
        """
        cfg, pairs = self.plan.cfg, self.session.pairs
        if cfg.scheduling.rounds != "predicted":
            return np.full(which.size, cfg.budget.batch)
        return pair_round_sizes(pairs.bounds()[which], pairs.n_labeled[which], pair_claims(cfg.pairwise.epsilon),
                                cfg.budget.batch, cfg.budget.smallest_round, self.plan.data.n_items)

    def restore(self, saved: dict) -> Resume:
        """The pair policies and the losses they saw, as they were (the pairs live here)."""
        self.session.restore(saved)
        self.known = [dict(zip(k["item"].tolist(), k["loss"].tolist(), strict=True)) for k in saved["known"]]
        rounds = int(saved["round"])
        return Resume(rounds, steps_from_snapshots=rounds, steps_replayed=0)

    def state(self) -> dict:
        return {**self.session.state(),
                "known": [{"item": np.fromiter(k.keys(), dtype=np.int64, count=len(k)),
                           "loss": np.fromiter(k.values(), dtype=np.float64, count=len(k))} for k in self.known]}

    def advance(self) -> list[CandidateRecord] | None:
        session, names, known = self.session, self.names, self.known
        pairs, ii, jj = session.pairs, session.ii, session.jj
        n = pairs.n_labeled
        open_pairs = session.open_pairs()
        if not open_pairs.size:
            return None
        sizes = self._round_sizes(open_pairs)
        asks = {int(p): pairs.next_items(int(p), int(min(sizes[k], self.cap - n[p])))
                for k, p in enumerate(open_pairs)}
        asked = [[] for _ in names]  # every model's items over its open pairs (mostly the same ones)
        for p, items in asks.items():
            asked[ii[p]].append(items)
            asked[jj[p]].append(items)
        need = [[i for i in np.unique(np.concatenate(a)).tolist() if i not in known[m]] if a else []
                for m, a in enumerate(asked)]
        requests = {names[m]: np.array(need[m], dtype=np.int64) for m in range(len(names)) if need[m]}
        still = {names[m] for p in open_pairs for m in (ii[p], jj[p])}  # models whose servers stay useful
        got = _losses(self.pool.losses_of(requests, open_names=sorted(still)), names, session.fail)
        for m, losses in got.items():
            known[m].update(zip(requests[names[m]].tolist(), losses.tolist(), strict=True))
        fed = {}
        for p, items in asks.items():
            if ii[p] in session.dead or jj[p] in session.dead:
                continue  # stopped undecided (stopping is always allowed)
            a = np.array([known[ii[p]][int(i)] for i in items])
            b = np.array([known[jj[p]][int(i)] for i in items])
            fed[p] = (items, (a - b + 1.0) / 2.0)
        session.feed(fed)
        session.fold(known, self.plan.data.n_items if self.plan.judge_strata else 0)
        return self.records

    def result(self, rounds: int) -> JobResult:
        plan = self.plan
        return self.session.result(self.session.finish(), plan.cfg, plan.data, rounds=rounds, full=plan.full_budget())


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
