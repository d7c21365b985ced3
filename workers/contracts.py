"""Typed contracts between the driver and the workers: candidate specs, snapshots, label sources.

* :class:`CandidateSpec` says what a worker builds: a candidate's name, the policy it runs
  (a registered :class:`~certsel.policies.kinds.PolicyKind` and its
  :class:`~certsel.policies.kinds.PolicySettings`; none for a pairwise label server) and
  where its labels come from (a :class:`SourceSpec`).
* :class:`Snapshot` is what a worker returns after each step: counters, the evidence and,
  when its label source failed for good, the error.
* :class:`JobArrays` are the arrays every candidate of a job shares (sent once per host).
* Requests (:class:`Load`, :class:`Step`, :class:`Finalize`, ...) are every call the driver
  makes to a candidate host, each a frozen dataclass whose ``run(host)`` calls the host's
  method of the same name; their replies are typed too (:class:`Snapshot`,
  :class:`ModelLosses`). A runtime ships a request to its host and
  returns the reply, or says that the host was lost.
* :class:`LabelSource` is what a candidate asks for labels. Replay tables, live model
  servers and user functions implement it; :class:`~certsel.workers.labellog.LoggedSource`
  wraps any of them with the durable label log.

Everything here is plain data that Ray ships between processes (extension objects such as
a betting strategy defined in user code travel by value; see
:meth:`certsel.orchestrator.engine.runtime.RayRuntime.ship_by_value`).
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from certsel.errors import CertselError
from certsel.policies.kinds import PolicyKind, PolicySettings


class SourceError(CertselError):
    """A label source's request that failed for good (after retries, or a non-retryable
    answer): the candidate it labels ends, not certified; the others go on. ``status``: the
    HTTP status of a non-retryable answer (a 400 for a parameter the server does not
    support), else None."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class LabelsPending(Exception):  # noqa: N818  (a state, not an error: people have not answered yet)
    """Labels a source has asked people for and does not hold yet (an annotation queue such
    as :mod:`certsel.workers.label_studio`): not a failure. ``ready`` leading items of the
    request have their labels (``losses``, in the order asked), the others do not;
    ``waiting`` is how many answers the source is waiting for. A candidate takes the ready
    prefix when its policy allows (labels in the job's order) and otherwise waits whole;
    asking again later is free (requests are idempotent)."""

    def __init__(self, ready: int, waiting: int, losses=None):
        super().__init__(f"{waiting} answer(s) awaited; the first {ready} item(s) of the request are labelled")
        self.ready, self.waiting = int(ready), int(waiting)
        self.losses = np.zeros(0) if losses is None else np.asarray(losses, dtype=np.float64)


@dataclass
class QueueReport:
    """What a source that asks people (an annotation queue) did for one candidate: tasks put
    in front of annotators and taken back, the annotations that saved, the valid answers the
    test used and those it did not (they came after its decision, or for an item beyond
    where it stopped: recorded, never used), the answers refused (outside the declared
    choices), and the annotators' agreement (Krippendorff's alpha, mean pairwise Cohen's
    kappa; None when no item has two answers)."""

    tasks_imported: int = 0
    tasks_withdrawn: int = 0
    annotations_saved: int = 0
    annotations_used: int = 0
    annotations_unused: int = 0
    annotations_refused: int = 0
    answers_awaited: int = 0
    annotators: int = 0
    agreement: dict | None = None


@runtime_checkable
class QueuedSource(Protocol):
    """A label source that puts items in front of people and takes back those nobody has
    started once its candidate is settled (:meth:`withdraw`, which may be called again: it
    then looks for late answers and withdraws what is left); it returns what the queue did."""

    def withdraw(self) -> QueueReport: ...


class Journal(Protocol):
    """Durable records a label source keeps beside its labels (the label log's ``journal``
    table, :class:`~certsel.workers.labellog.LabelLog`): ``record`` commits one (key -> JSON
    body, a later one with the same key replacing it) before it returns."""

    def record(self, key: str, body: dict) -> None: ...

    def records(self) -> dict[str, dict]: ...


class MemoryJournal:
    """A :class:`Journal` in memory (a job without a durable log)."""

    def __init__(self):
        self._rows: dict[str, dict] = {}

    def record(self, key: str, body: dict) -> None:
        self._rows[key] = dict(body)

    def records(self) -> dict[str, dict]:
        return dict(self._rows)


@runtime_checkable
class Journaled(Protocol):
    """A label source with records of its own to keep durable (an annotation queue's tasks
    and every annotation it has seen): the worker hands it the candidate's label-log journal."""

    def attach(self, journal: Journal) -> None: ...


