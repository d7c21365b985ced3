"""Shared test helpers (on the path through pytest's ``pythonpath``: ``from helpers.simulate import ...``).

* :mod:`helpers.reference`: literal loops of the papers' equations, the independent
  computations the vectorised statistics are checked against;
* :mod:`helpers.simulate`: draws for error-rate simulations (Bernoulli losses, resampled tables,
  selection trials);
* :mod:`helpers.servers`: real local HTTP servers for live-source tests.
"""
