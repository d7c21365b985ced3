"""The state machine every certified estimation policy is (Base, Seq and Cer-Eval in :mod:`.cer_eval`, a user's
registered kind): ``next_items`` / ``update`` / ``done``, the estimate and its interval, the decision against a
threshold, and snapshots that restore the random generator with the state."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import check_level, check_losses, check_positive_int

RADII = ("paper", "betting")
_FORMAT = 3


def _check_epsilon(epsilon):
    if epsilon is None:
        return None
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}") from None
    if not math.isfinite(e) or e <= 0.0:
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    return e


def _check_radius(radius):
    if radius not in RADII:
        raise ValueError(f"radius must be one of {RADII}, got {radius!r}")
    return radius


@dataclass(frozen=True)
class EstimationResult:
    """Outcome of :meth:`EstimationPolicy.run`; ``path`` (when recorded): one row per update, (n_labeled, estimate,
    ci_low, ci_high)."""

    estimate: float
    ci: tuple[float, float]
    radius: float
    n_labeled: int
    certified: bool
    decision: int
    exhausted: bool
    path: np.ndarray | None = None


class EstimationPolicy:
    """Shared state machine; see the module docstring. Not instantiated directly."""

    name = "policy"

    def __init__(self, n_items, *, delta, epsilon=None, threshold=None, seed=None, strict=False):
        self.n_items = check_positive_int(n_items, "n_items")
        self.delta = check_level(delta, "delta")
        self.epsilon = _check_epsilon(epsilon)
        self.threshold = None if threshold is None else check_level(threshold, "threshold")
        # strict: certify R < threshold (a comparison, where an exact tie is no order); otherwise R <= threshold
        self.strict = bool(strict)
        self._rng = np.random.default_rng(seed)
        self._labeled: list[int] = []
        self._losses: list[float] = []
        self._pending: list[int] = []
        self._status = np.zeros(self.n_items, dtype=np.int8)  # 0 free, 1 pending, 2 labelled

    # -- interface -------------------------------------------------------------------
    @property
    def n_labeled(self) -> int:
        return len(self._labeled)

    @property
    def labeled_items(self) -> np.ndarray:
        return np.asarray(self._labeled, dtype=np.int64)

    @property
    def labeled_losses(self) -> np.ndarray:
        return np.asarray(self._losses, dtype=np.float64)

    @property
    def pending_items(self) -> np.ndarray:
        return np.asarray(self._pending, dtype=np.int64)

    @property
    def exhausted(self) -> bool:
        return self.n_labeled == self.n_items

    def bounds(self) -> tuple[float, float, float, float]:
        """(one-sided lower, one-sided upper) at level delta, then the two-sided interval."""
        raise NotImplementedError

    @property
    def ci(self) -> tuple[float, float]:
        """The two-sided interval: contains R at every step with probability >= 1 - delta."""
        _, _, lo, hi = self.bounds()
        return lo, hi

    @property
    def lower_bound(self) -> float:
        """One-sided: R >= lower_bound at every step with probability >= 1 - delta."""
        return self.bounds()[0]

    @property
    def upper_bound(self) -> float:
        """One-sided: R <= upper_bound at every step with probability >= 1 - delta."""
        return self.bounds()[1]

    @property
    def estimate(self) -> float:
        lo, hi = self.ci
        return 0.5 * (lo + hi)

    @property
    def radius(self) -> float:
        lo, hi = self.ci
        return 0.5 * (hi - lo)

    @property
    def certified(self) -> bool:
        """The interval is at most ``epsilon`` wide on each side."""
        return self.epsilon is not None and self.radius <= self.epsilon

    @property
    def decision(self) -> int:
        """Threshold decision from the one-sided bounds at level delta: -1 certifies R <= threshold (upper bound at or
        below it; for a ``strict`` policy R < threshold, upper bound below it), +1 certifies R >= threshold (lower bound
        above it), 0 undecided. Each claim is false with probability at most delta."""
        if self.threshold is None:
            return 0
        lo, hi, _, _ = self.bounds()
        # hi <= threshold certifies (at equality too, so the printed bound is <= alpha exactly when certified)
        below = hi < self.threshold if self.strict else hi <= self.threshold
        return -1 if below else (1 if lo > self.threshold else 0)

    @property
    def done(self) -> bool:
        return self.exhausted or self.certified or self.decision != 0

    def next_items(self, batch: int = 1) -> np.ndarray:
        """Up to ``batch`` items to label next (empty once the policy is done)."""
        batch = check_positive_int(batch, "batch")
        if self.done:
            return np.zeros(0, dtype=np.int64)
        out = self._choose(batch)
        self._status[out] = 1
        self._pending.extend(int(i) for i in out)
        return np.asarray(out, dtype=np.int64)

    def update(self, items, losses) -> None:
        """Record the losses of previously requested ``items`` (any subset, any order)."""
        items = np.atleast_1d(np.asarray(items))
        if items.ndim != 1 or (items.size and items.dtype.kind not in "iu"):
            raise ValueError("items must be a 1-D array of integer item indices")
        z = np.atleast_1d(np.asarray(losses, dtype=np.float64))
        if z.shape != items.shape:
            raise ValueError(f"got {items.size} items but {z.size} losses")
        if items.size == 0:
            return
        check_losses(z, "losses", (0.0, 1.0))
        if np.unique(items).size != items.size:
            raise ValueError("items contain duplicates")
        if items.min() < 0 or items.max() >= self.n_items:
            raise ValueError(f"items must be in [0, {self.n_items}), got {items.min()}..{items.max()}")
        not_pending = items[self._status[items] != 1]
        if not_pending.size:
            raise ValueError(
                f"items {not_pending[:5].tolist()} were not requested by next_items() or are already labelled"
            )
        items = items.astype(np.int64)
        self._status[items] = 2
        self._labeled.extend(items.tolist())
        self._losses.extend(z.tolist())
        done = set(items.tolist())
        self._pending = [i for i in self._pending if i not in done]
        self._observe(items, z)

    def run(self, losses, *, batch: int = 1, record: bool = False) -> EstimationResult:
        """Drive the policy on a full loss vector, revealing only the losses it asks for.

        With ``epsilon=None`` and no threshold it runs until the test set is exhausted and records the whole path: the
        choices never depend on epsilon, so the stopping time for any epsilon is the first row of ``path`` with a radius
        below it.
        """
        z = check_losses(losses, "losses", (0.0, 1.0))
        if z.shape != (self.n_items,):
            raise ValueError(f"losses must have shape ({self.n_items},), got {z.shape}")
        rows = []
        while not self.done:
            items = self.next_items(batch)
            if items.size == 0:
                break
            self.update(items, z[items])
            if record:
                lo, hi = self.ci
                rows.append((self.n_labeled, 0.5 * (lo + hi), lo, hi))
        lo, hi = self.ci
        return EstimationResult(
            estimate=self.estimate, ci=(lo, hi), radius=self.radius, n_labeled=self.n_labeled,
            certified=self.certified, decision=self.decision, exhausted=self.exhausted,
            path=np.asarray(rows, dtype=np.float64).reshape(-1, 4) if record else None,
        )

    # -- snapshot ----------------------------------------------------------------------
    def _base_state(self) -> dict:
        return {
            "format": _FORMAT,
            "policy": self.name,
            "n_items": self.n_items,
            "delta": self.delta,
            "epsilon": self.epsilon,
            "threshold": self.threshold,
            "strict": self.strict,
            "rng": self._rng.bit_generator.state,
            "labeled": list(self._labeled),
            "losses": list(self._losses),
            "pending": list(self._pending),
        }

    def _restore_base(self, state: dict) -> None:
        if state.get("format") != _FORMAT or state.get("policy") != self.name:
            raise ValueError(f"not a {self.name} snapshot (format {state.get('format')!r}, policy {state.get('policy')!r})")
        self._rng.bit_generator.state = state["rng"]
        self.strict = bool(state["strict"])
        self._labeled = [int(i) for i in state["labeled"]]
        self._losses = [float(x) for x in state["losses"]]
        self._pending = [int(i) for i in state["pending"]]
        self._status[:] = 0
        self._status[self._pending] = 1
        self._status[self._labeled] = 2

    # -- hooks -------------------------------------------------------------------------
    def _choose(self, batch: int) -> list[int]:
        raise NotImplementedError

    def _observe(self, items: np.ndarray, losses: np.ndarray) -> None:
        raise NotImplementedError
