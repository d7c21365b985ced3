"""Typed contracts between the driver and the workers: candidate specs, snapshots, label sources.

* :class:`CandidateSpec` says what a worker builds: a candidate's name, the policy it runs
  (a registered :class:`~certsel.policies.kinds.PolicyKind` and its
  :class:`~certsel.policies.kinds.PolicySettings`; none for a pairwise label server) and
  where its labels come from (a :class:`SourceSpec`).
* :class:`Snapshot` is what a worker returns after each step: counters, the evidence and,
  when its label source failed for good, the error.
* :class:`LabelSource` is what a candidate asks for labels. Replay tables, live model
  servers and user functions implement it; :class:`~certsel.workers.labellog.LoggedSource`
  wraps any of them with the durable label log.

Everything here is plain data that Ray ships between processes (extension objects such as
a betting strategy defined in user code travel by value; see
:meth:`certsel.orchestrator.runtime.RayRuntime.ship_by_value`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from certsel.policies.kinds import PolicyKind, PolicySettings


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


@dataclass(frozen=True)
class ReplaySpec:
    """Recorded losses: the candidate's row of the job's loss table (sent once per host)."""

    kind = "replay"


@dataclass(frozen=True)
class LiveSpec:
    """A model behind an OpenAI-compatible server, scored against references (and a judge)."""

    candidate: dict
    judge: dict | None
    loss: str
    cache_dir: str
    reference: dict | None = None  # losses relative to this model's answers (live.reference)
    kind = "live"


@dataclass(frozen=True)
class PythonSpec:
    """A user function ``module:function`` called as ``f(candidate, items, role)``."""

    function: str
    candidate: str
    n_items: int
    judge: bool
    retries: int
    kind = "python"


@runtime_checkable
class BuildsSource(Protocol):
    """The spec of a registered label-source kind (:mod:`certsel.orchestrator.sources`): a
    frozen dataclass the workers receive, which builds the candidate's label source from the
    job-wide arrays in ``shared`` and its loss-table ``rows`` (replay only)."""

    def build(self, shared: dict, rows) -> LabelSource: ...


SourceSpec = ReplaySpec | LiveSpec | PythonSpec | BuildsSource


@dataclass(frozen=True)
class CandidateSpec:
    """What a worker builds for one candidate (see the module docstring): ``policy`` and
    ``settings`` say which policy runs and with what numbers; without a policy the candidate
    serves losses on demand (a pairwise ranking's model: the comparisons live in the driver)."""

    name: str
    policy: PolicyKind | None = None
    settings: PolicySettings | None = None
    source: SourceSpec = field(default_factory=ReplaySpec)
    job_dir: str | None = None  # the durable label log's job folder (None: no log)
    snapshot_every: int | None = None  # steps between policy snapshots in the log


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
