"""A straightforward per-sample loop implementation of R-AutoEval+ (Algorithm 1).

Written independently of ``certsel.policies`` to check it: plain Python loops over the
samples i and the reliance factors s, the weight update (13) applied literally (the package
uses its telescoped closed form), the WSR moments (21) accumulated term by term (the package
uses cumulative sums) and the UP integrals (19) evaluated as sums over the prior's nodes at
every step. Also used by ``benchmarks/bench_evalue.py`` as the naive baseline.
"""

from __future__ import annotations

import math

import numpy as np


def chebyshev_prior(horizon: int):
    """Gauss-Chebyshev nodes/weights on [0, 1] for the Beta(1/2,1/2) weight."""
    m = horizon // 2 + 1
    nodes = np.array([0.5 * (1 + math.cos((2 * k - 1) * math.pi / (2 * m))) for k in range(1, m + 1)])
    return nodes, np.full(m, 1.0 / m)


def prior_of(prior, rho):
    """(nodes, weights) for reliance factor ``rho``: ``prior`` is one pair for every rho, or a
    function of rho (UP's alternatives prior has an atom on the judge-controlled rhos)."""
    return prior(rho) if callable(prior) else prior


def grid_prior(size: int):
    nodes = (np.arange(size) + 0.5) / size
    dens = 1.0 / np.sqrt(nodes * (1 - nodes))
    return nodes, dens / dens.sum()


class _WSR:
    def __init__(self, scale, delta, horizon, c=0.75, mu0=0.5, var0=0.25):
        self.scale, self.delta, self.horizon, self.c = scale, delta, horizon, c
        self.mu0, self.var0 = mu0, var0
        self.qs: list[float] = []

    def bet(self) -> float:
        i = len(self.qs) + 1  # betting for round i
        total = self.var0
        running = self.mu0
        for j, qj in enumerate(self.qs, start=1):
            running += qj
            mu_j = running / (j + 1)
            total += (qj - mu_j) ** 2
        sigma2 = total / i
        return min(self.c * self.scale, math.sqrt(2 * math.log(1 / self.delta) / (self.horizon * sigma2)))

    def update(self, q: float, alpha: float) -> None:
        self.qs.append(q)


class _UP:
    def __init__(self, scale, nodes, weights):
        self.scale, self.nodes = scale, nodes
        self.wealth = weights.copy()  # prior weight x wealth of each constant bet

    def bet(self) -> float:
        num = float(np.sum(self.nodes * self.wealth))
        den = float(np.sum(self.wealth))
        return self.scale * num / den

    def update(self, q: float, alpha: float) -> None:
        self.wealth = self.wealth * (1 - self.scale * self.nodes * (q - alpha))


class _ONS:
    """Online Newton step on the bet fraction u in [0, c], one observation at a time:
    g = y / (1 - u y) with y = scale (q - alpha), A += g^2, u <- clip(u - 2/(2 - ln 3) g / A)."""

    def __init__(self, scale, c=0.5):
        self.scale, self.c = scale, c
        self.u, self.A = 0.0, 1.0

    def bet(self) -> float:
        return self.scale * self.u

    def update(self, q: float, alpha: float) -> None:
        y = self.scale * (q - alpha)
        g = y / (1 - self.u * y)
        self.A += g * g
        self.u = min(max(self.u - 2 / (2 - math.log(3)) * g / self.A, 0.0), self.c)


