"""Real inspect-ai tasks whose samples have known scores, for the tests and benchmarks of
``certsel.inspect``.

Each sample carries its score (per epoch, optionally per model) and a delay in its metadata.
The solver waits for the delay (so completion times can follow the score, as long wrong
answers do) and answers with mockllm's output; the scorer returns the recorded score, or a
"C"/"I" through ``match`` when the sample asks for the target text.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score, mean, scorer
from inspect_ai.solver import solver


def model_name(state) -> str:
    return str(state.model).rsplit("/", 1)[-1]


@solver
def recorded_answer():
    """Waits the sample's delay, then answers; the answer is the target when its score is 1."""

    async def solve(state, generate):
        meta = state.metadata
        await asyncio.sleep(float(meta.get("delay", 0.0)))
        _count_towards_a_kill()
        score = _score_of(meta, model_name(state), state.epoch)
        text = state.target.text if score == 1 else "something else"
        state.output = ModelOutput.from_content(str(state.model), text)
        return state

    return solve


_ANSWERED = [0]


def _count_towards_a_kill() -> None:
    """``CERTSEL_TEST_KILL_AFTER=k``: the process dies (no cleanup, as under ``kill -9``) at its k-th answer."""
    after = os.environ.get("CERTSEL_TEST_KILL_AFTER")
    _ANSWERED[0] += 1
    if after is not None and _ANSWERED[0] >= int(after):
        os._exit(9)


def _score_of(meta: dict, model: str, epoch: int):
    value = meta["scores"][model] if isinstance(meta["scores"], dict) else meta["scores"]
    return value[(epoch - 1) % len(value)] if isinstance(value, list) else value


@scorer(metrics=[mean()])
def recorded_score():
    """The sample's recorded score for this model and epoch (a number, or any value given)."""

    async def score(state, target):
        return Score(value=_score_of(state.metadata, model_name(state), state.epoch))

    return score


def dataset(scores, delays=None, shuffle: int | None = 0) -> MemoryDataset:
    """A dataset of ``len(scores)`` samples with ids 0..N-1; ``scores[i]`` is a number, a list
    per epoch, or a dict per model; shuffled with seed ``shuffle`` (None: not shuffled)."""
    delays = np.zeros(len(scores)) if delays is None else np.asarray(delays, dtype=float)
    samples = [Sample(input=f"question {i}", target=f"answer {i}", id=i,
                      metadata={"scores": s, "delay": float(d)}) for i, (s, d) in enumerate(zip(scores, delays))]
    data = MemoryDataset(samples)
    if shuffle is not None:
        data.shuffle(seed=shuffle)
    return data


def task(scores, manager, *, delays=None, shuffle: int | None = 0, name: str = "known", model: str | None = None,
         scorer_=None, **kw) -> Task:
    return Task(dataset=dataset(scores, delays, shuffle), solver=recorded_answer(), scorer=scorer_ or recorded_score(),
                early_stopping=manager, name=name, model=model, **kw)


def run(tasks, log_dir, *, max_samples: int = 8, **kw):
    """inspect's own eval() on the tasks, quietly; returns the logs."""
    return eval(tasks, model=kw.pop("model", "mockllm/model"), max_samples=max_samples, max_tasks=kw.pop("max_tasks", 8),
                display="none", log_dir=str(log_dir), **kw)


def boundary_scores(n: int, mean_score: float, rng) -> np.ndarray:
    """n scores of 0/1 whose mean is exactly round(n * mean_score) / n, in random positions."""
    k = int(round(n * mean_score))
    out = np.zeros(n)
    out[rng.permutation(n)[:k]] = 1.0
    return out


class CompletionLedger:
    """A ledger that releases samples in the order they *complete* (epochs = 1): what a manager
    that skipped certsel's schedule ordering would feed its test. For the experiments only."""

    def __init__(self, inner):
        self.inner, self.queue = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def complete(self, id, epoch, value):
        self.inner.complete(id, epoch, value)
        self.queue.append(float(value))

    def release(self):
        out, self.queue = np.asarray(self.queue, dtype=np.float64), []
        self.inner.released += out.size
        return out


def completion_order(manager):
    """Make ``manager`` (a CertifiedStopping) feed its test in completion order."""
    start = manager.start_task

    async def start_task(task, samples, epochs):
        name = await start(task, samples, epochs)
        manager.run.ledger = CompletionLedger(manager.run.ledger)
        return name

    manager.start_task = start_task
    return manager


def boundary_runs(reps: int, log_dir, *, n: int = 100, correct: int = 69, at_least: float = 0.7, delta: float = 0.1,
                  order: str = "schedule", seed: int = 0, slow: float = 0.04, fast: float = 0.001,
                  max_samples: int = 10, max_tasks: int = 16):
    """``reps`` inspect runs of a task whose mean score is ``correct / n`` (just below
    ``at_least``), each with its own shuffle; wrong answers take ``slow`` seconds and right ones
    ``fast``, so completion order runs ahead on the right answers. Returns the certificates."""
    from certsel.inspect import CertifiedStopping

    scores = np.r_[np.ones(correct), np.zeros(n - correct)]
    delays = np.where(scores == 1, fast, slow)
    managers, tasks = [], []
    for k in range(reps):
        # many runs, each a test of its own by design: no jobs, no ledger
        m = CertifiedStopping(at_least=at_least, delta=delta, futility=None, keep=False, store=None)
        if order == "completion":
            completion_order(m)
        managers.append(m)
        tasks.append(task(scores, m, delays=delays, shuffle=seed + k, name=f"boundary_{k}"))
    logs = run(tasks, log_dir, max_samples=max_samples, max_tasks=max_tasks)
    bad = [log.error.message for log in logs if log.status != "success"]
    if bad:
        raise RuntimeError(bad[0])
    return [m.certificate for m in managers]


@scorer(metrics=[mean()])
def recorded_judge():
    """The sample's recorded judge score (metadata "judge"): the cheap scorer."""

    async def score(state, target):
        return Score(value=state.metadata["judge"])

    return score


class Counted:
    """Wraps a scorer and counts the samples it scored (the expensive scorer's bill)."""

    def __init__(self, inner):
        self.inner, self.ids = inner, []

    async def __call__(self, state, target):
        self.ids.append(state.sample_id)
        return await self.inner(state, target)


def judged_dataset(human, judge, shuffle: int = 0) -> MemoryDataset:
    samples = [Sample(input=f"question {i}", target=f"answer {i}", id=i,
                      metadata={"scores": float(h), "judge": float(j), "delay": 0.0})
               for i, (h, j) in enumerate(zip(human, judge))]
    data = MemoryDataset(samples)
    data.shuffle(seed=shuffle)
    return data
