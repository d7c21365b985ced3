"""The host pool: every driver call to the candidate hosts, recovering hosts that die mid-call.

Each method sends one typed request (:mod:`certsel.workers.contracts`) to the hosts of the candidates it concerns, in
parallel through the :class:`~certsel.orchestrator.engine.runtime.Runtime` protocol, and returns typed replies by name.

A lost host (on the actor Ray restarted, or a fresh one) rebuilds its candidates from their newest policy snapshots plus
the later batches from the durable label log (``CandidateHost.rebuild``: no request, the same states), lost hosts in
parallel; then the interrupted call is sent again. Its labels were logged before use, so nothing is bought or counted
twice. A host lost more than :data:`MAX_HOST_LOSSES` times in a row (a crash loop) ends its candidates as "worker lost"
(not certified); the others go on.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from certsel.workers.contracts import (
    ClaimStates,
    Finalize,
    HostRequest,
    LabelRows,
    Labels,
    Load,
    Losses,
    ModelLosses,
    QueueReport,
    Rebuild,
    Restore,
    Snapshot,
    Step,
    Withdraw,
)

from certsel.orchestrator.results.records import HostsRebuilt, Resume, Status
from .runtime import HostLost
from .servers import AllAtOnce

log = logging.getLogger(__name__)

MAX_HOST_LOSSES = 6  # a host lost this often in a row, with no step done between, ends its candidates


def assign(names: list[str], n_hosts: int) -> dict:
    """Round-robin: neighbours in the FST order land on different hosts, so the frontier and its look-ahead advance in
    parallel."""
    return {nm: k % n_hosts for k, nm in enumerate(names)}


class HostPool:
    """Calls to the hosts of one job (see the module docstring)."""

    def __init__(self, runtime, home: dict, plan, rows, records, schedule=None):
        self.runtime, self.home, self.plan, self.rows = runtime, home, plan, rows
        # the job's own model servers (live.serve): which candidates run together, lost servers
        self.schedule = AllAtOnce() if schedule is None else schedule
        n_hosts = max(home.values(), default=-1) + 1
        self.per_host = [[s for s in plan.specs if home[s.name] == h] for h in range(n_hosts)]
        self.records = {r.name: r for r in records}
        self.losses: dict[int, int] = {}
        # hosts rebuilt during the run, and how their candidates' steps were restored
        self.recovered = HostsRebuilt()

    def by_host(self, names) -> dict:
        """``{host: [names on it]}``, in the order given."""
        out: dict = {}
        for nm in names:
            out.setdefault(self.home[nm], []).append(nm)
        return out

    def _ask(self, names, request) -> dict:
        """``request(names on a host)`` sent to the hosts of ``names``; the replies merged by name (a list of snapshots
        by their names)."""
        out = {}
        for part in self.call({h: request(nms) for h, nms in self.by_host(names).items()}).values():
            out.update({s.name: s for s in part} if isinstance(part, list) else part)
        return out

    def load(self) -> None:
        self.call({h: Load(specs, self.plan.arrays, self.rows) for h, specs in enumerate(self.per_host)})

    def _rebuild(self, h: int, batches: dict) -> Rebuild:
        return Rebuild(self.per_host[h], self.plan.arrays, self.rows, batches)

    def _batches(self, name: str) -> list[int]:
        """Labels the candidate consumed at each of its steps, from the driver's records."""
        return np.diff([0] + [row["step"] for row in self.records[name].rounds]).tolist()

    def _host_batches(self, h: int) -> dict:
        """The batches of host ``h``'s candidates that have run (label servers, pairwise, have no steps: their labels
        come back from the log on request)."""
        return {s.name: self._batches(s.name) for s in self.per_host[h]
                if self.records[s.name].rounds and s.policy is not None}

    def _check_restored(self, snaps: list[Snapshot], batches: dict, counts: Resume | HostsRebuilt) -> None:
        for snap in snaps:
            if snap.t != self.records[snap.name].t:
                raise RuntimeError(f"candidate {snap.name}: rebuilt at {snap.t} labels, "
                                   f"expected {self.records[snap.name].t}")
            counts.steps_from_snapshots += snap.restored_steps
            counts.steps_replayed += len(batches[snap.name]) - snap.restored_steps

    def restore_all(self, from_round: int) -> Resume:
        """Every candidate that has run, rebuilt on its host (a driver resumed at round ``from_round``); how many of
        their steps came from policy snapshots and how many were replayed from the log."""
        by_host: dict = {}
        for name, r in self.records.items():
            if r.rounds:
                by_host.setdefault(self.home[name], {})[name] = self._batches(name)
        resume = Resume(from_round)
        for h, snaps in self.call({h: Restore(b) for h, b in by_host.items()}).items():
            self._check_restored(snaps, by_host[h], resume)
        return resume

    def step(self, sizes: dict[str, int]) -> dict[str, Snapshot]:
        """Advance each candidate of ``sizes`` by its number of human labels; their snapshots by name. A label source
        that failed because one of the job's own model servers died: the server starts again on the next request, the
        failed candidates are rebuilt (nothing bought or counted twice) and their steps sent again."""
        snaps = self._ask(list(sizes), lambda nms: Step(nms, [sizes[n] for n in nms]))
        failed = [n for n in sizes if n in snaps and snaps[n].error]
        if failed and self._servers_lost():
            self._rebuild_names(failed)
            snaps.update(self.step({n: sizes[n] for n in failed}))
        return snaps

    def _servers_lost(self) -> bool:
        lost = self.schedule.lost()
        if lost:
            log.warning("model servers lost (their process, actor or node is gone), started again on their "
                        "next request where they fit: %s", ", ".join(lost))
        return bool(lost)

    def _rebuild_names(self, names) -> None:
        """Rebuild the hosts of these candidates (policy snapshot + label log, no request)."""
        batches = {h: self._host_batches(h) for h in {self.home[n] for n in names}}
        got = self.call({h: self._rebuild(h, b) for h, b in batches.items()})
        for h, snaps in got.items():
            self._check_restored(snaps, batches[h], self.recovered)

    def finalize(self, names, levels: dict | None = None, stop: dict | None = None) -> dict[str, Snapshot]:
        """Final snapshots (intervals; with ``levels[name]``, a list of levels, testing candidates' one-sided bounds at
        each of them; with ``stop[name]`` = gamma, its :meth:`~certsel.workers.candidate.TestingCandidate.stop_minimum`)."""
        return self._ask(names, lambda nms: Finalize(nms, None if levels is None else [levels[n] for n in nms],
                                                     None if stop is None else {n: stop[n] for n in nms if n in stop}))

    def losses_of(self, requests: dict, role: str = "human", open_names=()) -> dict[str, ModelLosses]:
        """``{name: items}`` -> each model's losses or error (pairwise label servers), asked in waves whose servers fit
        on the cluster together (``open_names``: the models still needed later, whose servers may stay up). A model
        whose server died is asked again once the server is found lost (it starts again on that request)."""
        out = {}
        for wave in self.schedule.waves(list(requests), list(open_names)):
            out.update(self._losses({n: requests[n] for n in wave}, role))
        failed = [n for n in requests if n in out and out[n].error is not None]
        if failed and self._servers_lost():
            out.update(self._losses({n: requests[n] for n in failed}, role))
        return out

    def _losses(self, requests: dict, role: str) -> dict[str, ModelLosses]:
        return self._ask(list(requests), lambda nms: Losses({n: requests[n] for n in nms}, role))

    def withdraw(self, names) -> dict[str, QueueReport]:
        """Settled candidates' annotation queues take back what nobody started; what each queue did, by name (candidates
        without a queue are left out)."""
        return self._ask(names, Withdraw)

    def claim_states(self, names) -> dict[str, dict]:
        """The test state of each candidate with a claim (:class:`~certsel.workers.contracts.ClaimStates`)."""
        return self._ask(names, ClaimStates)

    def labels(self, names) -> dict[str, LabelRows]:
        """Every label each candidate bought (see :class:`~certsel.workers.contracts.Labels`)."""
        return self._ask(names, Labels)

    def call(self, requests: dict[int, HostRequest]) -> dict:
        """``requests[host]`` on every host in parallel, recovering lost hosts and sending their request again; ``{host:
        reply}`` (hosts given up on are left out)."""
        out = {}
        pending = list(requests)
        while pending:
            got = self.runtime.gather_tolerant([(h, requests[h]) for h in pending])
            lost = {}
            for h, res in zip(pending, got, strict=True):
                if isinstance(res, HostLost):
                    lost[h] = res.why
                else:
                    self.losses[h] = 0  # progress: only losses in a row count
                    out[h] = res
            pending = self._recover(lost) if lost else []
        return out

    def _give_up(self, h: int, why: str) -> None:
        for spec in self.per_host[h]:
            r = self.records[spec.name]
            if not r.finished:
                r.end(Status.WORKER_LOST, f"worker lost {self.losses[h]} times in a row ({why})")

    def _recover(self, lost: dict, patience: float = 120.0) -> list[int]:
        """Rebuild the lost hosts (``{host: why}``) at once, each in one ``CandidateHost.rebuild`` call, on the actor
        Ray restarted or a fresh one; returns the hosts to send the interrupted call again. A host still restarting is
        waited for (a fresh actor after ``patience`` s); one lost again while rebuilding counts as another loss in a
        row."""
        t0 = time.monotonic()
        deadline = {h: t0 + patience for h in lost}
        todo, new_loss, done = dict(lost), dict(lost), []
        while todo:
            for h, why in new_loss.items():
                self.losses[h] = self.losses.get(h, 0) + 1
                log.warning("candidate host %d lost (%s; %d in a row): rebuilding its %d candidates", h, why,
                            self.losses[h], len(self.per_host[h]))
                if self.losses[h] > MAX_HOST_LOSSES:  # a crash loop (e.g. a candidate that always OOMs)
                    self._give_up(h, why)
                    del todo[h]
            new_loss = {}
            batches = {h: self._host_batches(h) for h in todo}
            hosts = list(todo)
            got = self.runtime.gather_tolerant([(h, self._rebuild(h, batches[h])) for h in hosts])
            waiting = False
            for h, snaps in zip(hosts, got, strict=True):
                if isinstance(snaps, HostLost) and snaps.restarting:  # still restarting: try again shortly
                    if time.monotonic() > deadline[h]:
                        self.runtime.replace_host(h)
                        deadline[h] = time.monotonic() + patience
                    waiting = True
                    continue
                if isinstance(snaps, HostLost):  # lost again while rebuilding: on a fresh actor
                    self.runtime.replace_host(h)
                    new_loss[h] = todo[h] = snaps.why
                    continue
                self._check_restored(snaps, batches[h], self.recovered)
                self.recovered.hosts += 1
                log.warning("candidate host %d rebuilt in %.1f s", h, time.monotonic() - t0)
                done.append(h)
                del todo[h]
            if waiting:
                time.sleep(0.2)
        return done
