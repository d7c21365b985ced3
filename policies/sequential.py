"""Online form of the R-Eval / R-AutoEval / R-AutoEval+ e-process, for drivers and actors.

:class:`SequentialTest` consumes human labels (with their judge labels) as they arrive, in batches of any size, and
after every batch gives exactly the e-values of :func:`certsel.policies.log_evalue_paths` on the concatenated data. Its
state is a handful of arrays (:meth:`state_dict`), so a candidate can be checkpointed and restored without replaying its
labels; it is vectorised over a batch of candidates/replications. Stopping, resuming or inspecting the process at
data-dependent times keeps the guarantee (a test supermartingale under H0; Ville's inequality).
"""

from __future__ import annotations

import numpy as np

from ._validation import (
    check_bounds,
    check_level,
    check_positive_int,
    check_rhos,
    check_target,
    check_weights,
)
from .autoeval import (
    DEFAULT_RHOS,
    check_observation,
    component_log_evalues,
    effective_observations,
    mix_log_evalues,
    mixture_weights,
    predictable_mixture,
    test_from_log_evalues,
)
from .betting import BettingState, BettingStrategy, get_strategy
from .sampling import IID, Sampling, TableDraws, WithoutReplacement

_FORMAT = 4


class SequentialTest:
    """Anytime-valid test of H0: R > alpha for a batch of candidates, fed incrementally.

    Parameters as :func:`certsel.policies.evalue_path`, plus ``batch_shape`` (``()`` for one candidate) and ``r``, the
    judge-only labels per human label (``floor(N/n)`` in Algorithm 1; ignored for R-Eval). ``horizon`` is required: the
    WSR bet and the UP prior depend on it and must be fixed before the first label. ``self.strategy`` is the betting
    object, ``self.betting`` its name. The split observation's running judge mean and the ``WithoutReplacement`` streams
    are part of the state.
    """

    def __init__(
        self,
        batch_shape=(),
        *,
        alpha: float,
        delta: float,
        horizon: int,
        rhos=DEFAULT_RHOS,
        betting: str | dict | BettingStrategy = "up",
        r: int = 1,
        loss_bounds=(0.0, 1.0),
        weights=None,
        observation: str = "paper",
        sampling: Sampling = IID(),
    ):
        self.observation = check_observation(observation)
        if not isinstance(sampling, Sampling):
            raise ValueError(f"sampling must be IID() or WithoutReplacement(N), got {sampling!r}")
        self.sampling = sampling
        self.loss_bounds = check_bounds(loss_bounds)
        self.alpha = check_target(alpha, self.loss_bounds)
        self.delta = check_level(delta, "delta")
        self.rhos = check_rhos(rhos)
        self.weights = check_weights(weights, self.rhos.size)
        self.horizon = check_positive_int(horizon, "horizon")
        self.strategy = get_strategy(betting)
        self.betting = self.strategy.name
        self.uses_judge = bool(np.any(self.rhos != 0.0))
        self.r = check_positive_int(r, "r") if self.uses_judge else 0
        self.batch_shape = tuple(int(b) for b in batch_shape)
        S = self.rhos.size
        self._log_e_s = np.zeros(self.batch_shape + (S,))
        self._max_log_e = np.zeros(self.batch_shape)
        self._first = np.zeros(self.batch_shape, dtype=np.int64)
        self._est_sum = np.zeros(self.batch_shape)  # sum of the unbiased estimate's observations
        # the split observation's judge labels so far (sum, with one pseudo-label at the middle of the range)
        self._judge_sum = np.full(self.batch_shape, 0.5 * sum(self.loss_bounds))
        self._judge_count = 1
        self._state = BettingState()
        self._draws = sampling.start(self.batch_shape)

    # -- feeding -----------------------------------------------------------------------
    def update(self, human, judge_labeled=None, judge_unlabeled=None) -> np.ndarray:
        """Consume t new human labels per batch element (last axis), with the judge's losses on the same items and r*t
        judge-only losses. Returns log E for the t new rounds."""
        h = np.asarray(human, dtype=np.float64)
        if h.shape[:-1] != self.batch_shape:
            raise ValueError(f"human must have batch shape {self.batch_shape}, got {h.shape[:-1]}")
        t = h.shape[-1] if h.ndim else 0
        if self.uses_judge:
            ju = None if judge_unlabeled is None else np.asarray(judge_unlabeled, dtype=np.float64)
            if ju is not None and ju.shape[-1] != self.r * t:
                raise ValueError(
                    f"judge_unlabeled must hold r*t = {self.r * t} items per batch element, got {ju.shape[-1]}"
                )
        else:
            judge_labeled = judge_unlabeled = None
        obs = effective_observations(h, judge_labeled, judge_unlabeled, rhos=self.rhos, loss_bounds=self.loss_bounds,
                                     observation=self.observation, judge_seen=(self._judge_sum, self._judge_count),
                                     draws=self._draws)
        self._draws = obs.draws
        if obs.split:
            self._judge_sum, self._judge_count = np.asarray(obs.judge_sum, dtype=np.float64), obs.judge_count
        path, self._state = component_log_evalues(obs, self.alpha, delta=self.delta, betting=self.strategy,
                                                  horizon=self.horizon, state=self._state, return_state=True)
        path = path + self._log_e_s[..., None]
        if t:
            self._est_sum = self._est_sum + predictable_mixture(obs.q, path, self.weights, self._log_e_s).sum(axis=-1)
        self._log_e_s = path[..., -1].copy()
        log_e = mix_log_evalues(path, self.weights)
        res = test_from_log_evalues(log_e, self.delta)
        newly = (self._first == 0) & res.certified
        self._first = np.where(newly, self.n - t + res.labels_to_certify, self._first)
        self._max_log_e = np.maximum(self._max_log_e, res.max_log_evalue)
        return log_e

    # -- reading -----------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Human labels consumed so far."""
        return self._state.count

    @property
    def log_evalue(self) -> np.ndarray:
        """log E_n now (0 before any label)."""
        return mix_log_evalues(self._log_e_s[..., None], self.weights)[..., 0]

    @property
    def max_log_evalue(self) -> np.ndarray:
        """log max_{i<=n} E_i: the evidence the test and the multiple-testing procedures use."""
        return self._max_log_e.copy()

    @property
    def certified(self) -> np.ndarray:
        return self._first > 0

    @property
    def labels_to_certify(self) -> np.ndarray:
        """First round with E_i >= 1/delta (1-based), 0 while not certified."""
        return self._first.copy()

    @property
    def rho_weights(self) -> np.ndarray:
        """Current mixture weights w_{s,n+1} of eq. (13), one per rho."""
        return mixture_weights(self._log_e_s, self.weights)

    @property
    def estimate(self) -> np.ndarray:
        """The unbiased R-AutoEval+ point estimate (:func:`~certsel.policies.autoeval.predictable_mixture`; for R-Eval
        the mean human loss); NaN before any label."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._est_sum / self.n if self.n else np.full(self.batch_shape, np.nan)

    # -- batching ----------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.alpha, self.delta, self.horizon, self.strategy, self.r, self.loss_bounds, self.rhos.tobytes(),
                self.weights.tobytes(), self.observation, self.sampling)

    def _like(self, batch_shape) -> SequentialTest:
        """An empty test with this (already validated) configuration and another batch shape."""
        out = object.__new__(type(self))
        out.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_")})
        out.batch_shape = tuple(batch_shape)
        return out

    @classmethod
    def stack(cls, tests) -> SequentialTest:
        """One test over the batch (k,) of k single-candidate tests with the same configuration and label count, so that
        a host advances them with one :meth:`update` (:meth:`split` gives them back); the betting state's rows are
        concatenated."""
        tests = list(tests)
        first = tests[0]
        key = first._key()
        for t in tests:
            if t.batch_shape != () or t.n != first.n or t._key() != key:
                raise ValueError("stack needs single-candidate tests with one configuration and label count")
        out = first._like((len(tests),))
        out._state = BettingState.stack(t._state for t in tests)
        out._log_e_s = np.stack([t._log_e_s for t in tests])
        out._max_log_e = np.stack([t._max_log_e for t in tests])
        out._first = np.stack([t._first for t in tests])
        out._est_sum = np.stack([t._est_sum for t in tests])
        out._judge_sum = np.stack([t._judge_sum for t in tests])
        out._judge_count = first._judge_count
        out._draws = None if first._draws is None else TableDraws.stack(t._draws for t in tests)
        return out

    def split(self) -> list[SequentialTest]:
        """The inverse of :meth:`stack`: one single-candidate test per batch element."""
        if len(self.batch_shape) != 1:
            raise ValueError(f"split needs a 1-D batch, got batch shape {self.batch_shape}")
        states = self._state.split(self.batch_shape[0])
        parts = []
        for i in range(self.batch_shape[0]):
            t = self._like(())
            t._state = states[i]
            t._log_e_s = self._log_e_s[i].copy()
            t._max_log_e = np.array(self._max_log_e[i])  # 0-d, as in an unstacked test
            t._first = np.array(self._first[i])
            t._est_sum = np.array(self._est_sum[i])
            t._judge_sum = np.array(self._judge_sum[i])
            t._judge_count = self._judge_count
            t._draws = None if self._draws is None else self._draws.element(i)
            parts.append(t)
        return parts

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue exactly: configuration and state, as plain values and numpy arrays."""
        st = self._state
        out = {
            "format": _FORMAT,
            "config": {
                "batch_shape": self.batch_shape, "alpha": self.alpha, "delta": self.delta,
                "horizon": self.horizon, "rhos": self.rhos.tolist(), "betting": self.strategy.spec(),
                "r": max(self.r, 1), "loss_bounds": self.loss_bounds, "weights": self.weights.tolist(),
                "observation": self.observation,
            },
            "betting_state": st.to_dict(),
            "log_e_s": self._log_e_s.copy(),
            "max_log_e": self._max_log_e.copy(),
            "first": self._first.copy(),
            "est_sum": self._est_sum.copy(),
            "judge_sum": self._judge_sum.copy(),
            "judge_count": self._judge_count,
        }
        if self._draws is not None:  # i.i.d. tests keep the snapshot they always had
            out["config"]["population"] = self.sampling.size
            out["draws"] = self._draws.to_dict()
        return out

    @classmethod
    def from_state_dict(cls, state: dict, strategy: BettingStrategy | None = None) -> SequentialTest:
        """Rebuild a test from :meth:`state_dict`; ``strategy``: the strategy object when it is not in this process's
        registry (default: the snapshot's spec looked up there)."""
        if state.get("format") != _FORMAT:
            raise ValueError(f"unsupported SequentialTest state format {state.get('format')!r}")
        config = dict(state["config"])
        if "population" in config:  # the snapshot keeps the table's size (the format of release 0.1)
            config["sampling"] = WithoutReplacement(config.pop("population"))
        if strategy is not None:
            if strategy.spec() != dict(config["betting"]):
                raise ValueError(f"the snapshot's betting {config['betting']!r} is not {strategy.spec()!r}")
            config["betting"] = strategy
        test = cls(**config)
        test._state = BettingState.from_dict(state["betting_state"])
        test._log_e_s = np.array(state["log_e_s"])
        test._max_log_e = np.array(state["max_log_e"])
        test._first = np.array(state["first"])
        test._est_sum = np.array(state["est_sum"], dtype=np.float64)
        test._judge_sum = np.array(state["judge_sum"], dtype=np.float64)
        test._judge_count = int(state["judge_count"])
        draws = state.get("draws")  # absent from the snapshots of i.i.d. tests written before it existed
        test._draws = None if draws is None else TableDraws.from_dict(draws)
        return test
