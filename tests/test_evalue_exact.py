"""evalue_path against the independent loop implementation of Algorithm 1, on real data."""

import numpy as np
import pytest
from certsel.policies import (
    evalue_path,
    evalue_paths,
    log_evalue_paths,
    scheme_rhos,
    UP,
    up_prior,
)
from certsel.workers.replay import sample_replications
from certsel.policies.betting import CAP_NODE, DEFAULT_CAP_MASS, alternatives_prior
from helpers.reference import chebyshev_prior, grid_prior, reference_evalue_path, reference_split_evalue_path
from scipy import integrate, optimize

SCHEMES = ["r-eval", "r-autoeval", "r-autoeval+"]
# frontier-like candidates of the TriviaQA table: risks 0.018, 0.045 and 0.099 (alpha 0.1)
RANKS = [27, 33, 36]


@pytest.fixture(scope="module")
def draws(trivia_best):
    h, jl, ju = sample_replications(trivia_best, 1, 300, 900, seed=7)
    return h[0], jl[0], ju[0]


def _max_rel(a, b):
    return float(np.max(np.abs(a - b) / np.abs(b)))


def alternatives(alpha, horizon, delta=0.1):
    """The default UP prior's (nodes, weights) per rho, for the reference loops: Jeffreys over
    the alternatives below alpha that the horizon can certify, with the atom on the
    judge-controlled rhos."""
    def of(rho):
        p = alternatives_prior(alpha, horizon=horizon, cap_mass=DEFAULT_CAP_MASS if rho > 0 else 0.0, delta=delta)
        return p.nodes, p.weights
    return of


def certifiable(theta, horizon, delta):
    """p_h: the largest Bernoulli alternative p whose kl(p, theta) reaches log(1/delta)/horizon."""
    kl = lambda p: (p * np.log(p / theta) if p > 0 else 0.0) \
        + (1 - p) * np.log((1 - p) / (1 - theta))  # noqa: E731
    rate = np.log(1 / delta) / horizon
    return theta if kl(0.0) <= rate else optimize.bisect(lambda p: kl(p) - rate, 0.0, theta, xtol=1e-15)


BETTINGS = {"up": ("up", lambda: alternatives(0.1, 300)), "up-exact": (UP(prior="exact"), lambda: None),
            "wsr": ("wsr", lambda: None), "ons": ("ons", lambda: None)}


@pytest.mark.parametrize("betting", list(BETTINGS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_matches_reference_loop_on_triviaqa(draws, betting, scheme):
    h, jl, ju = draws
    rhos = scheme_rhos(scheme)
    ours_betting, prior = BETTINGS[betting]
    finals = []
    for k in RANKS:
        ours = evalue_path(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=rhos, betting=ours_betting)
        ref = reference_evalue_path(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=list(rhos),
                                    betting="up" if betting.startswith("up") else betting, prior=prior())
        assert ours.shape == (300,)
        assert _max_rel(ours, ref) < 1e-9
        finals.append(ref[-1])
    # the comparison is not vacuous: the easy candidate is certified, the hard one is not
    assert finals[0] > 100 and finals[-1] < 10


def test_r_autoeval_plus_has_ten_rhos_by_default():
    assert np.allclose(scheme_rhos("r-autoeval+"), np.linspace(0, 1, 10))


def test_paper_grid_prior_matches_reference(draws):
    h, jl, ju = draws
    k = RANKS[1]
    rhos = scheme_rhos("r-autoeval+")
    ours = evalue_path(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=rhos, betting=UP(prior="grid"))
    ref = reference_evalue_path(
        h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=list(rhos), betting="up", prior=grid_prior(10_000)
    )
    assert _max_rel(ours, ref) < 1e-9
    assert up_prior("grid").size == 10_000


def test_exact_up_is_the_continuous_beta_mixture(draws):
    """The UP wealth equals the mixture of constant bets under the continuous
    Beta(1/2,1/2) prior; checked with adaptive quadrature (scipy's algebraic weight)."""
    h, _, _ = draws
    x = h[RANKS[1]] - 0.1
    path = evalue_path(h[RANKS[1]], alpha=0.1, delta=0.1, rhos=[0.0], betting=UP(prior="exact"))
    for t in (10, 100, 300):
        f = lambda u, t=t: np.prod(1.0 - (u / 0.9) * x[:t])  # noqa: E731
        val, _ = integrate.quad(f, 0, 1, weight="alg", wvar=(-0.5, -0.5), limit=500, epsabs=0, epsrel=1e-13)
        assert abs(path[t - 1] - val / np.pi) / (val / np.pi) < 1e-9


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.5, 0.9])
def test_alternatives_up_is_its_continuous_mixture(draws, alpha):
    """The default UP wealth is the mixture of constant bets under the continuous prior it
    discretises: Jeffreys' density on the Bernoulli alternatives p in [0, p_h] (theta = alpha
    here; p_h the largest p with log(1/delta) / kl(p, theta) <= the horizon),
    (p (1 - p))^(-1/2), carried to u = 1 - p/theta; checked with adaptive quadrature in p
    (scipy's algebraic weight for the p^(-1/2) end), to 1e-7 over 300 labels."""
    h, _, _ = draws
    y = (h[RANKS[1]] - alpha) / (1 - alpha)
    path = evalue_path(h[RANKS[1]], alpha=alpha, delta=0.1, rhos=[0.0], betting="up")
    top = certifiable(alpha, 300, 0.1)
    assert top < alpha  # the horizon leaves the alternatives next to alpha out
    density = lambda p: 1.0 / np.sqrt(1.0 - p)  # noqa: E731  (times the weight p^(-1/2))
    z, _ = integrate.quad(density, 0, top, weight="alg", wvar=(-0.5, 0.0), epsabs=0, epsrel=1e-13)
    for t in (10, 100, 300):
        f = lambda p, t=t: density(p) * np.prod(1.0 - (1.0 - p / alpha) * y[:t])  # noqa: E731
        val, _ = integrate.quad(f, 0, top, weight="alg", wvar=(-0.5, 0.0), limit=500, epsabs=0, epsrel=1e-12)
        assert abs(path[t - 1] - val / z) / (val / z) < 1e-7


