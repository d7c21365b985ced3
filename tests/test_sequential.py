"""The online SequentialTest equals the functional form, and survives a checkpoint."""

import pickle

import numpy as np
import pytest
from certsel.policies import SequentialTest, certify, log_evalue_paths, scheme_rhos
from certsel.workers.replay import sample_replications


@pytest.fixture(scope="module")
def batch(trivia_best):
    h, jl, ju = sample_replications(trivia_best, 4, 200, 600, seed=5)
    sub = (slice(None), slice(28, 38))  # 4 replications x 10 candidates
    return h[sub], jl[sub], ju[sub]


def _feed(test, h, jl, ju, cuts, r=3):
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        out.append(test.update(h[..., a:b], jl[..., a:b], ju[..., r * a : r * b]))
    return np.concatenate(out, axis=-1)


@pytest.mark.parametrize("observation", ["paper", "split"])
@pytest.mark.parametrize("betting", ["up", "wsr"])
@pytest.mark.parametrize("scheme", ["r-eval", "r-autoeval", "r-autoeval+"])
def test_online_equals_batch(batch, betting, scheme, observation):
    """Fed in uneven batches (the split observation carries its running judge mean), the
    online test gives the functional form's e-values, decisions and running maxima."""
    h, jl, ju = batch
    kw = dict(alpha=0.1, delta=0.1, rhos=scheme_rhos(scheme), betting=betting, observation=observation)
    ref = log_evalue_paths(h, jl, ju, **kw)
    test = SequentialTest(h.shape[:-1], horizon=200, r=3, **kw)
    online = _feed(test, h, jl, ju, [0, 1, 7, 50, 51, 130, 200])
    assert np.max(np.abs(online - ref)) < 1e-9
    res = certify(h, jl, ju, **kw)
    assert np.array_equal(test.labels_to_certify, res.labels_to_certify)
    assert np.allclose(test.max_log_evalue, np.maximum(res.max_log_evalue, 0.0))
    assert np.allclose(test.log_evalue, ref[..., -1])
    assert test.n == 200 and test.certified.any() and not test.certified.all()


@pytest.mark.parametrize("observation", ["paper", "split"])
@pytest.mark.parametrize("betting", ["up", "wsr"])
def test_checkpoint_restores_exactly(batch, betting, observation):
    h, jl, ju = batch
    kw = dict(alpha=0.1, delta=0.1, betting=betting, observation=observation)
    whole = SequentialTest(h.shape[:-1], horizon=200, r=3, **kw)
    full = _feed(whole, h, jl, ju, [0, 200])
    first = SequentialTest(h.shape[:-1], horizon=200, r=3, **kw)
    _feed(first, h, jl, ju, [0, 90])
    restored = SequentialTest.from_state_dict(pickle.loads(pickle.dumps(first.state_dict())))
    rest = restored.update(h[..., 90:], jl[..., 90:], ju[..., 270:])
    assert np.max(np.abs(rest - full[..., 90:])) < 1e-12
    assert np.array_equal(restored.labels_to_certify, whole.labels_to_certify)
    w = restored.rho_weights
    assert w.shape == h.shape[:-1] + (10,) and np.allclose(w.sum(axis=-1), 1)


def test_online_rejects_bad_batches(batch):
    h, jl, ju = batch
    test = SequentialTest(h.shape[:-1], alpha=0.1, delta=0.1, horizon=200, r=3)
    with pytest.raises(ValueError, match="r\\*t = 30"):
        test.update(h[..., :10], jl[..., :10], ju[..., :29])
    with pytest.raises(ValueError, match="batch shape"):
        test.update(h[0, :, :10], jl[0, :, :10], ju[0, :, :30])
    with pytest.raises(ValueError, match="horizon"):
        SequentialTest((), alpha=0.1, delta=0.1, horizon=0)
    with pytest.raises(ValueError, match="unsupported"):
        SequentialTest.from_state_dict({"format": 99})


