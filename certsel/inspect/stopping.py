"""``CertifiedStopping``: an inspect-ai ``EarlyStopping`` manager that stops a task once its mean
score is certified to be at least T (or certified to be at most T, the futility stop).

On its own a task is a selection of one candidate (a fixed sequence of one, threshold 1/delta), decided by the same
core and kept as the same kind of certsel job as a :class:`~certsel.inspect.CertifiedSelection`; the test and
inspect's protocol are in :mod:`certsel.inspect.task`.
"""

from __future__ import annotations

from .claims import HOME, store_path
from .selection import CertifiedSelection
from .task import TaskTest


class CertifiedStopping(TaskTest):
    """An inspect-ai early-stopping manager that certifies "mean score >= T" for one task.

    The test's parameters are :class:`~certsel.inspect.task.TaskTest`'s. ``keep``, ``home``, ``name``, ``mlflow``,
    ``experiment``, ``track``: the certsel job the task is kept as, as for a
    :class:`~certsel.inspect.CertifiedSelection` (``keep=False``: no job); ``store``: the ledger its claim's test is
    kept in (default: certsel's home's; None: off), so that a rerun continues that test.
    """

    def __init__(self, at_least: float | None = None, *, keep: bool = True, home=None, name: str = "inspect-stopping",
                 mlflow: str | None = None, experiment: str = "certsel-inspect", track: bool = True, store=HOME,
                 **settings):
        super().__init__(at_least, **settings)
        self.settings = dict(at_least=at_least, **settings)
        self.job_options = dict(keep=keep, home=home, name=name, mlflow=mlflow, experiment=experiment, track=track,
                                store=store if store is None or store == HOME else store_path(store))

    def own_selection(self, model: str) -> None:
        """The selection of one around this manager (its candidate: the task's model)."""
        sel = CertifiedSelection([model], procedure="fst", **self.settings, **self.job_options)
        sel.members[model] = self
        self.selection, self.candidate = sel, model

    async def start_task(self, task, samples, epochs: int) -> str:
        self.refuse_second_task()
        self.own_selection(str(task.model))
        return await super().start_task(task, samples, epochs)
