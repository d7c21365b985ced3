"""How a betting test's items are drawn (``sampling=IID()``, the default, or ``WithoutReplacement(N)``), and the streams
that make sampling without replacement from a finite table exact.

Without replacement, the observations' conditional mean is the table's mean, exactly (Waudby-Smith & Ramdas, "Confidence
sequences for sampling without replacement", NeurIPS 2020, arXiv:2006.04347). A stream draws items of a table of
``size`` N one at a time, uniformly among those not yet drawn. Before its k-th draw it has seen k - 1 values with sum
S_{k-1}; the N - k + 1 items left have mean (N mu - S_{k-1}) / (N - k + 1), so

    Y_k = (S_{k-1} + (N - k + 1) v_k) / N

has E[Y_k | past] = mu, the mean of all N values. Y_k lies in [(S_{k-1} + (N - k + 1) lo) / N, (S_{k-1} + (N - k + 1)
hi) / N], known before the draw and closing on mu as the table runs out (Y_N = mu). A test or confidence sequence that
needs only "conditional mean mu, predictable range" (:mod:`certsel.policies.autoeval`, :mod:`certsel.policies.confseq`)
is then exact for the table's mean instead of the risk of a distribution.

:class:`Stream` keeps one stream's running count and sum, so a test fed in batches (or restored) continues exactly; it
is vectorised over leading batch axes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._validation import check_positive_int


@dataclass(frozen=True)
class Drawn:
    """A stream's transformed draws ``y`` (..., t), the range [``low``, ``high``] each was known to lie in before its
    draw, and the stream after them."""

    y: np.ndarray
    low: np.ndarray
    high: np.ndarray
    after: "Stream"


@dataclass(frozen=True)
class Stream:
    """Draws without replacement from a table of ``size`` items: ``count`` drawn so far and the ``total`` of their
    values (per batch element)."""

    size: int
    count: int = 0
    total: np.ndarray | float = 0.0

    def __post_init__(self):
        check_positive_int(self.size, "population size")
        if not 0 <= int(self.count) <= self.size:
            raise ValueError(f"a stream of a {self.size}-item table cannot have drawn {self.count} items")

    @property
    def left(self) -> int:
        return self.size - int(self.count)

    def draw(self, values, bounds: tuple[float, float]) -> Drawn:
        """Y_k for the next t draws ``values`` (..., t) in ``bounds``; one-line error when fewer than t items are left.
        """
        v = np.asarray(values, dtype=np.float64)
        t = v.shape[-1]
        if t > self.left:
            raise ValueError(f"{t} more draws without replacement from a {self.size}-item table that has "
                             f"{self.left} left")
        lo, hi = bounds
        N = float(self.size)
        before = np.asarray(self.total, dtype=np.float64)[..., None] + np.cumsum(v, axis=-1) - v  # S_{k-1}
        remaining = N - (self.count + np.arange(t, dtype=np.float64))  # N - k + 1
        y = (before + remaining * v) / N
        low = (before + remaining * lo) / N
        high = (before + remaining * hi) / N
        total = np.asarray(self.total, dtype=np.float64) + v.sum(axis=-1)
        return Drawn(y, low, high, Stream(self.size, int(self.count) + t, total))


@dataclass(frozen=True)
class TableDraws:
    """The streams of a test on a finite table of ``size`` items (see the module docstring):

    * ``human``: the human-labelled items, in the job's random order;
    * ``judge``: the judge's losses on those same items (same draws and count): the paired difference h - rho j of step
      k transforms as Y^h_k - rho Y^j_k;
    * ``judge_only``: R-AutoEval+'s judge-only items, in a random order of their own over the whole table, independent
      of the human order (an item may be in both).

    Independent orders make the split observation's two factors independent given the past, as in the i.i.d. argument;
    judge-only items taken from those the human order has not reached would leave a pool whose human mean is unknown.
    """

    size: int
    human: Stream
    judge: Stream
    judge_only: Stream

    @classmethod
    def start(cls, size: int, batch_shape=()) -> "TableDraws":
        zero = np.zeros(tuple(batch_shape))
        return cls(int(size), Stream(size, 0, zero), Stream(size, 0, zero), Stream(size, 0, zero))

    @staticmethod
    def stack(parts) -> "TableDraws":
        """One batch (k,) from k single-element draws with the same counts (a host's stacked tests)."""
        parts = list(parts)
        size = parts[0].size

        def cat(name):
            first = getattr(parts[0], name)
            if any(getattr(p, name).count != first.count for p in parts):
                raise ValueError("stacked tests must have drawn the same number of items")
            return Stream(size, first.count, np.stack([np.asarray(getattr(p, name).total) for p in parts]))

        if any(p.size != size for p in parts):
            raise ValueError("stacked tests must draw from tables of one size")
        return TableDraws(size, cat("human"), cat("judge"), cat("judge_only"))

    def element(self, i: int) -> "TableDraws":
        """Batch element ``i`` of a 1-D batch."""
        return TableDraws(self.size, *(Stream(self.size, s.count, np.array(np.asarray(s.total)[i]))
                                       for s in (self.human, self.judge, self.judge_only)))

    def to_dict(self) -> dict:
        return {"size": self.size, **{name: {"count": int(s.count), "total": np.asarray(s.total).copy()}
                                      for name, s in (("human", self.human), ("judge", self.judge),
                                                      ("judge_only", self.judge_only))}}

    @classmethod
    def from_dict(cls, d: dict) -> "TableDraws":
        size = int(d["size"])
        return cls(size, *(Stream(size, int(d[k]["count"]), np.asarray(d[k]["total"], dtype=np.float64))
                           for k in ("human", "judge", "judge_only")))


class Sampling:
    """How a test's items are drawn, and so what it certifies (docs/statistics.md, "Sampling without replacement").

    :class:`IID`: the risk of the distribution the items come from (the papers' setting). :class:`WithoutReplacement`:
    the mean of the finite table of ``size`` items, exactly, with judge-only items in an order of their own. A test asks
    its sampling for the streams it starts with; i.i.d. draws need none.
    """

    name: ClassVar[str]
    size: ClassVar[int | None] = None

    def start(self, batch_shape=()) -> TableDraws | None:
        return None


@dataclass(frozen=True)
class IID(Sampling):
    name: ClassVar[str] = "iid"


@dataclass(frozen=True)
class WithoutReplacement(Sampling):
    size: int
    name: ClassVar[str] = "without-replacement"

    def __post_init__(self):
        check_positive_int(self.size, "population size")

    def start(self, batch_shape=()) -> TableDraws:
        return TableDraws.start(self.size, batch_shape)


SAMPLINGS = (IID.name, WithoutReplacement.name)


def sampling_named(name: str, size: int | None = None) -> Sampling:
    """The sampling a configuration names (``size``: the table's items, for without-replacement)."""
    if name == IID.name:
        return IID()
    if name == WithoutReplacement.name:
        return WithoutReplacement(size)
    raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {name!r}")