@runtime_checkable
class LabelSource(Protocol):
    """Losses of one candidate on the items a policy asks for.

    ``human(items)`` are the costly labels (a person's reference, or recorded human
    losses), ``judge(items)`` the judge's losses; both return one loss in [0, 1] per item,
    in the order asked, and asking again for an item returns the same loss without a new
    purchase (requests are idempotent). The counters say what was bought so far. A source
    that fails for good raises :class:`~certsel.workers.openai_source.SourceError`; the
    candidate then ends as "source failed" and the others go on.
    """

    @property
    def n_items(self) -> int: ...

    @property
    def human_labels(self) -> int: ...

    @property
    def judge_labels(self) -> int: ...

    @property
    def requests(self) -> int: ...

    def human(self, items) -> np.ndarray: ...

    def judge(self, items) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class JobArrays:
    """The arrays every candidate of a job shares: the seeded item order of testing policies
    (``human_items``: the first n, ``judge_items``: the next r n, judge-only), the item
    features of estimation policies (``features``) and a live job's items (``items``)."""

    human_items: np.ndarray | None = None
    judge_items: np.ndarray | None = None
    features: np.ndarray | None = None
    items: tuple = ()


@runtime_checkable
class SourceSpec(Protocol):
    """One candidate's label source as the workers receive it: a frozen dataclass, defined
    beside the source it builds (:class:`~certsel.workers.replay.ReplaySpec`,
    :class:`~certsel.workers.live.LiveSpec`, :class:`~certsel.workers.python_source.PythonSpec`,
    or a registered kind's own, :mod:`certsel.orchestrator.inputs.sources`). ``build`` returns
    the candidate's :class:`LabelSource` from the job-wide :class:`JobArrays` and the
    candidate's loss-table ``rows`` (human, judge; replay only)."""

    def build(self, arrays: JobArrays, rows) -> LabelSource: ...


@dataclass(frozen=True)
class CandidateSpec:
    """What a worker builds for one candidate (see the module docstring): ``policy`` and
    ``settings`` say which policy runs and with what numbers; without a policy the candidate
    serves losses on demand (a pairwise ranking's model: the comparisons live in the driver)."""

    name: str
    source: SourceSpec
    policy: PolicyKind | None = None
    settings: PolicySettings | None = None
    job_dir: str | None = None  # the durable label log's job folder (None: no log)
    snapshot_every: int | None = None  # steps between policy snapshots in the log
    # labels kept across jobs (workers/label_store.py): the store's file and this candidate's identity in it
    store: str | None = None
    identity: str | None = None


@dataclass
class Snapshot:
    """A candidate after a step: what the driver decides on and what MLflow records.

    Testing candidates fill ``path`` (log E after each new human label), ``log_e``,
    ``max_log_e`` and ``rho_weights``; estimation candidates fill ``decision`` (-1: R <=
    alpha certified, +1: R >= alpha certified, 0: undecided). ``error`` is set when the
    label source failed for good; ``restored_steps`` when a worker rebuilt the candidate
    (steps that came from a policy snapshot rather than a replay of the log).
    """

    name: str
    n_human: int = 0
    n_judge: int = 0
    requests: int = 0
    reused: int = 0  # human labels taken from the label store (workers/label_store.py)
    t: int = 0
    exhausted: bool = False
    estimate: float = float("nan")
    ci: tuple | None = None
    upper_bound: float | None = None  # estimation: the one-sided bound at the policy's level
    level_bounds: dict | None = None  # testing, final: {level: the one-sided bound that inverts its test there}
    label_minimum: float | None = None  # testing, final: the fewest labels any test would need, from its labels
    judge: dict | None = None  # agreement of the judge with the human labels (testing with a judge)
    futility_log_e: float | None = None  # max log e-value of the futility test (evidence for R >= alpha)
    path: np.ndarray | None = None
    log_e: float = 0.0
    max_log_e: float = 0.0
    rho_weights: list | None = None
    decision: int | None = None
    error: str | None = None
    restored_steps: int = 0
    waiting: int = 0  # answers the candidate's label source awaits from people (LabelsPending)
    queue: QueueReport | None = None  # an annotation queue's account (final snapshots, QueuedSource)

    def in_units(self, unit: float) -> Snapshot:
        """The snapshot with its risk numbers (estimate, interval, bounds) multiplied by
        ``unit``: a stacked aggregate's policies see losses divided by M (JobData.unit)."""
        if unit == 1.0:
            return self
        return dataclasses.replace(
            self, estimate=self.estimate * unit, ci=None if self.ci is None else tuple(float(c) * unit for c in self.ci),
            upper_bound=None if self.upper_bound is None else self.upper_bound * unit,
            level_bounds=None if self.level_bounds is None else {k: v * unit for k, v in self.level_bounds.items()})


