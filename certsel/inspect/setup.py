"""What a task must be for a certsel manager to certify it, checked before any sample runs: the claim, the levels,
a shuffled dataset in a random order, samples it can follow and scores it can read (:class:`SetupError`, one line)."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from certsel.errors import InputError
from certsel.policies._validation import check_level


class SetupError(InputError):
    """A task the manager cannot certify as set up (one line, raised before any sample runs)."""


def check_claim(at_least, alpha) -> float:
    """The target T in (0, 1) from ``at_least=T`` or ``alpha=`` (a risk, T = 1 - alpha)."""
    if (at_least is None) == (alpha is None):
        raise InputError("give exactly one of at_least= (a mean score) and alpha= (a risk, 1 - score)")
    name, value = ("at_least", at_least) if at_least is not None else ("alpha", alpha)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) < 1.0:
        raise InputError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(at_least) if at_least is not None else 1.0 - float(alpha)


def check_samples(task, samples) -> None:
    """Refuse (:class:`SetupError`) a task whose run order is not a uniformly random order, whose samples cannot be
    followed, or whose scores the manager would not see or could not read as the mean over epochs."""
    if not getattr(task.dataset, "shuffled", False):
        raise SetupError("the task's samples are not shuffled, so the first ones are not a random subset: "
                         "pass sample_shuffle=True to eval() (or call dataset.shuffle() before Task(dataset=dataset))")
    if sorted_by_length(samples):
        # inspect keeps a dataset's "shuffled" flag through dataset.sort(), whose default key is the input length
        raise SetupError("the task's samples are in order of input length (sorted after shuffling?), so the "
                         "first ones are not a random subset: do not sort the dataset after shuffling it")
    if task.config.log_samples is False:
        raise SetupError("inspect consults an early-stopping manager only when it logs samples: "
                         "drop log_samples=False (or --no-log-samples)")
    reducers = [getattr(r, "name", r) for r in (task.config.epochs_reducer or [])]
    if any(r != "mean" for r in reducers):
        raise SetupError(f"the task reduces epochs with {', '.join(map(str, reducers))}; certsel certifies the "
                         "mean over epochs, so use the default reducer 'mean'")
    if not samples:
        raise SetupError("the task has no samples")
    ids = [s.id for s in samples]
    if any(i is None for i in ids) or len(set(ids)) != len(ids):
        raise SetupError("every sample needs its own id for the certificate to follow it")


def _text_length(sample) -> int:
    inp = sample.input
    if isinstance(inp, str):
        return len(inp)
    return sum(len(str(getattr(m, "text", m))) for m in inp)


def sorted_by_length(samples, odds: float = 1e-6) -> bool:
    """Whether input lengths are non-decreasing although a random order would be with probability below ``odds``
    (prod(count_l!) / N!): sorted after shuffling. Equal lengths are not a sort (a stable sort keeps the shuffle)."""
    lengths = np.array([_text_length(s) for s in samples])
    if lengths.size < 2 or np.any(np.diff(lengths) < 0):
        return False
    _, counts = np.unique(lengths, return_counts=True)
    log_p = float(np.sum(gammaln(counts + 1)) - gammaln(lengths.size + 1))
    return log_p < math.log(odds)


def checked_level(value, name: str) -> float:
    """A level in (0, 1), or the one-line InputError naming it."""
    try:
        return check_level(value, name)
    except (TypeError, ValueError) as err:
        raise InputError(str(err)) from None
