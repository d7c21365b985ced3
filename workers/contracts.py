"""Typed contracts between the driver and the workers: candidate specs, snapshots, label sources.

A worker builds a :class:`CandidateSpec` (policy and :class:`SourceSpec`) with the job's shared :class:`JobArrays` and
returns a :class:`Snapshot` after each step. Every driver call to a candidate host is a frozen request dataclass
(:class:`Load`, :class:`Step`, :class:`Finalize`, ...) whose ``run(host)`` calls the host's method of the same name.
:class:`LabelSource` is what a candidate asks for labels (:class:`~certsel.workers.labellog.LoggedSource` wraps any with
the durable log). All of it is plain data that Ray ships between processes (user-defined extension objects travel by
value: :meth:`certsel.orchestrator.engine.runtime.RayRuntime.ship_by_value`).
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from certsel.errors import CertselError
from certsel.policies.kinds import PolicyKind, PolicySettings


class SourceError(CertselError):
    """A label source's request that failed for good (after retries, or a non-retryable answer): its candidate ends, not
    certified; the others go on. ``status``: the HTTP status of a non-retryable answer, else None."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class LabelsPending(Exception):  # noqa: N818  (a state, not an error: people have not answered yet)
    """Labels a source has asked people for and does not hold yet (an annotation queue): not a failure. The first
    ``ready`` items of the request have their labels (``losses``, in order); ``waiting`` answers are outstanding. A
    candidate takes the ready prefix when its policy allows, else waits whole; asking again is free (idempotent)."""

    def __init__(self, ready: int, waiting: int, losses=None):
        super().__init__(f"{waiting} answer(s) awaited; the first {ready} item(s) of the request are labelled")
        self.ready, self.waiting = int(ready), int(waiting)
        self.losses = np.zeros(0) if losses is None else np.asarray(losses, dtype=np.float64)


@dataclass
class QueueReport:
    """What an annotation queue did for one candidate: tasks shown and taken back, annotations saved, valid answers used
    and unused (after the decision, or beyond where the test stopped: recorded, never used), answers refused (outside
    the declared choices), and annotator agreement (Krippendorff's alpha, mean pairwise Cohen's kappa; None when no item
    has two answers)."""

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
    """A label source that puts items in front of people; :meth:`withdraw` takes back those nobody has started once its
    candidate is settled (callable again: it then collects late answers) and returns what the queue did."""

    def withdraw(self) -> QueueReport: ...


class Journal(Protocol):
    """Durable records a label source keeps beside its labels (the label log's ``journal`` table): ``record`` commits
    one (key -> JSON body; a later one with the same key replaces it) before it returns."""

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
    """A label source with durable records of its own (an annotation queue's tasks and annotations): the worker hands it
    the candidate's label-log journal."""

    def attach(self, journal: Journal) -> None: ...


@runtime_checkable
class LabelSource(Protocol):
    """Losses of one candidate on the items a policy asks for. ``human(items)``: the costly labels (a person's
    reference, or recorded human losses); ``judge(items)``: the judge's. One loss in [0, 1] per item, in order; asking
    again returns the same loss without a new purchase. A source that fails for good raises :class:`SourceError`; the
    candidate ends as "source failed" and the others go on."""

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
    """The arrays every candidate of a job shares: the seeded item order of testing policies (``human_items``: the first
    n, ``judge_items``: the next r n, judge-only), estimation policies' ``features`` and a live job's ``items``."""

    human_items: np.ndarray | None = None
    judge_items: np.ndarray | None = None
    features: np.ndarray | None = None
    items: tuple = ()


@runtime_checkable
class SourceSpec(Protocol):
    """One candidate's label source as the workers receive it: a frozen dataclass defined beside the source it builds
    (or a registered kind's, :mod:`certsel.orchestrator.inputs.sources`). ``build`` returns the :class:`LabelSource`
    from the :class:`JobArrays` and the candidate's loss-table ``rows`` (human, judge; replay only)."""

    def build(self, arrays: JobArrays, rows) -> LabelSource: ...


@dataclass(frozen=True, eq=False)
class ClaimRun:
    """One run's record of a claim's test: the state after it, the runs before it (``base``: the record it continued,
    0: none) and its outcome in the job's words."""

    claim: str
    seq: int
    fingerprint: str
    job: str | None
    base: int
    t: int  # human labels the claim's test has consumed, every run before included
    outcome: str
    created: float
    state: dict  # {"candidate": TestingCandidate.state_dict(), "human_items", "judge_items", "path", "kind", "runs"}

    @property
    def runs(self) -> int:
        """The runs of the claim up to this one (this one included)."""
        return int(self.state.get("runs", 1))


@dataclass(frozen=True, eq=False)
class ClaimStart:
    """Where one candidate's claim stands when its job starts: ``base`` is the run it continues (None: the claim's first
    test); with a base, ``human_items`` and ``judge_items`` are its item order (the consumed items first, then new ones in
    the job's seeded order)."""

    key: str
    fingerprint: str
    base: ClaimRun | None = None
    human_items: np.ndarray | None = None
    judge_items: np.ndarray | None = None
    recompute: bool = False  # a configuration recorded before: recomputed from where it started, not recorded again
    # the claim's statement tested the other way round (a regression's sides exchanged): ``key`` and the ledger's runs
    # are that orientation's, ``base`` seen from this one (its pass and fail tests exchanged; engine/claims.py)
    mirrored: bool = False

    @property
    def continued(self) -> bool:
        return self.base is not None


