"""Real inspect-ai tasks whose samples have known scores, for the tests and benchmarks of
``certsel.inspect``.

Each sample carries its score (per epoch, optionally per model) and a delay in its metadata.
The solver waits for the delay (so completion times can follow the score, as long wrong
answers do) and answers with mockllm's output; the scorer returns the recorded score, or a
"C"/"I" through ``match`` when the sample asks for the target text.
"""

from __future__ import annotations

import asyncio

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
        score = _score_of(meta, model_name(state), state.epoch)
        text = state.target.text if score == 1 else "something else"
        state.output = ModelOutput.from_content(str(state.model), text)
        return state

    return solve


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
