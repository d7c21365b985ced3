"""The Ray actor that hosts candidates: their policy state and label-source clients.

A ``CandidateWorker`` actor (:func:`worker_class`) holds one candidate (the default when the cluster has a CPU per
candidate) or a shard of several, each with its own independent state, so packing never changes a result (tested). The
driver owns the control flow: it calls :meth:`~CandidateHost.step` and gets snapshots back. Typed specs
(:class:`~certsel.workers.contracts.CandidateSpec`) let the driver build the same objects in-process for the reference
computation and replay benchmarks.
"""

from __future__ import annotations

import os
import pathlib


from certsel.errors import CertselError, first_line

from .candidate import ChosenTestingCandidate, EstimationCandidate, LabelServer, TestingCandidate, policy_candidate
from .stacked_steps import guarded_step, intervals_together, step_together, upper_bounds_together
from .contracts import (CandidateSpec, HostRequest, JobArrays, Journaled, LabelRows, ModelLosses, QueuedSource,
                        QueueReport, Snapshot, SourceError)
from .label_store import LabelStore, StoredSource
from .labellog import LabelLog, LoggedSource, log_path
from .paired import PairedSource


_TESTING = (TestingCandidate, ChosenTestingCandidate)


def build_candidate(spec: CandidateSpec, arrays: JobArrays, rows=(None, None)):
    """A candidate object from its spec, the job-wide :class:`JobArrays` and, for replay sources, its ``rows`` (human,
    judge) of the loss table."""
    source = spec.source.build(arrays, rows)
    if spec.store is not None and spec.identity is not None:  # labels an earlier job bought are reused
        store = LabelStore(spec.store)
        # a paired source keeps each side under its own identity (the baseline's serves later comparisons)
        source = source.in_store(store, spec.identity) if isinstance(source, PairedSource) else \
            StoredSource(source, store, spec.identity)
    if spec.job_dir is not None:  # a durable label log: labels survive crashes, never bought twice
        log = LabelLog(log_path(spec.job_dir, spec.name), spec.name)
        if isinstance(source, Journaled):  # its own records (an annotation queue's) beside the labels
            source.attach(log)
        source = LoggedSource(source, log)
    if spec.policy is None:
        return LabelServer(spec.name, source)
    if spec.claim is not None and spec.claim.continued:  # the claim's recorded test goes on (workers/claims.py)
        st, bet = spec.claim.base.state["candidate"], spec.settings.betting
        return TestingCandidate.continued(
            spec.name, source, st, human_items=spec.claim.human_items, judge_items=spec.claim.judge_items,
            ci_delta=spec.settings.ci_delta, intervals=spec.settings.intervals,
            strategy=bet if bet is not None and bet.spec() == dict(st["test"]["config"]["betting"]) else None)
    return policy_candidate(spec.name, source, spec.policy, spec.settings, arrays)


class NotLoaded(CertselError):
    """A call for candidates this host does not hold: Ray restarted it (a new process with an empty state) before the
    driver rebuilt them. The driver treats it as a lost host."""


