"""The edge of a falling function's positive part, by bisection: what the limits and the priors solve for.

Both solve a one-dimensional equation on a bracket where the function falls through zero (a divergence against a
rate, a concave growth's slope). scipy's root finders would do it, at the price of importing scipy.optimize: 0.4 s, more
than a table job's statistics (docs/results.md, "Overhead"). Halving to adjacent floats takes about 53 evaluations
plus one for each halving of the root's distance from 0 against the bracket.
"""

from __future__ import annotations

from collections.abc import Callable


def last_positive(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The largest x in [lo, hi) found with f(x) > 0, to adjacent floats, for f falling on [lo, hi] with f(lo) > 0 >=
    f(hi) (the caller has checked both ends)."""
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return lo
        if f(mid) > 0.0:
            lo = mid
        else:
            hi = mid