@dataclass(frozen=True)
class CandidateSpec:
    """What a worker builds for one candidate: ``policy`` and ``settings`` say which policy runs and with what numbers;
    without a policy the candidate serves losses on demand (a pairwise ranking's model: the comparisons live in the
    driver)."""

    name: str
    source: SourceSpec
    policy: PolicyKind | None = None
    settings: PolicySettings | None = None
    job_dir: str | None = None  # the durable label log's job folder (None: no log)
    snapshot_every: int | None = None  # steps between policy snapshots in the log
    # label store (workers/label_store.py): its file and this candidate's identity in it
    store: str | None = None
    identity: str | None = None
    # its claim in the store's ledger (workers/claims.py): a continued claim starts from the recorded test
    claim: ClaimStart | None = None


@dataclass
class Snapshot:
    """A candidate after a step: what the driver decides on and what MLflow records. Testing candidates fill ``path``
    (log E after each new human label), ``log_e``, ``max_log_e``, ``rho_weights``; estimation ones ``decision`` (-1: R
    <= alpha certified, +1: R >= alpha certified, 0: undecided). ``error``: the source failed for good;
    ``restored_steps``: steps a rebuilt worker took from a policy snapshot rather than the log."""

    name: str
    n_human: int = 0
    n_judge: int = 0
    requests: int = 0
    reused: int = 0  # human labels taken from the label store (workers/label_store.py)
    baseline: tuple | None = None  # a regression candidate's baseline labels (bought, reused) (workers/paired.py)
    t: int = 0
    exhausted: bool = False
    estimate: float = float("nan")
    ci: tuple | None = None
    upper_bound: float | None = None  # estimation: the one-sided bound at the policy's level
    level_bounds: dict | None = None  # testing, final: {level: the one-sided bound that inverts its test there}
    label_minimum: float | None = None  # testing, final: the fewest labels any test would need, from its labels
    stop_minimum: float | None = None  # testing, final, if asked: the fewest any procedure needs to end it uncertified
    judge: dict | None = None  # agreement of the judge with the human labels (testing with a judge)
    futility_log_e: float | None = None  # max log e-value of the futility test (evidence for R >= alpha)
    futility_path: np.ndarray | None = None  # the futility test's log E after each new human label (the budget stop)
    path: np.ndarray | None = None
    log_e: float = 0.0
    max_log_e: float = 0.0
    rho_weights: list | None = None
    decision: int | None = None
    error: str | None = None
    restored_steps: int = 0
    waiting: int = 0  # answers the candidate's label source awaits from people (LabelsPending)
    queue: QueueReport | None = None  # an annotation queue's account (final snapshots, QueuedSource)
    exact: bool = False  # every item's loss is known (all drawn without replacement): ``decision`` says how it ends

    def in_units(self, unit: float) -> Snapshot:
        """The snapshot with its risk numbers (estimate, interval, bounds) multiplied by ``unit``: a stacked aggregate's
        policies see losses divided by M (JobData.unit)."""
        if unit == 1.0:
            return self
        return dataclasses.replace(
            self, estimate=self.estimate * unit, ci=None if self.ci is None else tuple(float(c) * unit for c in self.ci),
            upper_bound=None if self.upper_bound is None else self.upper_bound * unit,
            level_bounds=None if self.level_bounds is None else {k: v * unit for k, v in self.level_bounds.items()})


@dataclass
class ModelLosses:
    """A pairwise model's losses on the items asked for, or why its source failed for good (only its pairs end)."""

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
    """Bring candidates back: ``batches[name]`` are the labels each consumed at each step (newest snapshot plus the
    label log)."""

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
    stop: dict[str, float] | None = None  # {name: gamma}: also the fewest labels any procedure needs to end it

    def run(self, host) -> list[Snapshot]:
        return host.finalize(self.names, self.levels, self.stop)


@dataclass(frozen=True, eq=False)
class ClaimStates:
    """The test state of each of ``names`` that has a claim, for the store's ledger (workers/claims.py)."""

    names: list[str]

    def run(self, host) -> dict[str, dict]:
        return host.claim_states(self.names)


@dataclass(frozen=True, eq=False)
class Losses:
    """A pairwise model's losses on ``requests[name]`` (``role`` "judge": the judge's)."""

    requests: dict[str, np.ndarray]
    role: str = "human"

    def run(self, host) -> dict[str, ModelLosses]:
        return host.losses(self.requests, self.role)


@dataclass(frozen=True, eq=False)
class LabelRows:
    """One candidate's labels in purchase order (the ``labels.parquet`` rows): items, roles, losses."""

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
        """The items of the first ``t`` human labels (all without ``t``): what its policy used."""
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
