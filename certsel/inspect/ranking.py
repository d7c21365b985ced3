"""``CertifiedRanking``: several models (or prompt variants) ranked by paired tests inside inspect-ai.

Every model runs the same shuffled samples; each pair is compared on the paired score difference by the pair tests
of a ``pairwise`` certsel job (Seq's betting sign tests at delta / P per pair, bets sized for the claims a pair stops
on), decided by the same core (:mod:`certsel.orchestrator.engine.decisions`). A pair stops once its order is
certified, or (with ``epsilon``) a tie |difference| < epsilon is, or the goal no longer needs it; a model's task
stops when none of its pairs is open. The certificate (partial order, ties, rank intervals, top-k set) holds jointly
with probability >= 1 - delta.

Validity under concurrency: the pairs see the samples in the dataset's shuffled order, which the scores cannot
influence; a position is fed to every open pair once each model in an open pair has scored it (a ``pairwise`` round
with ``budget.batch: 1``), so completion order and speed never reach the tests.

Run it as one task over several models (``eval(task, model=[...])`` with ``Task(early_stopping=ranking)``), or one
task per model with ``ranking.member(name)`` as its manager.
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass, field

import numpy as np

from certsel.errors import InputError
from certsel.orchestrator.engine.decisions import RankingRules
from certsel.orchestrator.engine.ranking_session import PairTests, RankingSession
from certsel.orchestrator.engine.session import new_records
from certsel.orchestrator.results.ranking import Ranking
from certsel.policies.pair_bets import pair_bet, pair_claims
from certsel.policies.comparison import GOALS
from certsel.policies.kinds import POLICY_KINDS
from certsel.policies.procedures import PROCEDURES

from .claims import HOME, RANKING_KIND, WRITTEN, TaskClaim, ledger_words, store_path, task_identity
from .schedule import ScheduleLedger
from .scores import ScoreError, ScoreReader
from .setup import SetupError, check_samples, checked_level

_CURRENT = contextvars.ContextVar("certsel_ranking_model", default=None)


@dataclass
class _Model:
    """One model's task: its samples' scores by id and what the ranking decided for it."""

    name: str
    reader: ScoreReader | None = None
    ledger: ScheduleLedger | None = None  # schedule order and per-epoch scores
    scored: dict | None = None  # sample id -> its epoch mean, once every epoch is scored
    released: int = 0  # positions of the common order scored (a prefix)
    stopped: str | None = None  # why its task stops scheduling samples (None: it runs)
    at_stop: int = 0  # positions the pairs had used when it stopped
    skipped: int = 0  # sample-epochs it was told not to run
    earlier: set = field(default_factory=set)  # samples earlier runs of the ranking scored for it: skipped
    done: bool = False


@dataclass(frozen=True)
class RankingResult:
    """What the ranking certified, with the samples it cost."""

    ranking: Ranking
    top: list  # the models certified best (goal topk: certified among the k best)
    selected: str | None
    statuses: dict  # model -> (status, reason)
    samples_run: dict  # model -> samples it started
    samples_full: int  # every model on every sample
    positions: int  # positions of the common order the pairs used (the most any pair used)
    level: str  # the procedure's level in words, as a pairwise job states it
    ledger: str = ""  # where the ranking is recorded, and which ranking of these scores it is


class _Member:
    """A model's early-stopping manager (its task's calls go to the ranking, as that model)."""

    def __init__(self, ranking: "CertifiedRanking", name: str):
        self.ranking, self.name = ranking, name

    async def start_task(self, task, samples, epochs: int) -> str:
        return self.ranking._start(self.name, task, samples, epochs)

    async def schedule_sample(self, id, epoch: int):
        return self.ranking._schedule(self.name, id, epoch)

    async def complete_sample(self, id, epoch: int, scores) -> None:
        self.ranking._complete(self.name, id, epoch, scores)

    async def complete_task(self) -> dict:
        return self.ranking._complete_task(self.name)


class CertifiedRanking:
    """Certified pairwise ranking of ``models`` inside inspect (see the module docstring).

    ``epsilon``: pairs whose mean scores are certified closer than this are tied (None: no ties); ``goal``:
    ``"ranking"`` (the whole order), ``"best"``, ``"topk"`` (with ``topk``) or ``"all"``; ``delta``: the error
    probability of the whole ranking; ``bet``: ``"margin"`` (sized for the claims a pair stops on) or ``"plug-in"``
    (Seq's own); ``seed``: the pair tests' seed; ``scorer``, ``key``: the score ranked (default: the task's first
    scorer); ``budget``: the most samples a pair uses (default: all); ``store``: the ledger the ranking is recorded in
    (default: certsel's home's; None: off), which refuses a second ranking of the same models' scores, since a
    ranking's test cannot be continued yet. Bad arguments raise :class:`~certsel.errors.InputError`."""

    def __init__(self, models, *, epsilon: float | None = None, delta: float = 0.05, goal: str = "ranking",
                 topk: int | None = None, bet: str = "margin", seed: int = 0, scorer: str | None = None,
                 key: str | None = None, budget: int | None = None, name: str = "inspect-ranking",
                 mlflow: str | None = None, experiment: str = "certsel-inspect", home=None, keep: bool = True,
                 track: bool = True, store=HOME):
        self.names = [str(m) for m in models]
        if len(self.names) < 2 or len(set(self.names)) != len(self.names):
            raise InputError("models must be a list of at least two distinct names")
        self.delta = checked_level(delta, "delta")
        if goal not in GOALS:
            raise InputError(f"goal must be one of {', '.join(GOALS)}, got {goal!r}")
        if goal == "topk" and (isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk < len(self.names)):
            raise InputError(f"goal 'topk' needs topk, a whole number from 1 to {len(self.names) - 1}, got {topk!r}")
        if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, int | float)
                                    or not 0.0 < float(epsilon) < 1.0):
            raise InputError(f"epsilon must be a number strictly between 0 and 1, got {epsilon!r}")
        try:
            self.pair_bet = pair_bet(bet)
        except ValueError as err:
            raise InputError(str(err)) from None
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise InputError(f"budget must be a positive number of samples, got {budget!r}")
        self.epsilon = None if epsilon is None else float(epsilon)
        self.goal, self.topk, self.bet, self.seed, self.budget = goal, topk, bet, int(seed), budget
        self.reader = ScoreReader(scorer, key)
        self.name, self.mlflow, self.experiment = name, mlflow, experiment
        self.home, self.keep, self.track = home, keep, track
        self.store = store_path(store)
        self.identities: dict = {}  # model -> its task's identity (certsel.inspect.claims), once started
        self.claim: TaskClaim | None = None  # the ranking's claim in the ledger, once every model started
        self.job = None  # the JobResult kept as a certsel job once every task is done
        self.proc = PROCEDURES.lookup("pairwise")
        self.models = {n: _Model(n) for n in self.names}
        self.members = {n: _Member(self, n) for n in self.names}
        self.order: list | None = None  # the common order: the dataset's shuffled sample ids
        self.session: RankingSession | None = None  # the pairs and the decisions, once the first task starts
        self.result: RankingResult | None = None
        self.outcome = None  # the session's end (what the kept job states)

    # -- inspect's EarlyStopping protocol, for one task over several models ----------------------
    def member(self, name: str) -> _Member:
        """The early-stopping manager of model ``name``'s task (one task per model)."""
        if name not in self.members:
            raise InputError(f"unknown model {name!r}; the models are: {', '.join(self.names)}")
        return self.members[name]

    async def start_task(self, task, samples, epochs: int) -> str:
        model = str(task.model)
        name = self._name_of(model)
        _CURRENT.set(name)  # the task's later calls run in this task's context: they are this model's
        return self._start(name, task, samples, epochs)

    async def schedule_sample(self, id, epoch: int):
        return self._schedule(self._current(), id, epoch)

    async def complete_sample(self, id, epoch: int, scores) -> None:
        self._complete(self._current(), id, epoch, scores)

    async def complete_task(self) -> dict:
        return self._complete_task(self._current())

    def _name_of(self, model: str) -> str:
        """The ranking's name for inspect's model: the name itself, or its last path part."""
        if model in self.models:
            return model
        short = [n for n in self.names if model.endswith("/" + n) or model.rsplit("/", 1)[-1] == n]
        if len(short) != 1:
            raise SetupError(f"model {model!r} is not one of the ranking's models ({', '.join(self.names)})")
        return short[0]

    def _current(self) -> str:
        name = _CURRENT.get()
        if name is None:
            raise SetupError("a sample of a task the ranking did not start: give each task of the eval the ranking "
                             "(or its member) as early_stopping")
        return name

    # -- the tasks -------------------------------------------------------------------------------
    def _start(self, name: str, task, samples, epochs: int) -> str:
        m = self.models[name]
        if m.ledger is not None:
            raise SetupError(f"model {name!r} has a task running already; each model runs one task of the ranking")
        if self.result is not None:
            raise SetupError("this CertifiedRanking has finished; make a new one for another eval")
        check_samples(task, samples)
        ids = [s.id for s in samples]
        if self.order is None:
            if self.budget is not None and self.budget > len(ids):
                raise SetupError(f"budget {self.budget} is more than the task's {len(ids)} samples")
            self.order = ids
            self.session = self._session(len(ids))
        elif ids != self.order:
            raise SetupError(f"model {name!r} runs other samples, or the same in another order, than the models "
                             "before it: every model of a ranking runs one shuffled dataset (eval(task, "
                             "model=[...]) does; for tasks of their own, give them the same dataset object)")
        m.reader = self.reader.resolve(task.scorers)
        if self.store is not None:
            self.identities[name] = task_identity(task, samples, epochs, m.reader.words)
            if len(self.identities) == len(self.names):
                self._claim(task)
        m.ledger, m.scored = ScheduleLedger(ids, epochs), {}
        if self.claim is not None and self.claim.base is not None and len(self.identities) == len(self.names):
            self._continue(self.claim.base.run.state)
        return "certsel"

    # -- the ledger -----------------------------------------------------------------------------------
    def _settings(self) -> dict:
        return {"goal": self.goal, "topk": self.topk, "bet": self.bet, "seed": self.seed, "delta": self.delta}

    def _claim(self, task) -> None:
        """Hold the ranking's claim (every model's identity and epsilon) once every model has started: before any
        pair used a sample, since a position is fed once every model scored it."""
        identity = "inspect ranking:" + ",".join(sorted(self.identities.values()))
        self.claim = TaskClaim.open(self.store, identity, float(self.epsilon or 0.0),
                                    where=f"the ranking of {', '.join(self.names)} on task {task.task}",
                                    delta=self.delta, settings=self._settings(), kind=RANKING_KIND)

    def _continue(self, state: dict) -> None:
        """A ranking tested before goes on from its record: the common order starts with the positions its pairs used
        (fed to them again, which puts every pair test where it stood), and goes on with the other samples in this
        eval's shuffled order (a uniformly random order of the rest, whatever the record). Every model's recorded
        scores are taken as given and its samples there skipped, those beyond the positions used included, so no score
        is drawn twice."""
        used = [json.loads(i) for i in state["order"]]
        taken = set(used)
        self.order = [*used, *(i for i in self.order if i not in taken)]
        for n in self.names:
            rec = state["scores"].get(self.identities[n], {"ids": [], "values": np.zeros(0)})
            m = self.models[n]
            m.scored = {**m.scored, **dict(zip((json.loads(i) for i in rec["ids"]), np.asarray(rec["values"]).tolist()))}
            m.earlier = set(json.loads(i) for i in rec["ids"])
            m.released = 0
            while m.released < len(self.order) and self.order[m.released] in m.scored:
                m.released += 1
        self._advance()

    def _state(self) -> dict:
        """What the ledger keeps of the ranking: the common order, every model's scores (by its identity) and the
        settings, with the runs before."""
        before = {} if self.claim.base is None else self.claim.base.run.state
        used = int(self.session.pairs.n_labeled.max(initial=0))
        return {"kind": RANKING_KIND, WRITTEN: True, "order": [json.dumps(i) for i in self.order[:used]],
                "scores": {self.identities[n]: {"ids": [json.dumps(i) for i in (self.models[n].scored or {})],
                                                "values": np.array(list((self.models[n].scored or {}).values()),
                                                                   dtype=np.float64)} for n in self.names},
                **self._settings(), "jobs": [*before.get("jobs", []), self.claim.holder],
                "runs": int(before.get("runs", 0)) + 1}

    def _write_ahead(self) -> None:
        """Every score into the ledger as it comes (a killed ranking continues with all it was given)."""
        if self.claim is not None:
            self.claim.write_ahead(int(self.session.pairs.n_labeled.max(initial=0)), self._state())

    def _session(self, n_items: int) -> RankingSession:
        """The ranking's session: a ``pairwise`` job's Seq pair tests (radius betting) over the task's samples."""
        return RankingSession(new_records(self.names), procedure=self.proc, delta=self.delta,
                              rules=RankingRules(self.goal, self.topk, self.epsilon, self.budget or n_items),
                              tests=PairTests(POLICY_KINDS.lookup("seq"), n_items, self.seed, "betting",
                                              bet=self.pair_bet.for_claims(pair_claims(self.epsilon))))

    @property
    def cap(self) -> int:
        return self.budget or len(self.order)

    def _schedule(self, name: str, id, epoch: int):
        from inspect_ai.util import EarlyStop

        m = self.models[name]
        if id in m.earlier:
            m.skipped += 1
            return EarlyStop(id=id, epoch=epoch, reason="scored by an earlier run of the ranking",
                             metadata={"manager": "certsel"})
        if m.stopped is not None:
            m.skipped += 1
            return EarlyStop(id=id, epoch=epoch, reason=m.stopped, metadata={"manager": "certsel"})
        m.ledger.schedule(id)
        return None

    def _complete(self, name: str, id, epoch: int, scores) -> None:
        m = self.models[name]
        where = f"model {name!r}, sample {id!r}, epoch {epoch}"
        if not m.ledger.is_scheduled(id):
            raise SetupError(f"{where} was scored without being scheduled (reused from an earlier log?); "
                             "certsel cannot place it in the random order: run the task afresh")
        try:
            value = m.reader.read(scores, where)
        except ScoreError as err:
            self._fail(m, str(err))
            raise
        m.ledger.complete(id, epoch, value)
        if m.ledger.done(id) and id not in m.earlier:  # a score an earlier run recorded stays the test's
            m.scored[id] = float(np.mean(np.stack(list(m.ledger.values[id].values()))))
            while m.released < len(self.order) and self.order[m.released] in m.scored:
                m.released += 1
            self._advance()

    def _complete_task(self, name: str) -> dict:
        m = self.models[name]
        m.done = True
        if m.stopped is None and m.released < self.cap:  # samples errored or were cut: no more positions come
            self._fail(m, f"its task ended after {m.released} of the {self.cap} samples the pairs may use")
        self._stop(m, "its task ended")
        if all(x.done for x in self.models.values()):
            self.result = self._finish()
            if self.claim is not None:  # the ranking's test as it stands after this eval, into the ledger
                self.claim.finish(self.result.positions, "ranked", self._state())
            if self.keep:  # a certsel job like any other: its folder, certificate, report and MLflow run
                from .kept_job import write_ranking

                self.job = write_ranking(self, home=self.home, track=self.track)
        return self._summary(m)

    def used_losses(self) -> dict:
        """Each model's (sample, loss 1 - score, no judge) on the positions its pairs used, in the common order."""
        s = self.session
        n = s.pairs.n_labeled
        out = {}
        for k, name in enumerate(self.names):
            mine = (s.ii == k) | (s.jj == k)
            used = int(n[mine].max(initial=0))
            scored = self.models[name].scored or {}
            out[name] = [(i, 1.0 - scored[i], None) for i in self.order[:used]]
        return out

    # -- the pairs: fed to the session ---------------------------------------------------------------
    def _advance(self) -> None:
        """Feed every open pair each position its models have all scored, one position at a time (module
        docstring), then stop the models none of whose pairs is open."""
        s, names = self.session, self.names
        while True:
            open_ = s.open_pairs()
            if open_.size == 0:
                break
            involved = {names[k] for p in open_ for k in (s.ii[p], s.jj[p])}
            at = int(s.pairs.n_labeled[open_[0]])  # every open pair has used the same positions
            if any(self.models[n].released <= at for n in involved):
                break  # a model in an open pair has not scored this position yet
            sample = self.order[at]
            s.feed({int(p): (np.array([at]), np.array([(self.models[names[s.jj[p]]].scored[sample]
                                                         - self.models[names[s.ii[p]]].scored[sample] + 1.0) / 2.0]))
                    for p in open_})
        for k in s.settled_models():
            m = self.models[names[k]]
            if m.stopped is None and m.ledger is not None:
                self._stop(m, "every pair it is in is settled")
        self._write_ahead()

    def _fail(self, m: _Model, why: str) -> None:
        """``m`` gives no more scores: its pairs end undecided, the others go on."""
        self._stop(m, why)
        if self.session is not None:
            self.session.fail(self.names.index(m.name), why)
            self._advance()

    def _stop(self, m: _Model, why: str) -> None:
        if m.stopped is None:
            used = self.session.pairs.n_labeled.max(initial=0) if self.session is not None else 0
            m.stopped, m.at_stop = why, int(used)

    # -- the result ------------------------------------------------------------------------------
    def _finish(self) -> RankingResult:
        """The session's end: what the ranking certified, each model's end on its record."""
        s = self.session
        used = self.used_losses()
        s.fold([{i: loss for i, loss, _ in used[n]} for n in self.names])  # each model's labels: what its pairs used
        self.outcome = s.finish()
        statuses = {r.name: (str(r.status), r.reason) for r in s.records}
        runs = {n: self.models[n].ledger.scheduled for n in self.names}
        return RankingResult(self.outcome.ranking, self.outcome.top, self.outcome.selected, statuses, runs,
                             len(self.order) * len(self.names), int(s.pairs.n_labeled.max(initial=0)), s.level(),
                             self.ledger_words())

    def ledger_words(self) -> str:
        return ledger_words(self.store)

    def _summary(self, m: _Model) -> dict:
        """The task's early-stopping metadata: what the ranking did with this model."""
        return {"model": m.name, "ranking": "certsel pairwise", "samples": len(self.order),
                "scheduled": m.ledger.scheduled, "scored": len(m.scored), "skipped_runs": m.skipped,
                "stopped": m.stopped, "positions_used_at_stop": m.at_stop,
                "final": self.result is not None,
                "job_id": None if self.job is None else self.job.job_id}