def test_stack_and_split_continue_exactly():
    """Stacking single-candidate tests for one vectorised update, then splitting them,
    gives the e-values of updating each on its own (both betting strategies)."""
    rng = np.random.default_rng(3)
    k, n = 4, 40
    h = (rng.random((k, n)) < 0.1).astype(float)
    jl = np.where(rng.random((k, n)) < 0.9, h, 1 - h)
    ju = (rng.random((k, 3 * n)) < 0.1).astype(float)
    def make(betting="up", alpha=0.2, observation="split"):
        return SequentialTest(alpha=alpha, delta=0.1, horizon=n, r=3, betting=betting, observation=observation)

    for betting, observation in (("up", "split"), ("wsr", "split"), ("up", "paper")):
        alone = [make(betting, observation=observation) for _ in range(k)]
        packed = [make(betting, observation=observation) for _ in range(k)]
        for i in range(k):
            alone[i].update(h[i, :15], jl[i, :15], ju[i, :45])
            packed[i].update(h[i, :15], jl[i, :15], ju[i, :45])
        st = SequentialTest.stack(packed)
        path = st.update(h[:, 15:], jl[:, 15:], ju[:, 45:])
        for i, part in enumerate(st.split()):
            ref = alone[i].update(h[i, 15:], jl[i, 15:], ju[i, 45:])
            np.testing.assert_allclose(path[i], ref, rtol=0, atol=1e-12)
            assert part.labels_to_certify == alone[i].labels_to_certify
            np.testing.assert_allclose(part.max_log_evalue, alone[i].max_log_evalue, atol=1e-12)
            np.testing.assert_allclose(part.rho_weights, alone[i].rho_weights, atol=1e-12)
    with pytest.raises(ValueError, match="one configuration"):
        SequentialTest.stack([make(), make(alpha=0.3)])


def test_ppi_estimate_agrees_with_ppi_python(trivia_best):
    """Cross-check with the prediction-powered inference package (ppi-python): for every
    reliance factor rho the mean of our effective observations (eq. 10) is its PPI++ mean
    estimate with lambda = rho, and the online estimate of a one-rho test (R-AutoEval) is
    exactly that number."""
    ppi_py = pytest.importorskip("ppi_py")
    from certsel.policies import effective_observations

    rng = np.random.default_rng(4)
    k, n, r = 36, 120, 3
    items = rng.permutation(trivia_best.items.size)[: n * (1 + r)]
    h, jl = trivia_best.human[k][items[:n]], trivia_best.judge[k][items[:n]]
    ju = trivia_best.judge[k][items[n:]]
    rhos = np.linspace(0, 1, 10)
    q = effective_observations(h, jl, ju, rhos=rhos).q
    for s, rho in enumerate(rhos):
        want = float(np.asarray(ppi_py.ppi_mean_pointestimate(h, jl, ju, lam=rho)).reshape(-1)[0])
        assert q[s].mean() == pytest.approx(want, abs=1e-12)
    test = SequentialTest(alpha=0.1, delta=0.1, horizon=n, rhos=[1.0], r=r)
    for start in range(0, n, 40):  # in batches: the estimate does not depend on them
        test.update(h[start:start + 40], jl[start:start + 40], ju[r * start:r * (start + 40)])
    want = float(np.asarray(ppi_py.ppi_mean_pointestimate(h, jl, ju, lam=1.0)).reshape(-1)[0])
    assert float(test.estimate) == pytest.approx(want, abs=1e-12)


@pytest.mark.slow
def test_the_estimate_is_unbiased_and_the_current_weights_were_not():
    """R = 0.06, alpha = 0.1, n = 100, a judge that flips 10% of the labels: the mean of the
    R-AutoEval+ estimate over 20,000 runs is within 2 standard errors of R. Weighting the
    rho components by their evidence *after* the labels (the earlier estimate) favours the
    rho whose observations happened to be low, and is biased downwards by many standard
    errors on the same runs."""
    from certsel.policies import effective_observations
    from certsel.policies.autoeval import component_log_evalues, mixture_weights
    from helpers.simulate import bernoulli

    rng = np.random.default_rng(2024)
    reps, n, r, R = 20_000, 100, 3, 0.06
    h, jl, ju = bernoulli(rng, reps, n, r * n, R, flip=0.1)
    test = SequentialTest((reps,), alpha=0.1, delta=0.1, horizon=n, r=r)
    for start in range(0, n, 25):
        test.update(h[:, start:start + 25], jl[:, start:start + 25], ju[:, r * start:r * (start + 25)])
    est = test.estimate
    se = est.std(ddof=1) / np.sqrt(reps)
    assert abs(est.mean() - R) <= 2 * se

    obs = effective_observations(h, jl, ju)
    comps = component_log_evalues(obs, 0.1, delta=0.1, betting="up", horizon=n)
    after = np.sum(mixture_weights(comps[..., -1], test.weights) * obs.q.mean(axis=-1), axis=-1)
    assert after.mean() < R - 5 * after.std(ddof=1) / np.sqrt(reps)
