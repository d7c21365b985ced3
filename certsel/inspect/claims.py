"""inspect-ai's claims in the label store's ledger (:mod:`certsel.workers.claims`): one claim, one test, for
``CertifiedStopping``, ``CertifiedSelection`` and ``CertifiedRanking`` as for a certsel job.

A task's **claim** is "the mean score of this model on this task's samples is at least T": its identity is what decides
the scores (the task, its version and arguments, the solver, the model with its arguments and generation settings, the
scorer, the epochs and the samples' ids, inputs and targets), and its key adds the level T. The seed of the shuffle,
the budget, delta and the front end are not in it, so that a rerun is the same claim.

A rerun of a claim **continues its one test**: the test starts from its recorded state (its e-process, futility test
and the losses it consumed), the samples it consumed are skipped (``EarlyStop``), and those an earlier run had started
but not given to the test come first, in their recorded order (their scores where they were recorded), so the order
the test sees is one uniformly random order of the task's samples over every run. Ville's inequality then bounds the
chance that the claim's test *ever* certifies a false claim by delta, however often it is rerun.

While it runs, a task holds its claim (a ``running`` row named for this process and its eval's event loop) and writes
its test ahead whenever a sample starts or is scored (about 0.4 ms each): a killed eval's claim continues from there,
never from zero, with every score it was given and every started sample in its place (an unfinished sample is often
a slow, wrong one: putting it back in the pool would let repeated kills skip past the wrong answers).
``store=None`` turns the ledger off: the statement then holds for that eval alone (:data:`OFF_WORDS`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import socket
import uuid
import weakref
from dataclasses import dataclass, field

import numpy as np

from certsel.errors import InputError
from certsel.workers.claims import DROPPED, INTERRUPTED, RUNNING, ClaimBusy, ClaimLedger, claim_key
from certsel.workers.claims import Family
from certsel.workers.contracts import ClaimRun
from certsel.workers.label_store import identity_key

from .setup import SetupError

HOME = "home"  # store=: certsel's home's label store (certsel.config.ledger)
WRITTEN = "written"  # a state key: the run's test was written ahead (a lost hold continues from it)
KIND = "inspect r-eval"  # the recorded test's kind: certsel's R-Eval test on the loss 1 - score
RANKING_KIND = "inspect ranking"  # a ranking's pair tests on the models' scores
OFF_WORDS = ("ledger off (store=None): this statement holds for this eval alone; a rerun of any of its claims is a new "
             "test, and reruns together can pass a false claim more often than delta (docs/gate.md, 'Reruns')")
# generation settings that change how a model is called, not what it answers
_TRANSPORT = ("max_retries", "timeout", "attempt_timeout", "max_connections")


def store_path(store) -> pathlib.Path | None:
    """The ledger's file for ``store=`` (:data:`HOME`: certsel's home's ``labels.db``; None: no ledger)."""
    if store is None:
        return None
    if isinstance(store, str) and store == HOME:
        from certsel.config.ledger import default_store

        return default_store()
    if not isinstance(store, (str, os.PathLike)):
        raise InputError(f"store must be a path, {HOME!r} (certsel's home's ledger) or None (no ledger), "
                         f"got {store!r}")
    path = pathlib.Path(store).expanduser().absolute()
    from certsel.workers.label_store import check_store

    check_store(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def ledger_words(store: pathlib.Path | None) -> str:
    """What a statement says of its ledger."""
    if store is None:
        return OFF_WORDS
    return (f"each claim's test is kept in the ledger {store}: a rerun continues it, so the statement holds at delta "
            "however often it is rerun")


def samples_digest(samples) -> str:
    """The task's samples (ids, inputs, targets, choices), in id order: the same samples however shuffled."""
    rows = sorted(json.dumps([s.id, s.model_dump(mode="json", include={"input", "target", "choices"})],
                             sort_keys=True, default=str) for s in samples)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def task_identity(spec, samples, epochs: int, scorer: str) -> str:
    """The identity of what decides a task's scores (``spec``: inspect's EvalSpec, what ``start_task`` is given)."""
    generate = spec.model_generate_config.model_dump(mode="json", exclude_none=True)
    identity = {"front end": "inspect", "task": spec.task, "version": spec.task_version,
                "task_args": spec.task_args, "solver": spec.solver, "solver_args": spec.solver_args,
                "model": spec.model, "model_args": spec.model_args, "model_base_url": spec.model_base_url,
                "generate": {k: v for k, v in generate.items() if k not in _TRANSPORT},
                "scorer": scorer, "epochs": int(epochs), "samples": samples_digest(samples)}
    return identity_key(identity)


# -- holders: this process's running evals ----------------------------------------------------------------------
_LOOPS: dict = {}  # holder -> weak reference to the event loop of the eval holding it


def new_holder() -> str:
    """A hold's name: this host and process, and a token of its own."""
    loop = asyncio.get_running_loop()
    holder = f"inspect:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    _LOOPS[holder] = weakref.ref(loop)
    return holder


def gone(holder: str | None) -> bool:
    """Whether the eval that holds a claim is gone (its process ended, or, in this process, its event loop closed):
    its hold is dropped and its claim continues from what it wrote ahead. A hold from another host stays held."""
    parts = (holder or "").split(":")
    if len(parts) != 4 or parts[0] != "inspect" or parts[1] != socket.gethostname():
        return not holder
    pid = int(parts[2])
    if pid == os.getpid():
        ref = _LOOPS.get(holder)
        loop = None if ref is None else ref()
        return loop is None or loop.is_closed()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass
class Continued:
    """Where a continued claim's test stands: its recorded run (``run.state``: what :func:`test_state` wrote), and
    for a task's test the samples it consumed (ids and losses, in order, with the log e-value after each) and those
    started but not consumed (ids in order, their recorded scores or None)."""

    run: ClaimRun
    ids: list
    losses: np.ndarray
    path: np.ndarray
    pending: list = field(default_factory=list)

    @property
    def runs(self) -> int:
        return self.run.runs

    @property
    def jobs(self) -> list:
        return list(self.run.state.get("jobs", []))


class TaskClaim:
    """One task's claim in the ledger at ``store``: found and held when the task starts (:meth:`open`), written ahead
    while it runs (:meth:`write_ahead`), recorded with its outcome when its selection ends (:meth:`finish`)."""

    def __init__(self, store: pathlib.Path, key: str, holder: str, base: Continued | None):
        self.store, self.key, self.holder, self.base = store, key, holder, base
        self.ledger = ClaimLedger(store)
        self.closed = False

    @classmethod
    def open(cls, store: pathlib.Path, identity: str, alpha: float, *, where: str, delta: float, settings: dict,
             member: dict | None = None, kind: str = KIND) -> "TaskClaim":
        """Hold the claim "loss <= ``alpha``" on ``identity``'s scores. ``settings`` (``betting``, ``sampling``,
        ``futility_level``, ``judged``) must be the recorded test's, and ``delta`` at most its first level; a claim under
        test by an eval that is still running, or a judge-assisted test to continue, is a :class:`SetupError`.
        ``member``: its place in a selection (procedure, size, index; None: tested on its own), kept with the hold so
        that a selection killed before its family was recorded keeps it."""
        key = claim_key(identity, alpha)
        holder = new_holder()
        ledger = ClaimLedger(store)
        try:
            runs = ledger.runs(key)
            for r in runs:  # a judge-assisted run is never continued: its claim was tested, whatever it wrote
                if r.outcome == RUNNING and gone(r.job):
                    st = r.state or {}
                    ledger.drop(key, r.seq, INTERRUPTED if WRITTEN in st or st.get("judged") else DROPPED)
            runs = ledger.runs(key)
            busy = [r for r in runs if r.outcome == RUNNING]
            if busy:
                raise SetupError(f"{where}: its claim is under test by another eval that has not ended ({busy[-1].job}); "
                                 "let it end, or test it for this eval alone (store=None)")
            done = [r for r in runs if r.outcome not in (RUNNING, DROPPED)]
            base = None if not done else _continued(done[-1], kind, where=where, delta=delta, settings=settings)
            state = {"kind": kind, "jobs": [holder], **settings, "member": member}
            try:
                ledger.begin(key, holder, holder, base.run.seq if base else 0, state)
            except ClaimBusy as err:
                raise SetupError(f"{where}: its claim was continued by another eval meanwhile ({err.job}): run "
                                 "again") from None
        finally:
            ledger.close()
        return cls(store, key, holder, base)

    def family(self) -> Family | None:
        return self.ledger.family(self.key)

    def tested_alone(self) -> str | None:
        """The holder of an earlier run of the claim on its own, outside any selection (None: none)."""
        if self.base is None or self.ledger.family(self.key) is not None or self.base.run.state.get("member"):
            return None
        return self.base.run.job or "?"

    def member_then(self) -> dict | None:
        """Its place in the selection it was tested in before (None: none recorded)."""
        return None if self.base is None else self.base.run.state.get("member")

    def record_family(self, keys, procedure: str, ordered: bool) -> None:
        self.ledger.record_family(keys, Family.of(procedure, keys, ordered, self.holder))

    def write_ahead(self, t: int, state: dict) -> None:
        """The test as it stands (``state``: :func:`test_state`)."""
        if not self.closed:
            self.ledger.write_ahead(self.key, self.holder, t, state)

    def finish(self, t: int, outcome: str, state: dict | None) -> None:
        """The run's end: its test and outcome recorded (``state`` None: it added nothing, its hold ends)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.ledger.finish(self.key, self.holder, self.holder, self.base.run.seq if self.base else 0, t,
                               outcome, state)
        finally:
            self.ledger.close()
            _LOOPS.pop(self.holder, None)


def _continued(run: ClaimRun, kind: str, *, where: str, delta: float, settings: dict) -> Continued:
    st = run.state or {}
    where = f"{where}: its claim was tested before ({run.t} samples, {run.runs} run(s), last by " \
            f"{(st.get('jobs') or ['?'])[-1]})"
    if st.get("kind") != kind:
        raise SetupError(f"{where} by another front end ({st.get('kind')!r}); continue it there, or test it for "
                         "this eval alone (store=None)")
    if settings.get("judged") or st.get("judged"):
        raise SetupError(f"{where}; a judge-assisted test cannot be continued yet: its result stands, or test it "
                         "for this eval alone (store=None)")
    if delta > st.get("delta", delta):
        raise SetupError(f"{where} at delta {st['delta']:g}; a rerun states it at that level or a stricter one, not "
                         f"at delta {delta:g}")
    differ = [f"{k}={st.get(k)!r} (now {v!r})" for k, v in settings.items() if st.get(k) != v]
    if differ:
        raise SetupError(f"{where} with {', '.join(differ)}; a rerun continues that test: set them as then, or test "
                         "it for this eval alone (store=None)")
    ids = [json.loads(i) for i in st.get("ids", [])]
    pending = [(json.loads(i), None if v is None else float(v)) for i, v in st.get("pending", [])]
    return Continued(run, ids, np.asarray(st.get("losses", np.zeros(0)), dtype=np.float64),
                     np.asarray(st.get("path", np.zeros(0)), dtype=np.float64), pending)


def test_state(*, test, futility, ids, losses, path, pending, settings: dict, jobs: list,
               runs: int, first_delta: float) -> dict:
    """What the ledger keeps of a task's test: the test and futility states, the consumed samples (ids as JSON, in
    order) and their losses, the e-value path, the samples started but not consumed, the settings and the chain."""
    out = {"kind": KIND, WRITTEN: True, "test": test.state_dict(), "ids": [json.dumps(i) for i in ids],
           "losses": np.asarray(losses, dtype=np.float64), "path": np.asarray(path, dtype=np.float64),
           "pending": [[json.dumps(i), v] for i, v in pending], "jobs": jobs, "runs": runs, **settings,
           "delta": first_delta}
    if futility is not None:
        out["futility"] = futility.state_dict()
    return out
