"""Multiple-testing procedures over candidates: one object per procedure, one registry.

A :class:`Procedure` answers the four questions a job asks of it, and nothing else:

* **levels**: the level of each candidate's own decision or interval (:meth:`~Procedure.candidate_deltas`; the reported
  intervals are simultaneous at it);
* **thresholds given the evidence so far**: the log e-value each candidate needs now (:meth:`~Procedure.log_thresholds`;
  Holm loosens its level as candidates are certified);
* **the final certified set** (:meth:`~Procedure.certified` for running-maximum e-values,
  :meth:`~Procedure.certified_by_decisions` for the decisions of estimation policies);
* **the statement about the selection**: upper bounds on every candidate's R that hold *together* with
  probability >= 1 - delta and agree with the decisions (:meth:`~Procedure.joint_levels`,
  :meth:`~Procedure.joint_bounds`). The selected candidate was chosen *because* its test passed, so its own bound alone
  does not keep its level after the selection; the joint bounds do, whatever the selection rule;
* **wording** for the certificate (:meth:`~Procedure.level`).

Scheduling hooks with trivial defaults (:meth:`~Procedure.active`, :meth:`~Procedure.after_settle`) let a procedure
restrict which candidates run (FST's frontier): they see a frozen :class:`CandidateView` of each candidate and return
decisions (the candidates to run, :class:`Stop`); only the engine changes its records. Everything that depends on the
procedure consults :data:`PROCEDURES`; a new procedure is a subclass passed to :func:`register_procedure`.

Why early stopping keeps the guarantees: see :mod:`certsel.orchestrator.engine.selection`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from .registry import Registry


@dataclass(frozen=True)
class CandidateView:
    """What a procedure's scheduling hooks see of one candidate, in the job's order."""

    name: str
    finished: bool  # its evaluation ended (certified, failed, stopped, ...)
    failed: bool  # it ended without certification while it was being evaluated


@dataclass(frozen=True)
class Stop:
    """A procedure's decision: end this unfinished candidate, it can no longer change the selection (the engine marks a
    running one stopped, a waiting one skipped)."""

    name: str
    reason: str



class Procedure:
    """Family-wise error control over K candidates at level delta (see the module docstring).

    Class attributes, read by config validation: ``testing`` / ``estimation`` (runs with e-value policies / with Seq and
    Cer-Eval), ``ranking`` (compares every pair of models instead of testing R <= alpha), ``needs_order`` (a fixed
    sequence), ``needs_objective`` (selects by an objective), ``allows_prune`` (``scheduling.prune`` keeps its
    selection), ``min_candidates``, ``gates`` (each candidate decided on its own, nothing selected: ``certsel gate``).
    """

    name: ClassVar[str] = ""
    testing: ClassVar[bool] = True
    estimation: ClassVar[bool] = True
    ranking: ClassVar[bool] = False
    needs_order: ClassVar[bool] = False
    needs_objective: ClassVar[bool] = True
    allows_prune: ClassVar[bool] = False
    min_candidates: ClassVar[int] = 1
    gates: ClassVar[bool] = False
    simultaneous: ClassVar[bool] = True  # False: its decisions are per candidate, and no bound holds jointly

    # -- levels and thresholds ------------------------------------------------------------
    def candidate_deltas(self, delta: float, K: int) -> np.ndarray:
        """The level of each candidate's own decision and interval, shape (K,)."""
        raise NotImplementedError

    def log_thresholds(self, delta: float, certified: np.ndarray) -> np.ndarray:
        """log of the e-value each candidate needs now, given the certified mask so far (K,). Default: 1 / candidate
        level."""
        return -np.log(self.candidate_deltas(delta, len(certified)))

    def decision_deltas(self, delta: float, max_log_e: np.ndarray) -> np.ndarray:
        """The level at which each candidate's decision was taken, given the final evidence (K,): its one-sided bound is
        reported there, so that it is <= alpha exactly when the candidate passed. Default: :meth:`candidate_deltas`."""
        return self.candidate_deltas(delta, len(max_log_e))

    # -- the final set ----------------------------------------------------------------------
    def certified(self, max_log_e: np.ndarray, delta: float) -> np.ndarray:
        """Certified mask from running-maximum log e-values (..., K): ``max_log_e >= -log(level)``, the same test the
        candidates' bounds are seeded with."""
        raise NotImplementedError

    def certified_by_decisions(self, ok: np.ndarray) -> np.ndarray:
        """Certified mask from estimation policies' own decisions (..., K), each made at :meth:`candidate_deltas`.
        Default: the decisions themselves."""
        return np.asarray(ok, dtype=bool)

    # -- the statement about the selection ----------------------------------------------------
    def joint_levels(self, delta: float, certified: np.ndarray) -> np.ndarray:
        """The level at which each candidate's own one-sided bound enters the simultaneous statement (K,), NaN where
        none. Default: none."""
        return np.full(len(certified), np.nan)

    def joint_bounds(self, alpha: float, certified: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Upper bounds on every candidate's R that hold together with probability >= 1 - delta (K,), NaN for "no
        statement"; ``own``: the candidates' own bounds at :meth:`joint_levels`. Default: alpha for the certified
        candidates (the family-wise guarantee itself)."""
        return np.where(certified, float(alpha), np.nan)

    def simultaneous_bounds(self, delta: float, alpha: float, certified: np.ndarray, own: np.ndarray) -> np.ndarray:
        """:meth:`joint_bounds`, with alpha for a certified candidate whose own bound is missing, checked to agree with
        the decisions (<= alpha exactly for the certified). All NaN for a procedure that is not ``simultaneous``."""
        certified = np.asarray(certified, dtype=bool)
        if not self.simultaneous:
            return np.full(certified.shape, np.nan)
        out = np.asarray(self.joint_bounds(alpha, certified, np.asarray(own, dtype=np.float64)), dtype=np.float64)
        out = np.where(certified & np.isnan(out), float(alpha), out)
        if np.any(certified & (out > alpha)) or np.any(~certified & (out <= alpha)):
            raise ValueError(f"procedure {self.name!r}: its joint bounds disagree with its certified set")
        return out

    def joint_words(self, alpha: float, n_certified: int, K: int) -> str:
        """What else holds together with the selected candidate's joint bound, in words."""
        return f"simultaneously for the {n_certified} certified of {K} candidates (R <= {alpha:g} for each)"

    # -- the selection -----------------------------------------------------------------------------
    def selection(self, certified: np.ndarray, key: np.ndarray | None) -> int:
        """The selected candidate's index, -1 for none: the certified one with the smallest ``key`` (smaller is better;
        ties to the lower index), or without an objective the last certified one (the end of a fixed sequence's
        certified prefix)."""
        certified = np.asarray(certified, dtype=bool)
        if not certified.any():
            return -1
        if key is None:
            return int(np.flatnonzero(certified)[-1])
        return int(np.argmin(np.where(certified, np.asarray(key, dtype=np.float64), np.inf)))

    # -- scheduling hooks -----------------------------------------------------------------------
    def active(self, open_: Sequence[CandidateView], lookahead: int) -> list[CandidateView]:
        """Which unfinished candidates run next round (adaptive mode). Default: all."""
        return list(open_)

    def after_settle(self, candidates: Sequence[CandidateView]) -> list[Stop]:
        """The candidates the procedure stops once others are settled (adaptive mode). Default: none."""
        return []

    # -- wording -----------------------------------------------------------------------------------
    def level(self, delta: float, K: int) -> str:
        """The procedure and its per-candidate level, in words."""
        raise NotImplementedError

    def threshold_words(self, delta: float, K: int) -> str:
        """The e-value a candidate needs, in words (next to the e-values in reports)."""
        return f"1/delta = {1.0 / float(self.candidate_deltas(delta, K).min()):.4g}"


class FixedSequence(Procedure):
    """Fixed-sequence testing: every candidate at the full delta in a pre-set order; the certified set is the longest
    certified prefix."""

    name = "fst"
    needs_order = True
    needs_objective = False

    def candidate_deltas(self, delta, K):
        return np.full(K, float(delta))

    def certified(self, max_log_e, delta):
        return self.certified_by_decisions(np.asarray(max_log_e) >= -np.log(float(delta)))

    def certified_by_decisions(self, ok):
        return np.cumprod(np.asarray(ok, dtype=bool), axis=-1).astype(bool)

    # Compatible simultaneous bounds of fixed-sequence testing (Hsu and Berger, JASA 1999): R <= alpha for the certified
    # prefix, the first candidate that failed at its own bound at delta, nothing after it; with the whole sequence
    # certified, the last candidate at its own bound. Why they hold together: let j be the first candidate in the order
    # with R_j > alpha (or the last one, if there is none). Any false statement needs the test of j to reject the target
    # max(R_j, alpha) (for a certified j: it rejected alpha, so every larger target; for the first failure or the last:
    # its own bound missed R_j), one event of probability <= delta for the one fixed candidate j.
    def joint_levels(self, delta, certified):
        out = np.full(len(certified), np.nan)
        out[min(int(np.sum(certified)), len(certified) - 1)] = delta
        return out

    def joint_bounds(self, alpha, certified, own):
        c, K = int(np.sum(certified)), len(certified)
        out = np.where(certified, float(alpha), np.nan)
        out[min(c, K - 1)] = own[c] if c < K else min(float(alpha), own[K - 1])
        return out

    def active(self, open_, lookahead):
        # labels go to the frontier (the first candidate not yet settled) and lookahead after it
        return list(open_[: 1 + lookahead])

    def after_settle(self, candidates):
        # once a candidate failed, no later one can join the certified prefix
        first = next((k for k, c in enumerate(candidates) if c.failed), None)
        if first is None:
            return []
        why = f"after {candidates[first].name} failed"
        return [Stop(c.name, why) for c in candidates[first + 1:] if not c.finished]

    def level(self, delta, K):
        return f"fixed-sequence, each at delta = {delta:g}"


class Bonferroni(Procedure):
    """Bonferroni: every candidate at delta/K."""

    name = "bonferroni"
    allows_prune = True
    # without an objective the selection is the certified candidate with the smallest simultaneous bound
    needs_objective = False

    def candidate_deltas(self, delta, K):
        return np.full(K, float(delta) / K)

    def certified(self, max_log_e, delta):
        max_log_e = np.asarray(max_log_e)
        return max_log_e >= -np.log(float(delta) / max_log_e.shape[-1])

    # every candidate's own bound at delta/K: they hold together by the union bound
    def joint_levels(self, delta, certified):
        return self.candidate_deltas(delta, len(certified))

    def joint_bounds(self, alpha, certified, own):
        return own

    def joint_words(self, alpha, n_certified, K):
        return (f"simultaneously with the bounds of all {K} candidates ({n_certified} certified R <= {alpha:g})")

    def level(self, delta, K):
        return f"Bonferroni, each at delta/K = {delta / K:.4g}"

    def threshold_words(self, delta, K):
        return f"K/delta = {K / delta:.4g}"


class Holm(Bonferroni):
    """Holm's step-down on p = 1/E: with c candidates certified, the next needs E >= (K - c)/delta. It starts at
    Bonferroni's level delta/K (the level of the reported intervals) and certifies everything Bonferroni does."""

    name = "holm"
    estimation = False  # needs e-values: the estimation policies decide at one fixed level
    allows_prune = False  # pruning could change Holm's selection

    def log_thresholds(self, delta, certified):
        K = len(certified)
        c = int(np.sum(certified))
        return np.full(K, math.log(max(K - c, 1) / delta))

    def certified(self, max_log_e, delta):
        # the step-down on the sorted evidence: the j-th largest (0-based) needs
        # max log E >= -log(delta/(K - j)), and certification stops at the first that fails
        max_log_e = np.asarray(max_log_e, dtype=np.float64)
        K = max_log_e.shape[-1]
        order = np.argsort(-max_log_e, axis=-1, kind="stable")
        ranked = np.take_along_axis(max_log_e, order, axis=-1)
        passed = np.cumprod(ranked >= -np.log(float(delta) / (K - np.arange(K))), axis=-1).astype(bool)
        out = np.zeros(max_log_e.shape, dtype=bool)
        np.put_along_axis(out, order, passed, axis=-1)
        return out

    def decision_deltas(self, delta, max_log_e):
        # the j-th largest e-value (0-based) is tested at delta/(K - j) while the step-down
        # goes on; every candidate after the first failure at the level that failed
        max_log_e = np.asarray(max_log_e, dtype=np.float64)
        K = max_log_e.size
        order = np.argsort(-max_log_e, kind="stable")
        levels = delta / (K - np.arange(K))
        c = int(self.certified(max_log_e, delta).sum())
        out = np.empty(K)
        # with all K certified there is no failed step (max(..., 1) only avoids dividing by 0)
        out[order] = np.where(np.arange(K) < c, levels, delta / max(K - c, 1))
        return out

    # Compatible simultaneous bounds of Holm's procedure (Strassburger and Bretz, Stat. Med. 2008): with m > 0
    # candidates not certified, R <= alpha for the certified and each other one at its own bound at delta/m; with all
    # certified, min(alpha, own bound at delta/K). Why they hold together: let T be the t candidates with R > alpha. If
    # T is empty, only an own bound can be wrong: at most K(delta/K). Otherwise every false statement needs some k in T
    # whose test rejects R_k at level delta/t: a certified one was rejected at a level <= delta/t (Holm's first
    # rejection of a candidate in T happens with >= t left), an uncertified one's bound at delta/m missed (m >= t when
    # no candidate in T is certified), and with all certified some k in T was rejected. Union over T: <= t (delta/t) =
    # delta.
    def joint_levels(self, delta, certified):
        K, m = len(certified), len(certified) - int(np.sum(certified))
        return np.full(K, delta / K) if m == 0 else np.where(certified, np.nan, delta / m)

    def joint_bounds(self, alpha, certified, own):
        return np.minimum(float(alpha), own) if np.all(certified) else np.where(certified, float(alpha), own)

    def joint_words(self, alpha, n_certified, K):
        return Procedure.joint_words(self, alpha, n_certified, K)

    def level(self, delta, K):
        return f"Holm step-down from delta/K = {delta / K:.4g} to delta = {delta:g}"

    def threshold_words(self, delta, K):
        return f"(K - c)/delta, from {K / delta:.4g} down to {1 / delta:.4g}"


class Gate(Procedure):
    """A gate: each candidate tested on its own at delta, nothing selected (``certsel gate``).

    Outcomes: pass (R <= alpha certified at delta), fail (R >= alpha certified at delta by the futility test on the
    mirrored losses) or undecided (budget spent first). Each is wrong with probability at most delta on its own: K
    candidates gated at delta can hold up to K delta wrong outcomes in expectation (gate at delta / K for a family-wise
    statement).
    """

    name = "gate"
    needs_objective = False
    gates = True
    simultaneous = False  # every bound a gate states is the candidate's own, at delta

    def candidate_deltas(self, delta, K):
        return np.full(K, float(delta))

    def certified(self, max_log_e, delta):
        return np.asarray(max_log_e) >= -np.log(float(delta))

    def selection(self, certified, key):
        return -1  # a gate decides each candidate; it selects none

    def level(self, delta, K):
        return f"gate, each candidate on its own at delta = {delta:g}"


class PairwiseRanking(Procedure):
    """Every pair of models compared at delta/P (Bonferroni over the P = K(K-1)/2 pairs); a model is selected when it is
    certified better than every other one."""

    name = "pairwise"
    testing = False
    ranking = True
    needs_objective = False
    min_candidates = 2

    @staticmethod
    def n_pairs(K: int) -> int:
        return K * (K - 1) // 2

    def pair_delta(self, delta: float, K: int) -> float:
        return float(delta) / self.n_pairs(K)

    def candidate_deltas(self, delta, K):
        return np.full(K, self.pair_delta(delta, K))

    def certified(self, max_log_e, delta):
        raise TypeError("a pairwise ranking certifies orders of pairs, not e-values per candidate")

    def level(self, delta, K):
        P = self.n_pairs(K)
        return f"pairwise, each of {P} pairs at delta/P = {delta / P:.4g}"

    def threshold_words(self, delta, K):
        return f"each pair's sign at delta/P = {self.pair_delta(delta, K):.4g}"


PROCEDURES: Registry[Procedure] = Registry("procedure", Procedure)


def register_procedure(proc: Procedure | type[Procedure]) -> Procedure:
    """Add a procedure (an instance, or a class with a no-argument constructor) to :data:`PROCEDURES` under its ``name``
    (``procedure: NAME`` in a job file). Returns the instance."""
    return PROCEDURES.register(proc)


for _p in (FixedSequence, Bonferroni, Holm, Gate, PairwiseRanking):
    register_procedure(_p)


def get_procedure(name: str) -> Procedure:
    return PROCEDURES.lookup(name)