@dataclass
class ModelLosses:
    """A pairwise model's losses on the items asked for, or why its label source failed for
    good (the driver then ends that model's pairs only; the others go on)."""

    losses: np.ndarray | None = None
    error: str | None = None


class HostRequest(Protocol):
    """A call the driver makes to a candidate host: ``run(host)`` is its reply."""

    def run(self, host): ...


@dataclass(frozen=True, eq=False)
class Load:
    """Build a job's candidates on the host (``rows[name]``: a replay candidate's losses)."""

    specs: list[CandidateSpec]
    arrays: JobArrays
    rows: object  # {name: (human, judge)} or a Ray reference to it

    def run(self, host) -> int:
        return host.load(self.specs, self.arrays, self.rows)


@dataclass(frozen=True, eq=False)
class Rebuild:
    """:class:`Load` then :class:`Restore` in one call (a host the driver lost)."""

    specs: list[CandidateSpec]
    arrays: JobArrays
    rows: object
    batches: dict[str, list[int]]

    def run(self, host) -> list[Snapshot]:
        return host.rebuild(self.specs, self.arrays, self.rows, self.batches)


@dataclass(frozen=True, eq=False)
class Restore:
    """Bring candidates back to where they were: ``batches[name]`` are the labels each
    consumed at each of its steps (from its newest snapshot plus the label log)."""

    batches: dict[str, list[int]]

    def run(self, host) -> list[Snapshot]:
        return host.restore(self.batches)


@dataclass(frozen=True, eq=False)
class Step:
    """Advance each of ``names`` by its number of human labels in ``sizes``."""

    names: list[str]
    sizes: list[int]

    def run(self, host) -> list[Snapshot]:
        return host.step(self.names, self.sizes)


@dataclass(frozen=True, eq=False)
class Finalize:
    """Final snapshots; with ``levels[i]``, testing candidates' one-sided bounds at each level."""

    names: list[str]
    levels: list[list[float]] | None = None

    def run(self, host) -> list[Snapshot]:
        return host.finalize(self.names, self.levels)


@dataclass(frozen=True, eq=False)
class Losses:
    """A pairwise model's losses on ``requests[name]`` (``role`` "judge": the judge's)."""

    requests: dict[str, np.ndarray]
    role: str = "human"

    def run(self, host) -> dict[str, ModelLosses]:
        return host.losses(self.requests, self.role)


@dataclass(frozen=True, eq=False)
class LabelRows:
    """One candidate's labels in purchase order (the rows of the ``labels.parquet`` artifact):
    item indices, roles ("human" or "judge") and losses, one entry per label."""

    item: np.ndarray  # int64
    role: np.ndarray  # object: "human" / "judge"
    loss: np.ndarray  # float64

    def __post_init__(self):
        object.__setattr__(self, "item", np.asarray(self.item, dtype=np.int64))
        object.__setattr__(self, "role", np.asarray(self.role, dtype=object))
        object.__setattr__(self, "loss", np.asarray(self.loss, dtype=np.float64))
        if not (self.item.shape == self.role.shape == self.loss.shape and self.item.ndim == 1):
            raise ValueError(f"label rows need one item, role and loss per label, got shapes {self.item.shape}, "
                             f"{self.role.shape}, {self.loss.shape}")

    @classmethod
    def from_batches(cls, batches) -> LabelRows:
        """From a source's in-memory log: (items, role, losses) per batch."""
        if not batches:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0))
        return cls(np.concatenate([b[0] for b in batches]),
                   np.array([r for b in batches for r in [b[1]] * len(b[0])], dtype=object),
                   np.concatenate([b[2] for b in batches]))

    def __len__(self) -> int:
        return int(self.item.size)

    def human_items(self, t: int | None = None) -> np.ndarray:
        """The items of the first ``t`` human labels (all without ``t``), in purchase order:
        what a candidate's policy used."""
        items = self.item[self.role == "human"]
        if t is not None and items.size < t:
            raise ValueError(f"the label log has {items.size} human labels, the policy used {t}")
        return items if t is None else items[:t]


@dataclass(frozen=True, eq=False)
class Withdraw:
    """Settled candidates: their queued sources take back the items nobody has started."""

    names: list[str]

    def run(self, host) -> dict[str, QueueReport]:
        return host.withdraw(self.names)


@dataclass(frozen=True, eq=False)
class Labels:
    """Every label each of ``names`` bought, in purchase order (:class:`LabelRows`)."""

    names: list[str]

    def run(self, host) -> dict[str, LabelRows]:
        return host.labels(self.names)


@dataclass(frozen=True)
class Pid:
    """The host's process id (operators and fault-injection tests)."""

    def run(self, host) -> int:
        return host.pid()


@dataclass(frozen=True)
class NodeId:
    """The Ray node the host runs on (operators and multi-node tests)."""

    def run(self, host) -> str:
        return host.node_id()
