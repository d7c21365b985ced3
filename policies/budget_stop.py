"""The budget stop: end a candidate, not certified, once its remaining budget is unlikely to certify it.

A testing candidate is certified when its log e-value reaches its threshold c. After t human labels its log e-value is
log E_t, and n - t labels of its budget are left. Its path so far tells how fast its evidence grows: over the later half
of the path (a mixture's growth settles once its weights concentrate) the increments of log E have mean g and standard
deviation s over w labels.

Model the rest of the path as a Brownian motion with drift mu and variance s^2 per label, started at log E_t. The chance
that it reaches c within m = n - t labels is the first-passage probability of drifted Brownian motion (the reflection
principle; e.g. Borodin and Salminen, *Handbook of Brownian Motion*, part II, 2.1.1.4), with b = c - log E_t > 0:

    P(max_{u <= m} X_u >= b) = Phi((mu m - b) / (s sqrt m)) + exp(2 mu b / s^2) Phi((-b - mu m) / (s sqrt m))   (1)

The rule at level gamma (:func:`stops`): take mu at the upper (1 - gamma/2) confidence bound of the growth,
g + z_{1 - gamma/2} s / sqrt(w), plus the regret term below, and stop when (1) at that mu is below gamma / 2. Under
the model, a candidate that the full budget would certify is stopped with probability at most gamma (its growth above
the bound: gamma / 2; its path reaching c from where it stopped: gamma / 2). The model is an approximation of a betting
e-process; benchmarks/budget_stop.py measures the rate on the bundled tables.

**The regret term.** A learned bet (UP is a mixture over bets; WSR and ONS adapt theirs) grows like
t G - (1/2) log t + O(1), G the best constant bet's growth: its slope keeps rising toward G, so the later half's slope,
from h = t - w to t, understates G by (1/2) log(t/h) / (t - h), while the rest's gain over m labels is
G m - (1/2) log((t + m)/t). The drift taken is therefore the slope plus (1/2) log(t/h)/(t - h) - (1/2) log((t + m)/t)/m
(:meth:`Growth.regret`), which is positive (log 2 / t against at most 1 / (2t) at h = t/2): the term only ever makes
the stop wait longer. benchmarks/budget_stop_model.py replays the rule with and without it on full-budget paths.

**The guarantee is unchanged.** Stopping a candidate never certifies it, so every certificate's error control holds
whatever the rule does (optional stopping of an e-process, docs/statistics.md); the stop only costs power, which the
level bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import check_level

DEFAULT_LEVEL = 0.1  # gamma where a level is needed and the job sets none (the oracle's labels to end a candidate)
MIN_WINDOW = 20  # increments the growth is estimated from before the rule may stop a candidate (40 human labels)
# The rule's version, part of a job's identity while the stop is on: a job folder made under an earlier rule is not shown
# as this rule's answer. 1: the own test alone; 2: both sides whenever a futility test runs; 3: the regret term, and
# both sides only in a gate, the own test alone in a selection (Rules.decides_futility).
RULE_VERSION = 3


def reach_probability(gap, drift, spread, remaining) -> np.ndarray:
    """Eq. (1): the chance that Brownian motion with ``drift`` and standard deviation ``spread`` per label, started
    ``gap`` below a barrier, reaches it within ``remaining`` labels (1 where ``gap`` <= 0; 0 where nothing remains
    and ``gap`` > 0). Broadcast over its arguments; the second term is taken in logs, since exp(2 mu b / s^2) overflows
    where its Phi underflows."""
    b, mu, s, m = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (gap, drift, spread, remaining)))
    if (s < 0).any() or (m < 0).any():
        raise ValueError("spread and remaining must be >= 0")
    out = np.zeros(b.shape)
    out[b <= 0] = 1.0
    live = (b > 0) & (m > 0)
    flat = live & (s == 0)  # no noise: the drift alone reaches it, or not
    out[flat] = (mu[flat] * m[flat] >= b[flat]).astype(np.float64)
    go = live & (s > 0)
    if go.any():
        b, mu, s, m = b[go], mu[go], s[go], m[go]
        root = s * np.sqrt(m)
        # the normal cdf and its log from scipy.special (what scipy.stats.norm computes them with; special loads
        # in a fraction of stats' time, and not before a job needs it)
        from scipy.special import log_ndtr, ndtr

        first = ndtr((mu * m - b) / root)
        second = np.exp(np.minimum(2.0 * mu * b / s**2 + log_ndtr((-b - mu * m) / root), 0.0))
        out[go] = np.minimum(first + second, 1.0)
    return out


@dataclass(frozen=True)
class Growth:
    """How a log e-value path grew over the later half of its labels: mean ``rate`` and standard deviation ``spread``
    of its increments per label, over the last ``window`` of its ``labels`` increments."""

    rate: float
    spread: float
    window: int
    labels: int = 0  # the path's length t (the window is its later half)

    @classmethod
    def of(cls, path) -> Growth:
        """The later half of ``path`` (log E after each label; its start is log E_0 = 0): the rate is its gain over the
        window divided by the window, the spread its increments' standard deviation."""
        p = np.asarray(path, dtype=np.float64)
        t = p.size
        if t == 0:
            return cls(0.0, 0.0, 0)
        half = t // 2
        rate = float((p[-1] - (p[half - 1] if half else 0.0)) / (t - half))
        steps = np.diff(p, prepend=0.0)[half:]
        return cls(rate, float(steps.std(ddof=1)) if steps.size > 1 else 0.0, int(steps.size), t)

    def upper_rate(self, level: float) -> float:
        """The upper (1 - level) confidence bound of the rate (a normal approximation)."""
        from scipy.special import ndtri  # the normal quantile (scipy.stats.norm.ppf's)

        return self.rate + float(ndtri(1.0 - level)) * self.spread / np.sqrt(max(self.window, 1))

    def regret(self, remaining: int) -> float:
        """The regret term (module docstring): what a learned bet's window slope leaves out of its best growth,
        (1/2) log(t/h)/(t - h), less what the next ``remaining`` labels will lose to it, (1/2) log((t + m)/t)/m."""
        t, m = self.labels, remaining
        h = t - self.window
        if h <= 0 or self.window <= 0 or m <= 0:
            return 0.0
        return 0.5 * (np.log(t / h) / self.window - np.log1p(m / t) / m)


def stops(growth: Growth, log_e: float, log_threshold: float, remaining: int, level: float) -> bool:
    """Whether the budget stop at ``level`` ends a candidate now (see the module docstring): its growth's upper
    (1 - level/2) bound, with the regret term, makes reaching ``log_threshold`` from ``log_e`` within ``remaining`` labels less likely than
    level / 2. Never before :data:`MIN_WINDOW` increments, nor once the threshold is reached."""
    level = check_level(level, "scheduling.budget_stop")
    # no noise to bound (every increment alike, e.g. a model that answers as its baseline): the model says nothing
    if growth.window < MIN_WINDOW or remaining <= 0 or log_e >= log_threshold or growth.spread == 0:
        return False
    drift = growth.upper_rate(level / 2.0) + growth.regret(remaining)
    return float(reach_probability(log_threshold - log_e, drift, growth.spread, remaining)) < level / 2.0
