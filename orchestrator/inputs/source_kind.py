"""The label-source kind interface and its registry (:mod:`certsel.orchestrator.inputs.sources` has the built-in kinds
and the loading of a job's data).

Besides loading, a kind may prepare a job before any tracking run exists (:meth:`SourceKind.prepare`: the live kind
starts the job's model servers and generates the reference answers) and say which servers each candidate needs up while
it is labelled (:meth:`SourceKind.server_needs`). The defaults do nothing: the commands and the engine call every kind's
hooks and know no kind's specifics.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from pydantic import BaseModel, ValidationError

from certsel.config import RunConfig
from certsel.policies.registry import Registry

if TYPE_CHECKING:  # jobdata imports this module
    from .jobdata import JobData


class Poll:
    """The driver's wait while every candidate waits for people: ``seconds`` between looks, cut short by :meth:`wake` (a
    webhook saying an answer came)."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self._event = threading.Event()
        self.woken = 0  # waits cut short

    def wake(self) -> None:
        self._event.set()

    def wait(self) -> None:
        if self._event.wait(self.seconds):
            self.woken += 1
        self._event.clear()


@dataclass(frozen=True)
class Provides:
    """What a source gives a policy besides human labels, and the job-file keys that set it."""

    judge: bool
    features: bool
    judge_key: str
    features_key: str
    reference: bool = False  # each item is also scored by a reference model (recovery and drop claims)
    paired: bool = False  # a candidate can be compared with a baseline among them, item by item (regression claims)


class ServerFleet(Protocol):
    """The job's own model servers as a source kind's hooks see them (the engine's
    :class:`~certsel.orchestrator.engine.servers.FleetSchedule`)."""

    name: str  # the fleet's Ray actor, which the workers' sources ask for a server
    prefetched: set[str]  # servers whose answers are all in the cache: no candidate needs them up

    def set_needs(self, needs: dict[str, set[str]]) -> None: ...