def reference_evalue_path(
    human,
    judge_labeled,
    judge_unlabeled,
    *,
    alpha,
    delta,
    rhos,
    betting,
    horizon=None,
    prior=None,
    loss_bounds=(0.0, 1.0),
    ci_scale=False,
):
    """E_1..E_n by Algorithm 1, literally. ``prior`` = (nodes, weights) for UP, or a function
    of rho giving them (default: eq. 19's Beta(1/2, 1/2) by Gauss-Chebyshev)."""
    human = [float(v) for v in human]
    n = len(human)
    horizon = n if horizon is None else horizon
    lo, hi = loss_bounds
    S = len(rhos)
    use_judge = any(r != 0 for r in rhos)
    r = len(judge_unlabeled) // n if use_judge else 0
    if betting == "up" and prior is None:
        prior = chebyshev_prior(horizon)
    w0 = [1.0 / S] * S
    players = []
    for rho in rhos:
        m, M = lo - rho * (hi - lo), hi + rho * (hi - lo)
        scale = 1 / (M - m) if ci_scale else 1 / (M - alpha)
        if betting == "wsr":
            players.append(_WSR(scale, delta, horizon))
        elif betting == "ons":
            players.append(_ONS(scale))
        else:
            players.append(_UP(scale, *prior_of(prior, rho)))
    E = 1.0
    E_s = [1.0] * S
    w = list(w0)
    path = []
    for i in range(n):
        e_s = []
        for s, rho in enumerate(rhos):
            if use_judge:
                block = sum(float(judge_unlabeled[k]) for k in range(r * i, r * (i + 1)))
                q = rho / r * block + human[i] - rho * float(judge_labeled[i])
            else:
                q = human[i]
            lam = players[s].bet()
            e = 1 - lam * (q - alpha)
            E_s[s] *= e
            players[s].update(q, alpha)
            e_s.append(e)
        E *= sum(w[s] * e_s[s] for s in range(S))
        total = sum(w0[s] * E_s[s] for s in range(S))
        w = [w0[s] * E_s[s] / total for s in range(S)]
        path.append(E)
    return np.array(path)


def prpl_eb_loop(x, alpha, c=0.5):
    """Literal loop of the PrPl-EB confidence sequence (Waudby-Smith & Ramdas, Theorem 2).

    Returns (center, radius) after each observation, computed one step at a time from the
    definitions: mu_hat_t = (1/2 + sum_{i<=t} x_i)/(t+1),
    sigma2_hat_t = (1/4 + sum_{i<=t} (x_i - mu_hat_i)^2)/(t+1),
    lambda_t = min(sqrt(2 log(2/alpha) / (sigma2_hat_{t-1} t log(1+t))), c),
    v_t = 4 (x_t - mu_hat_{t-1})^2, psi_E(l) = (-log(1-l) - l)/4.
    """
    import math

    mu_prev, sig_prev = 0.5, 0.25
    s = ss = lam_sum = lam_x = vpsi = 0.0
    centers, radii = [], []
    for t, xt in enumerate(x, start=1):
        lam = min(math.sqrt(2 * math.log(2 / alpha) / (sig_prev * t * math.log(1 + t))), c)
        v = 4 * (xt - mu_prev) ** 2
        vpsi += v * (-math.log(1 - lam) - lam) / 4
        lam_sum += lam
        lam_x += lam * xt
        s += xt
        mu = (0.5 + s) / (t + 1)
        ss += (xt - mu) ** 2
        sig = (0.25 + ss) / (t + 1)
        centers.append(lam_x / lam_sum)
        radii.append((math.log(2 / alpha) + vpsi) / lam_sum)
        mu_prev, sig_prev = mu, sig
    return centers, radii


def log_evalues_from_label_log(log, candidate: str, *, alpha: float, delta: float, horizon: int,
                               rhos=None, observation: str = "split"):
    """R-AutoEval+ log e-values of one candidate recomputed from a job's labels.parquet
    (a pandas frame): human losses in purchase order, the judge's loss on each of those
    items, and the judge-only losses in purchase order; ``observation`` is the jobs' default.
    Returns (log_e path, human rows)."""
    import numpy as np

    from certsel.policies import log_evalue_paths, scheme_rhos

    mine = log[log.candidate == candidate].sort_values("seq")
    human = mine[mine.role == "human"]
    judge = mine[mine.role == "judge"]
    h = human.loss.to_numpy()
    jl = judge[judge.item.isin(human.item)].set_index("item").loss.loc[human.item].to_numpy()
    ju = judge[~judge.item.isin(human.item)].loss.to_numpy()
    rhos = scheme_rhos("r-autoeval+") if rhos is None else np.asarray(rhos)
    return log_evalue_paths(h, jl, ju, alpha=alpha, delta=delta, rhos=rhos, horizon=horizon,
                            observation=observation), human