def test_alternatives_prior_shape():
    """Its moments are those of the continuous prior; for a small target it is nearly Beta(1, 1/2)
    (no mass piling up at u = 0), for a target near 1 nearly Beta(1/2, 1/2); the atom carries
    cap_mass at 95% of the largest bet and the rest keeps its shape; a horizon leaves out the
    alternatives it cannot certify (the bets near 0), and every one that needs fewer labels
    keeps its place."""
    for theta in (0.05, 0.3, 0.8):
        prior = alternatives_prior(theta, horizon=300)
        assert prior.size == 152 and np.isclose(prior.weights.sum(), 1.0)
        for k in (1, 2, 5):
            num, _ = integrate.quad(lambda p: (1 - p / theta) ** k / np.sqrt(1 - p), 0, theta, weight="alg",
                                    wvar=(-0.5, 0.0), epsrel=1e-12)
            den, _ = integrate.quad(lambda p: 1 / np.sqrt(1 - p), 0, theta, weight="alg", wvar=(-0.5, 0.0),
                                    epsrel=1e-12)
            assert np.dot(prior.weights, prior.nodes ** k) == pytest.approx(num / den, rel=1e-10)
    small = alternatives_prior(0.01, horizon=300)
    assert np.dot(small.weights, small.nodes) == pytest.approx(2 / 3, abs=2e-3)  # Beta(1, 1/2) has mean 2/3
    near_one = alternatives_prior(0.999, horizon=300)
    assert np.dot(near_one.weights, near_one.nodes) == pytest.approx(0.5, abs=0.02)  # Beta(1/2, 1/2): 1/2
    atom = alternatives_prior(0.1, horizon=300, cap_mass=0.5)
    base = alternatives_prior(0.1, horizon=300)
    assert atom.weights[atom.nodes == CAP_NODE].sum() == pytest.approx(0.5)
    assert np.allclose(atom.weights[atom.nodes != CAP_NODE], 0.5 * base.weights[base.nodes != CAP_NODE])
    cut = alternatives_prior(0.1, horizon=600, delta=0.1)
    u_low = 1 - certifiable(0.1, 600, 0.1) / 0.1
    assert cut.nodes.min() == pytest.approx(u_low, abs=1e-3) and 0.2 < u_low < 0.3
    # the alternative at the edge needs the horizon exactly
    p_edge = 0.1 * (1 - u_low)
    assert np.log(10) / (p_edge * np.log(p_edge / 0.1) + (1 - p_edge) * np.log((1 - p_edge) / 0.9)) \
        == pytest.approx(600, rel=1e-6)
    assert alternatives_prior(0.1, horizon=5, delta=0.1).nodes.min() < 0.2  # no p gets there in 5: all kept
    with pytest.raises(ValueError, match="theta"):
        alternatives_prior(1.0, horizon=10)
    with pytest.raises(ValueError, match="cap_mass"):
        alternatives_prior(0.1, horizon=10, cap_mass=1.0)
    with pytest.raises(ValueError, match="cap_mass"):
        UP(cap_mass=-0.1)


