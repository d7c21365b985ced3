"""Samples in the order inspect scheduled them, released to the test only as a complete prefix.

inspect runs several samples at once and they finish out of order: long answers finish last and are more often
wrong, so a test fed in completion order would see the easy samples first and certify too early. The order in which
samples are *scheduled* is the dataset's shuffled order (slots free up depending only on samples scheduled before),
so a :class:`ScheduleLedger` keeps that order and releases a sample's value only when it and every sample scheduled
before it are complete.

A sample's value is the mean over its epochs (inspect's default reducer), at its first epoch's position: the sample
stays the unit drawn at random, so the without-replacement argument applies unchanged (docs/inspect.md).
"""

from __future__ import annotations

import numpy as np


class ScheduleLedger:
    """The schedule order of a task's samples and their per-epoch values."""

    def __init__(self, ids, epochs: int):
        self.ids = list(ids)
        self.known = set(self.ids)
        self.epochs = int(epochs)
        self.order: list = []  # sample ids in the order of their first scheduling
        self.position: dict = {}
        self.values: dict = {}  # id -> {epoch: value}
        self.released = 0  # samples given to the test so far (a prefix of ``order``)

    def schedule(self, id) -> None:
        if id not in self.known:
            raise ValueError(f"sample {id!r} was scheduled but is not one of the task's samples")
        if id not in self.position:
            self.position[id] = len(self.order)
            self.order.append(id)

    def is_scheduled(self, id) -> bool:
        return id in self.position

    def complete(self, id, epoch: int, value: float) -> None:
        if id not in self.position:
            raise ValueError(f"sample {id!r} completed without being scheduled")
        # a re-run replaces its epoch's value; a value is a number, or (label, judge) with a judge
        self.values.setdefault(id, {})[int(epoch)] = np.asarray(value, dtype=np.float64)

    def done(self, id) -> bool:
        return len(self.values.get(id, ())) == self.epochs

    def release(self) -> np.ndarray:
        """The epoch means of the samples newly complete at the front of the order."""
        out = []
        while self.released < len(self.order) and self.done(self.order[self.released]):
            out.append(np.mean(np.stack(list(self.values[self.order[self.released]].values())), axis=0))
            self.released += 1
        return np.asarray(out, dtype=np.float64)

    @property
    def scheduled(self) -> int:
        return len(self.order)

    @property
    def pending(self) -> int:
        """Samples scheduled but not yet released (running, or waiting for an earlier one)."""
        return len(self.order) - self.released