def hedged_capital_bounds_loop(y, a, b, v, *, delta, bet_level, cap=0.5, known_lo=None, known_hi=None,
                               lo=0.0, hi=1.0, tol=1e-12):
    """Exact bounds of the hedged-capital confidence sequence after each observation.

    Written from the definitions with plain loops: bet sizes
    l_s = sqrt(2 log(1/bet_level) / (I_s log(1+s))) / v_s with I_s = sum_{r<=s} 1/v_r; the
    capital K+_t(m) = prod_{s<=t} (1 + min(l_s, cap/(m - a_s)) (y_s - m)) (no cap where m <= a_s)
    and K-_t(m) = prod (1 - min(l_s, cap/(b_s - m)) (y_s - m)); each one-sided bound is the
    root of log K(m) = threshold found by bisection on [lo, hi] (K+ is non-increasing in m,
    K- non-decreasing), kept as a running max / min and intersected with the known bounds.
    Returns rows (lower at delta, upper at delta, lower at delta/2, upper at delta/2).
    """
    n = len(y)
    lam = []
    info = 0.0
    for s in range(1, n + 1):
        info += 1.0 / v[s - 1]
        lam.append(math.sqrt(2.0 * math.log(1.0 / bet_level) / (info * math.log1p(s))) / v[s - 1])

    def log_k(m, t, side):
        total = 0.0
        for s in range(t):
            if side > 0:
                bet = lam[s] if m <= a[s] else min(lam[s], cap / (m - a[s]))
                total += math.log1p(bet * (y[s] - m))
            else:
                bet = lam[s] if m >= b[s] else min(lam[s], cap / (b[s] - m))
                total += math.log1p(-bet * (y[s] - m))
        return total

    def root(t, side, thr):
        # side +1: sup{m : log K+ >= thr}; side -1: inf{m : log K- >= thr}
        if side > 0:
            if log_k(lo, t, 1) < thr:
                return -math.inf
            left, right = lo, hi
            if log_k(hi, t, 1) >= thr:
                return hi
            for _ in range(100):
                mid = 0.5 * (left + right)
                if log_k(mid, t, 1) >= thr:
                    left = mid
                else:
                    right = mid
                if right - left < tol:
                    break
            return left
        if log_k(hi, t, -1) < thr:
            return math.inf
        left, right = lo, hi
        if log_k(lo, t, -1) >= thr:
            return lo
        for _ in range(100):
            mid = 0.5 * (left + right)
            if log_k(mid, t, -1) >= thr:
                right = mid
            else:
                left = mid
            if right - left < tol:
                break
        return right

    rows = []
    best = [lo, hi, lo, hi]
    thresholds = (math.log(1.0 / delta), math.log(2.0 / delta))
    for t in range(1, n + 1):
        for j, thr in enumerate(thresholds):
            low = root(t, 1, thr)
            high = root(t, -1, thr)
            if known_lo is not None:
                low = max(low, known_lo[t - 1])
                high = min(high, known_hi[t - 1])
            best[2 * j] = max(best[2 * j], low)
            best[2 * j + 1] = min(best[2 * j + 1], high)
        rows.append(tuple(best))
    return np.array(rows)


class _SplitMixture:
    """The per-step part both split loops share, literally: each rho's UP bet is the posterior
    mean of its node fractions, each node's wealth moves by (1 - u_k y_a)(1 - u_k y_b), and the
    rho components are mixed with the weight update (13)."""

    def __init__(self, rhos, prior):
        self.priors = [prior_of(prior, rho) for rho in rhos]
        self.wealth = [np.array(pr[1], dtype=float) for pr in self.priors]
        self.S = len(rhos)
        self.w0 = [1.0 / self.S] * self.S
        self.w = list(self.w0)
        self.E_s = [1.0] * self.S
        self.E = 1.0

    def step(self, units) -> float:
        """``units``: one (y_a, y_b) per rho, the step's two factors in units of its largest bet."""
        e_s = []
        for s, (ya, yb) in enumerate(units):
            nodes = self.priors[s][0]
            u = float(np.sum(nodes * self.wealth[s]) / np.sum(self.wealth[s]))
            e = (1 - u * ya) * (1 - u * yb)
            self.wealth[s] = self.wealth[s] * (1 - nodes * ya) * (1 - nodes * yb)
            self.E_s[s] *= e
            e_s.append(e)
        self.E *= sum(self.w[s] * e_s[s] for s in range(self.S))
        total = sum(self.w0[s] * self.E_s[s] for s in range(self.S))
        self.w = [self.w0[s] * self.E_s[s] / total for s in range(self.S)]
        return self.E