def test_quadrature_is_exact_with_horizon_nodes_only():
    nodes = up_prior("exact", horizon=300).nodes
    ref_nodes, _ = chebyshev_prior(300)
    assert nodes.size == 151
    assert np.allclose(np.sort(nodes), np.sort(ref_nodes))


def test_batched_equals_per_series(trivia_best):
    h, jl, ju = sample_replications(trivia_best, 3, 120, 360, seed=3)
    sub = (slice(None), slice(30, 36))
    for betting in ("up", "wsr"):
        batch = evalue_paths(h[sub], jl[sub], ju[sub], alpha=0.1, delta=0.1, betting=betting)
        assert batch.shape == (3, 6, 120)
        for b in range(3):
            for k in range(6):
                one = evalue_path(h[sub][b, k], jl[sub][b, k], ju[sub][b, k], alpha=0.1, delta=0.1, betting=betting)
                assert np.array_equal(one, batch[b, k]) or _max_rel(one, batch[b, k]) < 1e-12


def test_log_form_survives_overwhelming_evidence():
    h = np.zeros(20_000)
    log_e = log_evalue_paths(h, alpha=0.5, delta=0.1, rhos=[0.0], betting="wsr")
    assert np.all(np.isfinite(log_e)) and log_e[-1] > 1000
    assert np.all(np.diff(log_e) > 0)


def test_wrong_bet_bound_is_detected(draws):
    """The reference check bites: a bet bound of 1/(M - m) instead of 1/(M - alpha)
    (the confidence-interval form) gives visibly different e-values."""
    h, jl, ju = draws
    k = RANKS[1]
    ref = reference_evalue_path(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=[1.0], betting="up")
    other = np.exp(log_evalue_paths(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=[1.0], betting="up", bet_bound="range"))
    assert _max_rel(other, ref) > 1e-3


def test_up_extreme_runs_stay_exact_and_finite():
    """2,000 perfect answers then 300 failures: the UP posterior piles onto the largest bet
    and is then crushed. Renormalisation and flushing must neither overflow, underflow to
    NaN nor change the result."""
    h = np.concatenate([np.zeros(2000), np.ones(300)])
    log_e = log_evalue_paths(h, alpha=0.1, delta=0.1, rhos=[0.0], betting="up")
    assert np.all(np.isfinite(log_e))
    ref = reference_evalue_path(h[:2100], None, None, alpha=0.1, delta=0.1, rhos=[0.0], betting="up", horizon=2300,
                                prior=alternatives(0.1, 2300))
    assert np.max(np.abs(log_e[:2100] - np.log(ref)) / np.abs(np.log(ref))) < 1e-9
    assert log_e[1999] > 150 and log_e[-1] < log_e[1999] - 50


@pytest.mark.parametrize("prior", ["alternatives", "exact"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_split_observation_matches_its_reference_loop(draws, scheme, prior):
    """The split observation (two factors sharing each bet, a predictable judge mean) against a
    literal per-label loop with the UP mixture over the prior's nodes (the default alternatives
    prior with its atom on rho > 0, or eq. 19's) and the literal weight update: equal to 1e-9 on
    real TriviaQA draws, and not vacuous."""
    h, jl, ju = draws
    rhos = scheme_rhos(scheme)
    nodes = alternatives(0.1, 300) if prior == "alternatives" else chebyshev_prior(300)
    finals = []
    for k in RANKS:
        ours = evalue_path(h[k], jl[k], ju[k], alpha=0.1, delta=0.1, rhos=rhos, observation="split",
                           betting=UP(prior=prior))
        ref = reference_split_evalue_path(h[k], jl[k], ju[k], alpha=0.1, rhos=list(rhos), prior=nodes)
        assert _max_rel(ours, ref) < 1e-9
        finals.append(ref[-1])
    assert finals[0] > 100 and finals[-1] < 10


def test_the_certifiable_edge_is_brentqs_root():
    """The prior's edge (policies/up_priors._certifiable, a bisection to adjacent floats) against scipy's brentq."""
    from certsel.policies.up_priors import _certifiable

    def kl(p, theta):
        return (p * np.log(p / theta) if p > 0 else 0.0) + (1 - p) * np.log((1 - p) / (1 - theta))

    rng = np.random.default_rng(3)
    for theta, rate in zip(rng.uniform(0.001, 0.999, 300), rng.uniform(1e-5, 2.0, 300)):
        got = _certifiable(theta, rate)
        if kl(0.0, theta) <= rate:
            assert got == theta
            continue
        root = optimize.brentq(lambda p: kl(p, theta) - rate, 0.0, theta, xtol=1e-15, rtol=1e-15)
        assert got == pytest.approx(root, rel=1e-12, abs=1e-15)
        assert kl(got, theta) >= rate  # on the side that certifies
