"""inspect-ai's early-stopping protocol driven without inspect's runner, for benchmarks that need thousands of evals.

A manager is called as inspect's task runner calls it (``start_task`` with the eval's spec and its shuffled samples,
``schedule_sample`` when a slot of ``max_samples`` frees, in the dataset's order, ``complete_sample`` as samples
finish, ``complete_task`` at the end), with inspect's own objects (a real ``EvalSpec`` from a real log, ``Sample``,
``SampleScore``). Samples finish out of order: each step one sample in flight finishes, a wrong answer ``slow`` times
less likely to finish next than a right one, as long wrong answers are slower. ``tests/test_inspect_claims.py`` checks
that a driven eval states the certificate a real ``eval()`` of the same task states.
"""

from __future__ import annotations

import asyncio

import numpy as np
from inspect_ai.dataset import Sample
from inspect_ai.scorer import SampleScore, Score

SCORER = "recorded_score"


def shuffled_samples(n: int, seed: int) -> list:
    """Samples 0..n-1 (as ``helpers.inspect_tasks.dataset`` makes them) in the order of inspect's shuffle ``seed``."""
    from helpers.inspect_tasks import dataset

    return list(dataset(np.zeros(n), shuffle=seed))


def spec_like(spec, name: str):
    """A real eval's spec (``log.eval``) for a task of another name: another claim, the same settings."""
    return spec.model_copy(update={"task": name})


async def drive(manager, spec, samples: list, values: np.ndarray, *, concurrency: int = 10, slow: float = 10.0,
                rng: np.random.Generator, kill_after: int | None = None) -> None:
    """One eval of one task under ``manager``; ``values[id]``: sample ``id``'s score. ``kill_after``: the eval dies
    after that many scores (no ``complete_task``, samples left in flight), as under ``kill -9``."""
    await manager.start_task(spec, [Sample(input=s.input, target=s.target, id=s.id) for s in samples], epochs=1)
    flight: list = []
    scored = 0
    queue = iter(samples)
    more = True
    while more or flight:
        while more and len(flight) < concurrency:
            s = next(queue, None)
            if s is None:
                more = False
            elif await manager.schedule_sample(s.id, 1) is None:
                flight.append(s.id)
        if not flight:
            continue
        weight = np.where(np.array([values[i] for i in flight]) >= 1.0, slow, 1.0)
        done = flight.pop(int(rng.choice(len(flight), p=weight / weight.sum())))
        score = SampleScore(score=Score(value=float(values[done])), sample_id=done)
        await manager.complete_sample(done, 1, {SCORER: score})
        scored += 1
        if kill_after is not None and scored >= kill_after:
            return
    await manager.complete_task()


def drive_all(runs, *, concurrency: int = 10, slow: float = 10.0, seed: int = 0) -> None:
    """Several evals at once in one event loop (as one ``eval()`` of several tasks): ``runs`` of (manager, spec,
    samples, values)."""
    rng = np.random.default_rng(seed)

    async def main():
        for manager, spec, samples, values in runs:
            await drive(manager, spec, samples, values, concurrency=concurrency, slow=slow, rng=rng)

    asyncio.run(main())
