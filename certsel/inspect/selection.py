"""``CertifiedSelection``: one multiple-testing procedure over the tasks of several models or
prompt variants that inspect runs in one ``eval()``.

Every candidate's task gets its own manager (:meth:`CertifiedSelection.member`), because inspect calls
``complete_sample`` without naming the task. The members' tests run at the procedure's levels
(``policies/procedures.py``: fixed sequence at delta each, Bonferroni at delta/K, Holm stepping down from delta/K),
and the selection decides for all of them after every score: a member stops once certified, futile, or no longer
needed (under a fixed sequence, every candidate after one that failed). At the end the procedure runs on the final
evidence, as in a certsel job, and the selection comes with bounds that hold together for every candidate.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from dataclasses import asdict, dataclass

import numpy as np

from certsel.errors import InputError
from certsel.orchestrator.engine.decisions import Certify
from certsel.orchestrator.engine.session import SelectionSession, new_records
from certsel.orchestrator.results.records import Status
from certsel.policies.procedures import PROCEDURES

from certsel.workers.claims import Family

from .claims import HOME, ledger_words, store_path
from .record import TaskRecord
from .setup import SetupError
from .task import StopReason, TaskTest


@dataclass(frozen=True)
class CandidateResult:
    name: str
    certified: bool
    joint_lower_bound: float | None  # the mean-score bound that holds together with the others' (None: no statement)
    certificate: TaskRecord  # the member's task record: the procedure's decision and joint bound


@dataclass(frozen=True)
class SelectionResult:
    """The selection and its certificate."""

    procedure: str  # the procedure and its levels, in words
    at_least: float
    delta: float
    selected: str | None
    certified: list
    candidates: list  # CandidateResult per candidate, in the given order
    samples_run: int  # samples started over all candidates (the ones still running at a stop included)
    samples_full: int  # every candidate on every sample
    statement: str

    def to_dict(self) -> dict:
        out = asdict(self)
        out["candidates"] = [{"name": c.name, "certified": c.certified, "joint_lower_bound": c.joint_lower_bound,
                              "certificate": c.certificate.to_dict()} for c in self.candidates]
        out["saved"] = 1.0 - self.samples_run / self.samples_full if self.samples_full else 0.0
        return out


class CertifiedSelection:
    """Certified selection among ``candidates`` (names, in the procedure's order) inside inspect.

    ``procedure``: ``"fst"`` (fixed sequence, in the given order), ``"bonferroni"`` or ``"holm"``. ``objective``: a
    number per candidate (cost, size, latency), ``goal`` whether smaller (``"minimize"``) or larger is better; the
    selected candidate is the certified one with the best objective (:meth:`select`). ``out``: a path the certificate
    JSON is written to once every task is done; ``mlflow``: a tracking URI (``experiment``: the MLflow experiment);
    ``store``: the ledger that keeps each candidate's claim and its family (default: certsel's home's; a path; None:
    off, the statement then holds for this eval alone), so that a rerun continues every claim's test
    (:mod:`certsel.inspect.claims`) and keeps its family. The other parameters are :class:`~certsel.inspect.task.TaskTest`'s, shared by every candidate. Bad arguments raise
    :class:`~certsel.errors.InputError`.
    """

    def __init__(self, candidates, at_least: float | None = None, *, alpha: float | None = None, delta: float = 0.05,
                 procedure: str = "fst", objective: dict | None = None, goal: str = "minimize", out=None,
                 mlflow: str | None = None, experiment: str = "certsel-inspect", name: str = "inspect-selection",
                 home=None, keep: bool = True, track: bool = True, store=HOME, **kw):
        self.names = [str(c) for c in candidates]
        if not self.names or len(set(self.names)) != len(self.names):
            raise InputError("candidates must be a non-empty list of distinct names")
        try:
            self.proc = PROCEDURES.lookup(procedure)
        except ValueError as err:
            raise InputError(str(err)) from None
        if not self.proc.testing or self.proc.ranking:
            raise InputError(f"procedure {procedure!r} does not test a claim per candidate; use fst, bonferroni or holm")
        if objective is not None:
            missing = [n for n in self.names if n not in objective]
            if missing:
                raise InputError(f"objective has no value for {', '.join(missing)}")
            if goal not in ("minimize", "maximize"):
                raise InputError(f"goal must be minimize or maximize, got {goal!r}")
        self.objective, self.goal = objective, goal
        self.procedure, self.name = procedure, name
        self.out, self.mlflow, self.experiment = out, mlflow, experiment
        self.home, self.keep, self.track = home, keep, track
        self.store = store_path(store)  # the claims' ledger (None: off)
        self.claims: dict = {}  # candidate -> its TaskClaim, once its task started
        self.refused: str | None = None  # why the ledger refused a member's claim: no member runs on
        self.job = None  # the JobResult kept as a certsel job once every task is done
        self.members = {n: TaskTest(at_least=at_least, alpha=alpha, delta=delta, selection=self, candidate=n,
                                             **kw) for n in self.names}
        first = self.members[self.names[0]]
        self.at_least, self.alpha, self.delta, self.futility = first.at_least, first.alpha, first.delta, first.futility
        self.size: int | None = None
        self.sizes: dict = {}
        self.pending: dict = {}  # candidates stopped before their task started
        self.result: SelectionResult | None = None
        self.final_joint: tuple | None = None  # joint() on the final evidence, computed once for every member
        self.mlflow_run: str | None = None
        # the one place the selection is decided: the engine's session, fed by the members (no pruning: the
        # objective only picks among the certified)
        obj = None if objective is None else np.array([float(objective[n]) for n in self.names])
        self.session = SelectionSession(new_records(self.names, obj), procedure=self.proc, delta=self.delta,
                                        alpha=self.alpha, futility=self.futility,
                                        key=None if obj is None else (obj if goal == "minimize" else -obj))

    def member(self, name: str) -> TaskTest:
        """The early-stopping manager of candidate ``name``'s task."""
        if name not in self.members:
            raise InputError(f"unknown candidate {name!r}; the candidates are: {', '.join(self.names)}")
        return self.members[name]

    # -- the ledger: claims and their family ------------------------------------------------------
    def member_of(self, name: str) -> dict | None:
        """Candidate ``name``'s place in this selection, as its claim's hold keeps it (None: a task on its own)."""
        return None if self.K == 1 else {"procedure": self.procedure, "size": self.K, "index": self.names.index(name)}

    def claim_started(self, name: str, claim, where: str) -> None:
        """A member's claim is held: a selection keeps the family its claims were tested in (a family chosen after
        seeing their evidence, a sequence re-sorted by its e-values or a family shrunk to its leaders, could certify a
        false claim at the full delta), so one that differs is a :class:`SetupError`; once every member's claim is
        known the family is recorded."""
        if self.K == 1:
            return
        ordered, mine = self.proc.needs_order, self.member_of(name)
        then, was = claim.family(), claim.member_then()
        if then is None and was is None and claim.tested_alone():
            raise SetupError(f"{where}: its claim was tested before on its own (by {claim.tested_alone()}); a "
                             "selection over it would choose its family after seeing that evidence: test it on its "
                             "own again, or select for this eval alone (store=None)")
        if then is not None:
            differs = (then.procedure != self.procedure or len(then.members) != self.K or claim.key not in then.members
                       or (ordered and then.members[mine["index"]] != claim.key))
            words = f"a {then.procedure} selection of {len(then.members)} candidates"
        else:
            differs = was is not None and (was["procedure"] != self.procedure or was["size"] != self.K
                                           or (ordered and was["index"] != mine["index"]))
            words = None if was is None else f"a {was['procedure']} selection of {was['size']} candidates"
        if differs:
            raise SetupError(f"{where}: its claim was tested before in {words}; this selection ({self.procedure}, "
                             f"{self.K} candidates, this one number {mine['index'] + 1}) differs. A rerun keeps its "
                             "claims' family, since one chosen after seeing their evidence could certify a false "
                             "claim: keep it, or select for this eval alone (store=None)")
        self.claims[name] = claim
        if len(self.claims) == self.K:
            keys = [self.claims[n].key for n in self.names]
            now = Family.of(self.procedure, keys, ordered)
            for n in self.names:
                change = None if (f := self.claims[n].family()) is None else f.change(now)
                if change is not None:
                    raise SetupError(f"{where}: the claims of this selection were tested before in another family "
                                     f"({change}); keep it, or select for this eval alone (store=None)")
            claim.record_family(keys, self.procedure, ordered)

    # -- levels ----------------------------------------------------------------------------------
    @property
    def K(self) -> int:
        return len(self.names)

    def decision_levels(self) -> np.ndarray:
        """Each candidate's decision level on the evidence now."""
        return self.session.decision_levels()

    def feed(self, snapshot) -> None:
        """A member's new evidence (:meth:`~certsel.inspect.task.TaskTest.snapshot`), to the session."""
        self.session.fold({snapshot.name: snapshot})

    def finalize(self, names, levels, stop=None) -> dict:
        """The members' final bounds, asked by the session at its end (its ``FinalBounds``; ``stop``: no oracle here,
        so the labels to end a candidate are not computed)."""
        return {n: self.members[n].final_snapshot(levels[n]) for n in names}

    def _all(self):
        return [self.members[n] for n in self.names]

    def register(self, name: str, size: int) -> None:
        if self.result is not None:
            raise SetupError("this CertifiedSelection has finished its selection; make a new one for another eval")
        first = next(iter(self.sizes.items()), None)
        if first is not None and first[1] != size:
            raise SetupError(f"candidate {name!r} has {size} samples but {first[0]!r} has {first[1]}; every "
                             "candidate of a CertifiedSelection must run the same samples")
        self.sizes[name] = size

    # -- decisions -------------------------------------------------------------------------------
    def update(self) -> None:
        """The session's decisions on the members' evidence now, applied as stops."""
        for d in self.session.settle():
            m = self._all()[d.index]
            if isinstance(d, Certify):
                m.stop(StopReason.CERTIFIED, f"mean score >= {self.at_least:g} certified after "
                                             f"{m.run.ledger.released} samples")
            elif d.status is Status.FUTILE:
                m.stop(StopReason.FUTILE, f"mean score <= {self.at_least:g} certified (futility) after "
                                          f"{m.run.ledger.released} samples")
            elif d.status in (Status.STOPPED, Status.SKIPPED):
                if m.run is None:
                    self.pending.setdefault(m.candidate, d.reason)
                else:
                    m.stop(StopReason.NOT_NEEDED, d.reason)
            # NOT_CERTIFIED: every sample ran; the task ends by itself

    def member_finished(self) -> None:
        if self.all_done:
            self.result = self.finish()

    # -- the result -------------------------------------------------------------------------------
    def joint(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """On the evidence so far, by the decision core's final rules: the certified set, each candidate's decision
        level, and lower bounds on the mean scores holding together with probability >= 1 - delta (NaN: no
        statement), agreeing with the certified set."""
        members = self._all()
        certified, levels, bounds = self.session.joint(
            lambda k, level: np.nan if members[k].run is None else 1.0 - members[k].lower_bound(level))
        # 1 - (1 - T) can fall one ulp below T: a certified candidate's bound is at least T
        lower = 1.0 - bounds
        return certified, levels, np.where(certified, np.maximum(lower, self.at_least), lower)

    @property
    def all_done(self) -> bool:
        return all(m.run is not None and m.run.done for m in self._all())

    def finish(self) -> SelectionResult:
        """The session's end: the procedure on the final evidence, the joint bounds and the selection."""
        self.final_joint = self.joint()  # what each task's record states
        _, _, lower = self.final_joint
        for m in self._all():
            m.certificate = m.make_certificate()
        end = self.session.finish(self)
        certified, chosen = end.certified, end.selected
        for k, m in enumerate(self._all()):  # each claim's test, as it stands after this eval, into the ledger
            m.record_claim(bool(certified[k]))
        if self.keep:  # a certsel job like any other: its folder, certificate, report and MLflow run
            from .kept_job import write_selection

            self.job = write_selection(self, end, home=self.home, track=self.track)
            self.mlflow_run = None if self.job.tracking is None else self.job.tracking["run_id"]
            for m in self._all():  # each task's record names the job that holds the certificate
                m.certificate = dataclasses.replace(m.certificate, job_id=self.job.job_id)
        cands = [CandidateResult(m.candidate, bool(certified[k]), None if np.isnan(lower[k]) else float(lower[k]),
                                 m.certificate) for k, m in enumerate(self._all())]
        run = sum(m.run.ledger.scheduled * m.run.epochs for m in self._all())  # a started sample runs every epoch
        full = sum(m.run.size * m.run.epochs for m in self._all())
        names = [self.names[k] for k in np.flatnonzero(certified)]
        statement = (f"with probability >= {1 - self.delta:g}, every certified candidate's mean score is at least "
                     f"{self.at_least:g} ({self.proc.level(self.delta, self.K)}); "
                     + (f"selected {chosen}" if chosen else "nothing certified, nothing selected")
                     + "; " + ledger_words(self.store))
        result = SelectionResult(procedure=self.proc.level(self.delta, self.K), at_least=self.at_least,
                                 delta=self.delta, selected=chosen, certified=names, candidates=cands,
                                 samples_run=int(run), samples_full=int(full), statement=statement)
        if self.out is not None:  # the certificate, as the job's selection.json holds it
            from certsel.orchestrator.outputs.certificate import certificate_of

            if self.job is None:
                raise SetupError("out= writes the job's certificate: leave keep=True")
            path = pathlib.Path(self.out)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(certificate_of(self.job).as_json(), indent=2, allow_nan=False))
        return result

    # -- the job's view of the selection ---------------------------------------------------------
    @property
    def objective_column(self) -> str:
        return "objective" if self.objective is not None else "mean_score_lower_bound"

    @property
    def objective_goal(self) -> str:
        return self.goal if self.objective is not None else "maximize"

    def objective_of(self, lower: np.ndarray) -> dict | None:
        """The objective the job selects by: the one given; else None for a fixed sequence (the end of its
        certified prefix), or each candidate's joint lower bound (0 where none is stated)."""
        if self.objective is not None:
            return {n: float(self.objective[n]) for n in self.names}
        if self.proc.needs_order:
            return None
        return {n: 0.0 if np.isnan(lower[k]) else float(lower[k]) for k, n in enumerate(self.names)}