def reference_split_evalue_path(human, judge_labeled, judge_unlabeled, *, alpha, rhos, prior, loss_bounds=(0.0, 1.0)):
    """E_1..E_n of R-AutoEval+ with the split observation, literally: for every rho and step i,
    c_i is the mean of every judge label of the steps before i with one pseudo-label at the
    middle of the range; x = h - rho j + rho c_i and b = rho (jbar_i - c_i) share one bet
    u/d with d = hi - lo + rho (c_i - lo) (rho > 0) or hi - alpha (rho = 0); each UP node's
    wealth moves by (1 - u_k (x - alpha)/d)(1 - u_k b/d) and the bet is the posterior mean of
    u. The rho components are mixed with the literal weight update (13). ``prior`` is one
    (nodes, weights) pair or a function of rho."""
    lo, hi = loss_bounds
    n = len(human)
    r = len(judge_unlabeled) // n
    mix = _SplitMixture(rhos, prior)
    judge_sum, judge_count = 0.5 * (lo + hi), 1
    path = []
    for i in range(n):
        c = judge_sum / judge_count
        block = [float(judge_unlabeled[k]) for k in range(r * i, r * (i + 1))]
        jbar = sum(block) / r
        units = []
        for rho in rhos:
            x = float(human[i]) - rho * float(judge_labeled[i]) + rho * c
            b = rho * (jbar - c)
            d = (hi - lo + rho * (c - lo)) if rho > 0 else (hi - alpha)
            units.append(((x - alpha) / d, b / d))
        path.append(mix.step(units))
        judge_sum += float(judge_labeled[i]) + sum(block)
        judge_count += 1 + r
    return np.array(path)


def reference_wor_split_evalue_path(human, judge_labeled, judge_unlabeled, *, alpha, rhos, prior, population,
                                    loss_bounds=(0.0, 1.0)):
    """:func:`reference_split_evalue_path` for draws without replacement from a table of
    ``population`` items, literally: before each draw of a stream with k - 1 earlier values of
    sum S, the value v enters as Y = (S + (N - k + 1) v) / N, known to lie in [(S + (N - k + 1)
    lo) / N, (S + (N - k + 1) hi) / N]. The human losses and the judge's losses on them are
    one stream each (same draws), the judge-only losses another (their own order). Then
    x = Y^h - rho (Y^j - c), b = rho (mean of the block's Y^g - c), and the bet's denominator is
    the largest value either factor can take above the target: top(Y^h) - alpha for rho = 0,
    max(top(Y^h) - rho (bottom(Y^j) - c) - lo, rho (max top(Y^g) - c)) for rho > 0."""
    lo, hi = loss_bounds
    N = float(population)
    n = len(human)
    r = len(judge_unlabeled) // n
    mix = _SplitMixture(rhos, prior)
    judge_sum, judge_count = 0.5 * (lo + hi), 1
    sum_h = sum_j = sum_g = 0.0
    drawn_g = 0
    path = []
    for i in range(n):
        c = judge_sum / judge_count
        left = N - i  # N - k + 1 with k = i + 1
        yh = (sum_h + left * float(human[i])) / N
        top_h = (sum_h + left * hi) / N
        yj = (sum_j + left * float(judge_labeled[i])) / N if r else c
        bottom_j = (sum_j + left * lo) / N if r else c
        ys, tops_g = [], []
        for k in range(r * i, r * (i + 1)):
            v = float(judge_unlabeled[k])
            ys.append((sum_g + (N - drawn_g) * v) / N)
            tops_g.append((sum_g + (N - drawn_g) * hi) / N)
            sum_g += v
            drawn_g += 1
        gbar = sum(ys) / r if r else c
        units = []
        for rho in rhos:
            x = yh - rho * (yj - c)
            b = rho * (gbar - c)
            if rho > 0:
                d = max(top_h - rho * (bottom_j - c) - lo, rho * (max(tops_g) - c))
            else:
                d = max(top_h - alpha, 1e-9)
            units.append(((x - alpha) / d, b / d))
        path.append(mix.step(units))
        sum_h += float(human[i])
        if r:
            sum_j += float(judge_labeled[i])
            judge_sum += float(judge_labeled[i]) + sum(float(judge_unlabeled[k]) for k in range(r * i, r * (i + 1)))
            judge_count += 1 + r
    return np.array(path)