class SourceKind:
    """One kind of label source (see the module docstring)."""

    name: ClassVar[str] = ""
    options: ClassVar[type[BaseModel] | None] = None  # the schema of ``labels:`` besides ``kind`` (registered kinds)
    # the progress line's stage while :meth:`prepare` runs; None: the kind prepares nothing
    prepare_stage: ClassVar[str | None] = None
    # whether the kind's labels come from work that runs in parallel across candidates long enough to pay for Ray's
    # start (model calls); False: labels are arithmetic on what is loaded, and `runtime: auto` runs the job in-process
    # (orchestrator/engine/runtime_choice.py). A registered kind is assumed to call models unless it says otherwise.
    parallel: ClassVar[bool] = True

    def server_specs(self, cfg: RunConfig) -> list[dict]:
        """The job's own model servers to start before :meth:`prepare` (keyword dicts of
        :class:`~certsel.workers.serving.ServerSpec`); none by default."""
        return []

    def precheck(self, cfg: RunConfig) -> None:
        """Before anything is spent (no job folder, no Ray, no tracking run): the external services the job names
        answer, or a one-line error naming the key; nothing by default."""

    def prepare(self, cfg: RunConfig, data: JobData, fleet: ServerFleet | None) -> tuple[RunConfig, JobData]:
        """Before any tracking run exists: fetch what the job needs up front (an error here leaves no half-written run).
        Returns the config and data the job runs with."""
        return cfg, data

    def queue_waiter(self, cfg: RunConfig, data: JobData) -> Poll | None:
        """How the driver waits between looks at a source that asks people for labels (an annotation queue: a
        candidate's step may then wait for answers, and settled candidates' queues are withdrawn); None, the default:
        labels come when asked."""
        return None

    def release(self, cfg: RunConfig, data: JobData) -> None:
        """After the job (finished or not): let go of what :meth:`prepare` set up outside the job's servers (a webhook,
        a listening socket); nothing by default."""

    def server_needs(self, specs: list, prefetched: set[str]) -> dict[str, set[str]]:
        """Which of the fleet's servers each candidate (by name) needs up while it is labelled, from its
        :class:`~certsel.workers.contracts.CandidateSpec`; none by default."""
        return {}

    def settings(self, cfg: RunConfig):
        """The job file's section for this source (a validated model)."""
        if self.options is None:
            raise NotImplementedError
        try:
            return self.options.model_validate(cfg.labels.options)
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(x) for x in e["loc"])
            raise ValueError(f"labels.{where}: {e['msg']}" if where else f"labels: {e['msg']}") from None

    def provides(self, cfg: RunConfig) -> Provides:
        raise NotImplementedError

    def load(self, cfg: RunConfig) -> JobData:
        raise NotImplementedError

    def spec(self, cfg: RunConfig, data, k: int, with_judge: bool):
        raise NotImplementedError

    def items_words(self, n_items: int) -> str:
        return f"the {n_items} items of the {self.name} source"

    def loss_words(self, cfg: RunConfig) -> str | None:
        """What one item's loss is, when the source defines it (None: "loss")."""
        return None

    def label_identity(self, cfg: RunConfig, data: JobData, k: int) -> dict | None:
        """Everything that decides candidate ``k``'s loss on an item, for the label store
        (:mod:`certsel.workers.label_store`): two jobs whose candidates have the same identity share labels. None, the
        default: the kind cannot say (its labels are never reused)."""
        return None

    def claim_identity(self, cfg: RunConfig, data: JobData, k: int) -> dict | None:
        """What decides candidate ``k``'s human losses, for its claim in the store's ledger
        (:mod:`certsel.workers.claims`): the label identity less what only decides judge labels (a test stays valid
        with any judge, so another judge is the same claim). Default: the label identity."""
        return self.label_identity(cfg, data, k)

    def claim_place(self, cfg: RunConfig, data: JobData, k: int) -> str | None:
        """Where candidate ``k``'s measurements come from, whatever they are (a table file and its name there): a claim
        new under a place that held another is one whose measurements changed, which the job says. None (the
        default): the kind cannot say."""
        return None

    def mirror_claim_identity(self, cfg: RunConfig, data: JobData, k: int) -> dict | None:
        """A regression claim's identity with its two sides exchanged (the candidate as the baseline): "Y beats X by m"
        tested as Y against X and "X stays within -m of Y" tested as X against Y are one statement, whose test is the
        mirror of the other's. None (the default): no regression, or the kind cannot say."""
        return None

    def legacy_claim_identity(self, cfg: RunConfig, data: JobData, k: int) -> dict | None:
        """The claim identity an earlier release gave candidate ``k`` (None, the default: the same as now). A claim
        the ledger holds under that identity's key moves to the new key (:meth:`~certsel.workers.claims.ClaimLedger.
        adopt`), so a new way of writing an identity never turns a claim into a fresh test."""
        return None


BUILT_IN = ("replay", "live", "python", "tasks")  # the job file's data, live, source and tasks sections


# a job names a registered kind with labels.kind; the built-in ones have sections of their own
SOURCE_KINDS: Registry[SourceKind] = Registry("labels.kind", SourceKind, listed=lambda n: n not in BUILT_IN)


def register_source_kind(kind: SourceKind | type[SourceKind]) -> SourceKind:
    """Add a label-source kind (an instance, or a class with a no-argument constructor) to :data:`SOURCE_KINDS`; from
    then on ``labels: {kind: NAME, ...}`` selects it. Returns the instance."""
    if isinstance(kind, type) and issubclass(kind, SourceKind):
        kind = kind()
    if isinstance(kind, SourceKind) and kind.name and kind.name not in BUILT_IN and kind.options is None:
        raise ValueError(f"label source kind {kind.name!r}: set options (a pydantic model of its labels: keys)")
    return SOURCE_KINDS.register(kind)


def get_source_kind(name: str) -> SourceKind:
    return SOURCE_KINDS.lookup(name)