class CandidateHost:
    """Plain-Python host of several candidates (the body of the Ray actor :data:`CandidateWorker`); an actor can serve
    many jobs in a row (replications), keeping Ray's process start-up out of the loop."""

    def __init__(self):
        self.candidates: dict = {}
        self.history: dict = {}  # per candidate: labels consumed at each step (its batch history)
        self.snapshot_every: dict = {}
        self._job: tuple = ({}, JobArrays(), {})  # what load() was given: specs by name, arrays, rows
        self._pristine: set = set()  # candidates as load() built them (not stepped or restored since)

    def handle(self, request: HostRequest):
        """Every driver call arrives here: the request runs the method it names (:mod:`~certsel.workers.contracts`)."""
        return request.run(self)

    def load(self, specs: list[CandidateSpec], arrays: JobArrays, rows) -> int:
        """Build the candidates of a job; ``rows[name]`` is ``(human, judge)`` losses (or a Ray reference to that dict,
        stored once for all hosts). With a durable log a spec's ``snapshot_every`` snapshots it every that many steps.
        """
        if not isinstance(rows, dict):  # inside a request, Ray does not resolve the reference itself
            import ray

            rows = ray.get(rows)
        self.candidates = {}
        self.history = {s.name: [] for s in specs}
        self.snapshot_every = {s.name: s.snapshot_every for s in specs}
        job_dirs = {s.job_dir for s in specs} - {None}
        for d in job_dirs:  # who hosts this job's candidates (for operators and fault-injection tests)
            (pathlib.Path(d) / "hosts").mkdir(parents=True, exist_ok=True)
            (pathlib.Path(d) / "hosts" / str(os.getpid())).write_text(",".join(s.name for s in specs)[:10_000])
        self._job = ({s.name: s for s in specs}, arrays, rows)
        for s in specs:
            self.candidates[s.name] = self._build(s.name)
        self._pristine = set(self.candidates)
        return len(self.candidates)

    def rebuild(self, specs: list[CandidateSpec], arrays: JobArrays, rows, batches: dict) -> list[Snapshot]:
        """:meth:`load` then :meth:`restore` in one call (a host the driver lost)."""
        self.load(specs, arrays, rows)
        return self.restore(batches) if batches else []

    def _build(self, name: str):
        specs, arrays, rows = self._job
        return build_candidate(specs[name], arrays, rows.get(name, (None, None)))

    def _have(self, names) -> None:
        missing = [n for n in names if n not in self.candidates]
        if missing:
            raise NotLoaded(f"this host does not hold {missing[0]!r} (restarted?)")

    def step(self, names: list[str], batch) -> list[Snapshot]:
        """Advance ``names`` by ``batch`` human labels each (one number, or one per name); testing candidates at the
        same label count and round size are advanced together (:func:`step_together`)."""
        self._have(names)
        sizes = dict(zip(names, batch, strict=True)) if isinstance(batch, (list, tuple)) else dict.fromkeys(names, batch)
        before = {n: self.candidates[n].t for n in names}
        self._pristine.difference_update(names)
        groups: dict = {}
        for n in names:
            c = self.candidates[n]
            key = ("t", c.t, sizes[n]) if isinstance(c, TestingCandidate) else ("one", n, sizes[n])
            groups.setdefault(key, []).append(n)
        out = {}
        for key, members in groups.items():
            cands = [self.candidates[n] for n in members]
            b = key[2]
            snaps = step_together(cands, b) if key[0] == "t" else [guarded_step(cands[0], b)]
            out.update(zip(members, snaps, strict=True))
        for n in names:
            used = self.candidates[n].t - before[n]
            if used or not out[n].waiting:  # a step that only waited for people is no step
                self.history[n].append(used)
                self._maybe_snapshot(n)
        return [out[n] for n in names]

    def _maybe_snapshot(self, name: str) -> None:
        c, every = self.candidates[name], self.snapshot_every.get(name)
        if every and isinstance(c.source, LoggedSource) and not isinstance(c, LabelServer) \
                and not c.holds_unlabelled and len(self.history[name]) % every == 0:
            # with the log rows it had used: its label counters resume from there
            c.source.log.write_snapshot(self.history[name], {"candidate": c.state_dict(), "log_used": c.source.used})

    def finalize(self, names: list[str], levels: list | None = None, stop: dict | None = None) -> list[Snapshot]:
        """Final snapshots with the two-sided interval and, for testing candidates, the one-sided bounds that invert
        their test at ``levels[i]`` (the decision's level and the level of the simultaneous statement); for those named
        in ``stop`` ({name: gamma}), the fewest labels any procedure needs to end them uncertified."""
        self._have(names)
        # what can be, stacked across candidates first (the same numbers as one call each)
        testing = [(k, c) for k, n in enumerate(names) if isinstance(c := self.candidates[n], TestingCandidate)]
        intervals_together([c for _, c in testing])
        if levels is not None and testing:
            for j in range(max(len(levels[k]) for k, _ in testing)):
                at = [(c, levels[k][j]) for k, c in testing if j < len(levels[k])]
                upper_bounds_together([c for c, _ in at], [lv for _, lv in at])
        out = []
        for k, n in enumerate(names):
            c = self.candidates[n]
            if isinstance(c, (*_TESTING, EstimationCandidate)):
                c.interval()
            snap = c.snapshot()
            if isinstance(c, _TESTING):
                snap.judge = c.judge_report()
                if levels is not None:
                    snap.level_bounds = {float(lv): c.upper_bound(float(lv)) for lv in levels[k]}
                    snap.label_minimum = c.label_minimum(float(levels[k][0]))
                    if stop and n in stop:
                        snap.stop_minimum = c.stop_minimum(float(levels[k][0]), float(stop[n]))
            out.append(snap)
        return out

    def claim_states(self, names: list[str]) -> dict[str, dict]:
        """What the store's ledger keeps of each candidate whose spec has a claim (workers/claims.py)."""
        self._have(names)
        specs = self._job[0]
        return {n: self.candidates[n].claim_state() for n in names
                if specs[n].claim is not None and isinstance(self.candidates[n], TestingCandidate)}

    def losses(self, requests: dict, role: str = "human") -> dict[str, ModelLosses]:
        """Losses of the requested items per model (``role`` "judge": the judge's), or the error of a model whose label
        source failed for good (the driver ends that model's pairs only)."""
        self._have(list(requests))
        out = {}
        for n, items in requests.items():
            try:
                out[n] = ModelLosses(losses=self.candidates[n].losses(items, role))
            except SourceError as err:
                out[n] = ModelLosses(error=first_line(err, limit=300))
        return out

    def queued(self, name: str) -> QueuedSource | None:
        """The candidate's label source when it is an annotation queue (under its log)."""
        source = self.candidates[name].source
        source = source.source if isinstance(source, LoggedSource) else source
        return source if isinstance(source, QueuedSource) else None

    def withdraw(self, names: list[str]) -> dict[str, QueueReport]:
        """Settled candidates: their queues take back the tasks nobody started and say what they did (by name; queues
        only)."""
        self._have(names)
        return {n: q.withdraw() for n in names if (q := self.queued(n)) is not None}

    def labels(self, names: list[str]) -> dict:
        """The label log of each candidate: item indices, roles and losses, in purchase order."""
        self._have(names)
        out = {}
        for n in names:
            source = self.candidates[n].source  # the durable log holds the labels bought before a restart too
            out[n] = source.log_rows if isinstance(source, LoggedSource) else LabelRows.from_batches(source.log)
        return out

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this host runs on (operators and multi-node tests)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def restore(self, batches: dict) -> list[Snapshot]:
        """Bring rebuilt candidates back to where they were: ``batches[name]`` lists the labels the candidate consumed
        at each step.

        It starts from its newest snapshot whose history is a prefix of that list (if any) and replays the later steps
        with labels from the durable log (no request) in the same batches, so adaptive policies (Cer-Eval) choose the
        same items and every state is the one before the restart. Candidates with the same remaining steps replay as one
        stacked update per step. ``restored_steps`` of each snapshot counts the steps from a policy snapshot (0:
        replayed from the start).
        """
        self._have(list(batches))
        groups: dict = {}
        start = {}
        for n, sizes in batches.items():
            sizes = [int(b) for b in sizes]
            c = self.candidates[n]
            if n not in self._pristine:  # from a new object, so that a restore sent twice is still exact
                if isinstance(c.source, LoggedSource):
                    c.source.log.close()
                c = self.candidates[n] = self._build(n)
            self._pristine.discard(n)
            start[n] = 0
            if isinstance(c.source, LoggedSource) and not isinstance(c, LabelServer):
                found = c.source.log.latest_snapshot(sizes)
                if found is not None:
                    start[n] = found[0]
                    c.load_state_dict(found[1]["candidate"])
                    c.source.used = int(found[1]["log_used"])
            self.history[n] = sizes
            groups.setdefault((c.t, tuple(sizes[start[n]:])), []).append(n)
        out = {}
        for (_, sizes), names in groups.items():
            cands = [self.candidates[n] for n in names]
            testing = [c for c in cands if isinstance(c, TestingCandidate)]
            others = [c for c in cands if not isinstance(c, TestingCandidate)]
            for b in sizes:
                if testing:
                    step_together(testing, b)
                for c in others:
                    c.step(b)
            for c in cands:
                out[c.name] = c.snapshot()
        for n in batches:
            out[n].restored_steps = start[n]
        return [out[n] for n in batches]


def worker_class():
    """``CandidateWorker``: :class:`CandidateHost` as a Ray actor class (zero CPUs reserved: it waits on numpy or on
    model servers; spread over the cluster's nodes)."""
    import ray

    # Ray restarts a dead host a few times; the driver then rebuilds its candidates from the label log (HostPool)
    return ray.remote(num_cpus=0, scheduling_strategy="SPREAD", max_restarts=3)(CandidateHost)
