"""The user-function label source: :class:`PythonSpec` and :class:`PythonSource`.

A Python source is for teams whose labels come from their own pipeline (an annotation
tool, a grader service, a cached evaluation run). The job file names the function::

    source:
      python: my_labels:losses      # module:function, importable by the driver
      items: 805
      candidates: [model-a, model-b]
      judge: true                   # the function also answers role "judge"

and certsel calls ``losses(candidate, items, role)`` with a candidate id, an integer array of item indices and
``"human"`` or ``"judge"``; it returns one loss in [0, 1] per item. It gets the same log, cache and failure semantics as
the other sources: every label is logged before a policy uses it and never asked for twice; an exception is retried
``retries`` times, then ends only that candidate ("source failed"); a reply of the wrong length or with values outside
[0, 1] is a source failure naming the function, never silently clipped.
"""

from __future__ import annotations

import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tenacity import Retrying, stop_after_attempt, wait_exponential

from certsel.errors import first_line

from .contracts import SourceError

ROLES = ("human", "judge")


def load_callable(ref: str) -> Callable:
    """The function named ``module:function`` (``module:obj.attr`` also works)."""
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise ValueError(f"source.python must be 'module:function', got {ref!r}")
    mod_name, attr = ref.split(":")
    try:
        obj = pkgutil.resolve_name(ref)
    except AttributeError:
        if mod_name not in sys.modules:  # the module itself failed while importing
            raise ValueError(f"source.python: cannot import module {mod_name!r} (AttributeError)") from None
        raise ValueError(f"source.python: module {mod_name!r} has no {attr!r}") from None
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        raise ValueError(f"source.python: cannot import module {mod_name!r} ({first_line(exc)})") from None
    if not callable(obj):
        raise ValueError(f"source.python: {ref!r} is not callable")
    return obj


class PythonSource:
    """Labels from a user function ``fn(candidate, items, role)`` (see the module docstring)."""

    def __init__(self, fn: Callable, candidate: str, n_items: int, *, judge: bool = False, retries: int = 2,
                 name: str | None = None, backoff: float = 0.05):
        self.fn, self.candidate, self.has_judge = fn, candidate, bool(judge)
        self.retries, self.backoff = int(retries), float(backoff)
        self.name = name or getattr(fn, "__qualname__", repr(fn))
        self._n = int(n_items)
        self._known = {role: {} for role in ROLES}  # item -> loss: asking again is free
        self.requests = 0  # calls answered with new labels
        self.log: list = []  # (items, role, losses) of every label bought, in order

    @property
    def n_items(self) -> int:
        return self._n

    @property
    def human_labels(self) -> int:
        return len(self._known["human"])

    @property
    def judge_labels(self) -> int:
        return len(self._known["judge"])

    def _call(self, items: np.ndarray, role: str) -> np.ndarray:
        # the user's code: any failure is retried (exponential backoff), then ends this candidate
        retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=wait_exponential(multiplier=self.backoff),
                            reraise=True)
        try:
            out = retrying(self.fn, self.candidate, items.copy(), role)
        except Exception as exc:
            raise SourceError(f"{self.name} failed for {self.candidate!r} ({role}) after "
                              f"{self.retries + 1} attempt(s): {first_line(exc, limit=200)}") from None
        if out is None:  # a function that forgot its return statement
            raise SourceError(f"{self.name} returned None for {self.candidate!r} ({role}); it must return one loss "
                              f"per item ({items.size} here)")
        try:
            losses = np.asarray(out, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise SourceError(f"{self.name} returned non-numeric losses for {self.candidate!r} ({role})") from None
        if losses.size != items.size:
            raise SourceError(f"{self.name} returned {losses.size} losses for {items.size} items "
                              f"({self.candidate!r}, {role})")
        bad = ~np.isfinite(losses) | (losses < 0.0) | (losses > 1.0)
        if bad.any():
            raise SourceError(f"{self.name} returned {int(bad.sum())} loss(es) outside [0, 1] or not finite "
                              f"for {self.candidate!r} ({role}), e.g. {losses[bad][0]!r}")
        return losses

    def _labels(self, items, role: str) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        known = self._known[role]
        new = np.array([i for i in dict.fromkeys(items.tolist()) if i not in known], dtype=np.int64)
        if new.size:
            losses = self._call(new, role)
            known.update(zip(new.tolist(), losses.tolist(), strict=True))
            self.requests += int(new.size)
            self.log.append((new, role, losses))
        return np.array([known[i] for i in items.tolist()], dtype=np.float64)

    def human(self, items) -> np.ndarray:
        return self._labels(items, "human")

    def judge(self, items) -> np.ndarray:
        if not self.has_judge:
            raise ValueError("this source has no judge (set source.judge: true)")
        return self._labels(items, "judge")


@dataclass(frozen=True)
class PythonSpec:
    """A user function ``module:function`` called as ``f(candidate, items, role)`` (a callable also works in-process).
    """

    function: str | Callable
    candidate: str
    n_items: int
    judge: bool
    retries: int
    kind = "python"

    def build(self, arrays, rows) -> PythonSource:
        fn = self.function if callable(self.function) else load_callable(self.function)
        return PythonSource(fn, self.candidate, self.n_items, judge=self.judge, retries=self.retries,
                            name=self.function if isinstance(self.function, str) else None)
