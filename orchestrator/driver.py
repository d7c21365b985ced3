"""The selection driver: Ray actors per candidate, rounds of labels, procedure decisions.

:func:`run_job` is the body of ``certsel run``. The driver owns the control flow:

1. plan the job (:class:`JobPlan`): one spec per candidate, the shared seeded item order
   (every candidate is labelled on the same items, as in the paper's protocol);
2. start or join Ray (:class:`RayRuntime`) and load the candidates into
   ``CandidateWorker`` actors (one per candidate up to the cluster's CPUs, packed beyond);
3. rounds: ask the actors that host the scheduled candidates to advance them by
   ``budget.batch`` human labels, fold the snapshots into records, apply the procedure
   (:class:`certsel.orchestrator.scheduling.Scheduler`), stop settled candidates;
4. final decision: the procedure applied to the final evidence, the selection by
   objective, labels spent against the full-budget cost.

Pairwise ranking (:func:`_run_pairwise`) keeps the pair comparisons (Seq / Cer-Eval on
paired differences, level delta/P) in the driver and the models' label sources in actors.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import numpy as np

from certsel.config import RunConfig
from certsel.errors import first_line
from certsel.policies import certified_set, select
from certsel.policies.comparison import sign_policy_delta
from certsel.workers.actor import CandidateHost, NotLoaded, worker_class
from certsel.workers.candidate import make_estimation_policy, restore_policy
from certsel.workers.replay import item_order

from .jobdata import JobData
from .scheduling import CandidateRecord, Scheduler
from .state import read_checkpoint, write_checkpoint

TESTING = ("r-eval", "r-autoeval", "r-autoeval+")
log = logging.getLogger(__name__)


class RuntimeProblem(RuntimeError):
    """The job could not start (Ray unreachable, ...): one-line message."""


@dataclass
class HostLost:
    """A candidate host (actor) that died during a call."""

    host: int
    why: str


MAX_HOST_LOSSES = 6  # a host lost this often in a row, with no step done between, ends its candidates


# -- planning ---------------------------------------------------------------------------


@dataclass
class JobPlan:
    """Specs and shared arrays of a job, independent of where candidates run."""

    cfg: RunConfig
    data: JobData
    specs: list = field(init=False)
    shared: dict = field(init=False)
    rows: dict = field(init=False)

    def __post_init__(self):
        cfg, table = self.cfg, self.data.table
        names = self.data.names
        K, I = len(names), self.data.n_items
        self.testing = cfg.policy.kind in TESTING
        self.uses_judge = cfg.policy.kind in ("r-autoeval", "r-autoeval+")
        # Cer-Eval's judge strata: the judge's loss on every item, known before any human label
        self.judge_strata = cfg.policy.kind == "cer-eval" and cfg.policy.partition == "judge"
        n, r = cfg.budget.n, (cfg.budget.r if self.uses_judge else 0)
        self.n, self.r = n, r
        if table is not None:
            with_judge = self.uses_judge or self.judge_strata
            self.rows = {nm: (table.human[k], table.judge[k] if with_judge else None)
                         for k, nm in enumerate(names)}
        else:  # live: each actor builds its candidates' clients from the configuration
            self.rows = {nm: (None, None) for nm in names}
        self.shared = {}
        if cfg.procedure == "pairwise":
            self.specs = [{"name": nm, "kind": "labels"} for nm in names]
            self._add_live()
            return
        if self.testing:
            order = item_order(I, cfg.seed)
            self.shared = {"human_items": order[:n], "judge_items": order[n : n + r * n]}
            ci_delta = cfg.delta if cfg.procedure == "fst" else cfg.delta / K
            opts = {"scheme": cfg.policy.kind, "alpha": cfg.alpha, "delta": cfg.delta, "betting": cfg.policy.strategy,
                    "r": r, "ci_delta": ci_delta, "intervals": cfg.tracking.intervals}
            self.specs = [{"name": nm, "kind": "testing", "options": opts} for nm in names]
        else:
            level = cfg.delta if cfg.procedure == "fst" else cfg.delta / K
            self.shared = {"features": self.data.features}
            self.specs = [
                {"name": nm, "kind": "estimation",
                 "options": {"kind": cfg.policy.kind, "alpha": cfg.alpha, "delta": level, "radius": cfg.policy.radius,
                             "seed": [cfg.seed, k], "budget": n, "partition": cfg.policy.partition}}
                for k, nm in enumerate(names)
            ]
        self._add_live()

    def _add_live(self) -> None:
        """Live candidates: the source configuration travels with each spec; items are shared."""
        live = self.cfg.live
        if live is None:
            return
        self.shared["items"] = self.data.items
        judge = None if live.judge is None or not (self.uses_judge or self.judge_strata) else live.judge.model_dump()
        for spec, cand in zip(self.specs, self.data.live, strict=True):
            spec["live"] = {"candidate": cand.model_dump(), "judge": judge, "loss": live.loss,
                            "cache_dir": str(live.cache_dir)}

    def full_budget(self) -> dict:
        """Labels and requests if every candidate ran to its whole budget."""
        K, I = len(self.data.names), self.data.n_items
        if self.cfg.procedure == "pairwise" or not self.testing:
            per = min(self.n, I)
            judge = K * I if self.judge_strata else 0  # the strata: every item once per model
            return {"human": K * per, "judge": judge, "requests": K * per + judge}
        items = self.n * (1 + self.r)
        return {"human": K * self.n, "judge": K * items if self.uses_judge else 0,
                "requests": K * items * (2 if self.uses_judge else 1)}


# -- where candidates run -----------------------------------------------------------------


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast with one line when an explicit Ray address does not answer."""
    if address in ("auto", "local"):
        return
    url = urlparse(address if "://" in address else f"tcp://{address}")
    host, port = url.hostname, url.port
    if host is None or port is None:
        raise RuntimeProblem(f"ray.address: expected HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise RuntimeProblem(f"Ray cluster at {address} is unreachable ({exc.strerror or exc})") from None


class LocalRuntime:
    """Candidates hosted in this process (benchmarks' in-process baseline; no Ray)."""

    def __init__(self, n_hosts: int = 1):
        self.hosts = [CandidateHost() for _ in range(n_hosts)]

    def call(self, host: int, method: str, *args):
        return getattr(self.hosts[host], method)(*args)

    def gather(self, calls):
        return [self.call(h, m, *a) for h, m, a in calls]

    def put(self, obj):
        return obj

    def close(self):
        pass


class RayRuntime:
    """Ray: the local machine by default, or the cluster in ``address`` / ``RAY_ADDRESS``
    (under ``ray job submit`` the job's driver joins its cluster this way). A runtime made
    while Ray is already initialised (a test fixture, a notebook) uses that session and
    leaves it running."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_actors: int | None = None):
        import ray

        self.ray = ray
        self.owns = False
        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS")
            if target:
                _check_reachable(target)
            try:
                if target:
                    ray.init(address=target, log_to_driver=False, logging_level=logging.ERROR)
                else:
                    # "local": always a new instance, never an unrelated one already on this machine
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                             logging_level=logging.ERROR)
            except Exception as exc:  # ConnectionError, RuntimeError, ... from ray.init
                raise RuntimeProblem(f"could not start or join Ray ({first_line(exc)})") from None
            self.owns = True
        self.max_actors = max_actors
        self.hosts: list = []
        self._cls = worker_class()

    def ensure_hosts(self, n: int) -> None:
        while len(self.hosts) < n:
            self.hosts.append(self._cls.remote())

    def default_hosts(self, n_candidates: int) -> int:
        if self.max_actors is not None:
            return min(self.max_actors, n_candidates)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return max(1, min(n_candidates, cpus))

    def call(self, host: int, method: str, *args):
        return self.ray.get(self.submit(host, method, *args))

    def submit(self, host: int, method: str, *args):
        """The object ref of ``method(*args)`` on host ``host``."""
        return getattr(self.hosts[host], method).remote(*args)

    def gather(self, calls):
        return self.ray.get([getattr(self.hosts[h], m).remote(*a) for h, m, a in calls])

    def gather_tolerant(self, calls) -> list:
        """Like :meth:`gather`, but a host that died (kill -9, OOM, node loss: Ray reports
        it as soon as it notices, so nothing waits forever) gives a :class:`HostLost` in
        its place instead of failing the whole round."""
        refs = [getattr(self.hosts[h], m).remote(*a) for h, m, a in calls]
        out = []
        for (h, _, _), ref in zip(calls, refs, strict=True):
            try:
                out.append(self.ray.get(ref))
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError) as err:
                out.append(HostLost(h, first_line(err, "actor died")))
            except self.ray.exceptions.RayTaskError as err:
                if not isinstance(getattr(err, "cause", None), NotLoaded):
                    raise
                # the call reached an actor Ray had restarted, before its candidates were rebuilt
                out.append(HostLost(h, "restarted actor without its candidates"))
        return out

    def replace_host(self, host: int) -> None:
        """A fresh actor in place of a lost one (its candidates are rebuilt by the driver)."""
        import contextlib

        with contextlib.suppress(Exception):
            self.ray.kill(self.hosts[host])
        self.hosts[host] = self._cls.remote()

    def put(self, obj):
        return self.ray.put(obj)

    def close(self):
        for h in self.hosts:
            self.ray.kill(h)
        self.hosts = []
        if self.owns:
            self.ray.shutdown()


# -- the job ------------------------------------------------------------------------------


@dataclass
class JobResult:
    """Everything the certificate, the report and the tracker need."""

    cfg: RunConfig
    data: JobData
    records: list
    certified: list  # names in the procedure's certified set
    selected: str | None
    level: str  # the procedure and its per-candidate level, in words
    spent: dict
    full: dict
    rounds: int
    seconds: float
    ranking: dict | None = None
    labels: dict | None = None  # per candidate: item, role, loss of every label bought, in order
    job_id: str | None = None  # the durable job (certsel run --resume JOB_ID)
    # a run that started from a driver checkpoint: {"from_round", "steps_from_snapshots", "steps_replayed"}
    resume: dict | None = None
    # hosts lost and rebuilt during the run: {"hosts", "steps_from_snapshots", "steps_replayed"}
    recovered: dict | None = None

    @property
    def selected_record(self) -> CandidateRecord | None:
        return next((r for r in self.records if r.name == self.selected), None)


def _assign(names: list[str], n_hosts: int) -> dict:
    """Round-robin: neighbours in the FST order land on different hosts, so the frontier
    and its look-ahead advance in parallel."""
    return {nm: k % n_hosts for k, nm in enumerate(names)}


def _totals(records) -> dict:
    return {"human": sum(r.n_human for r in records), "judge": sum(r.n_judge for r in records),
            "requests": sum(r.requests for r in records)}


def _objective_key(cfg: RunConfig, data) -> np.ndarray | None:
    obj = data.objective
    if obj is None:
        return None
    return -obj if cfg.objective is not None and cfg.objective.goal == "maximize" else obj


def _collect_labels(recovery, home: dict, names: list[str]) -> dict:
    calls = {}
    for nm in names:
        calls.setdefault(home[nm], []).append(nm)
    out = {}
    for part in recovery.call("labels", {h: (nms,) for h, nms in calls.items()}).values():
        out.update(part)
    return out


def run_job(cfg: RunConfig, data: JobData, runtime, *, progress=None, n_hosts: int | None = None,
            tracker=None, collect_labels: bool = True, job_dir=None) -> JobResult:
    """Run one selection job on ``runtime`` (:class:`RayRuntime` or :class:`LocalRuntime`).

    ``progress(records, round)`` is called after every round; ``tracker`` (if given) gets
    ``on_round(records)``. With ``collect_labels`` the result carries every label bought
    (the ``labels.parquet`` artifact: the certificate can be recomputed from it). With
    ``job_dir`` every label goes to the job's durable log before a policy uses it
    (:mod:`certsel.workers.labellog`), hosts snapshot their policies and the driver
    checkpoints its state every ``cfg.state.snapshot_every`` rounds: a host that dies is
    replaced and its candidates rebuilt from snapshot + log, and a rerun of the same job
    starts from the last checkpoint and buys nothing twice.
    """
    t0 = time.perf_counter()
    plan = JobPlan(cfg, data)
    every = cfg.state.snapshot_every
    if job_dir is not None:
        for spec in plan.specs:
            spec["job_dir"] = str(job_dir)
            spec["snapshot_every"] = every
    names = data.names
    objective, true_risk = data.objective, data.true_risk
    if n_hosts is None:
        n_hosts = runtime.default_hosts(len(names)) if hasattr(runtime, "default_hosts") else len(runtime.hosts)
    if hasattr(runtime, "ensure_hosts"):
        runtime.ensure_hosts(n_hosts)
    home = _assign(names, n_hosts)
    per_host = [[s for s in plan.specs if home[s["name"]] == h] for h in range(n_hosts)]
    rows = runtime.put(plan.rows)
    records = [
        CandidateRecord(nm, k, None if objective is None else float(objective[k]),
                        None if true_risk is None else float(true_risk[k]))
        for k, nm in enumerate(names)
    ]
    recovery = _Recovery(runtime, home, per_host, plan, rows, records)
    recovery.call("load", {h: (per_host[h], plan.shared, rows) for h in range(n_hosts)})
    if cfg.procedure == "pairwise":
        res = _run_pairwise(cfg, data, plan, runtime, records, home, progress, tracker, t0, recovery, job_dir)
        res.recovered = recovery.recovered
        if collect_labels:
            res.labels = _collect_labels(recovery, home, names)
        return res

    key = _objective_key(cfg, data)
    sched = Scheduler(records, procedure=cfg.procedure, delta=cfg.delta, testing=plan.testing,
                      mode=cfg.scheduling.mode, lookahead=cfg.scheduling.lookahead,
                      prune_keys=key if cfg.scheduling.prune else None)
    cost_per_label = (1 + plan.r) * (2 if plan.uses_judge else 1) if plan.testing else 1
    rounds, resume = 0, None
    ckpt = None if job_dir is None else read_checkpoint(job_dir, "select", names)
    if ckpt is not None:  # a resumed job: the driver's records as they were, the candidates from snapshot + log
        _load_records(records, ckpt["records"])
        rounds = int(ckpt["round"])
        resume = {"from_round": rounds, **recovery.restore_all()}
        if tracker is not None:
            tracker.on_round(records)
    while True:
        active = sched.active()
        if not active:
            break
        batch = cfg.budget.batch
        if cfg.budget.max_requests is not None:
            left = cfg.budget.max_requests - _totals(records)["requests"]
            batch = min(batch, left // (cost_per_label * len(active)))
            if batch < 1:
                sched.stop_all("request budget spent")
                break
        calls = {}
        for r in active:
            calls.setdefault(home[r.name], []).append(r.name)
        by_name = recovery.step(calls, batch)
        for r in active:
            if r.name not in by_name:
                continue  # its host was lost too often: already marked
            r.apply(by_name[r.name])
            r.rounds.append(_round_row(r))
        rounds += 1
        sched.settle()
        if tracker is not None:
            tracker.on_round(active)
        if job_dir is not None and rounds % every == 0:
            write_checkpoint(job_dir, {"kind": "select", "names": list(names), "round": rounds,
                                       "records": _dump_records(records)})
        if progress is not None:
            progress(records, rounds)

    if plan.testing and cfg.tracking.intervals != "none":
        ran = [r for r in records if r.t > 0]
        calls = {}
        for r in ran:
            calls.setdefault(home[r.name], []).append(r.name)
        order = list(calls)
        finals = recovery.call("finalize", {h: (calls[h],) for h in order})
        by_name = {s["name"]: s for group in finals.values() for s in group}
        for r in ran:
            r.ci = tuple(by_name[r.name]["ci"])

    certified_mask = _final_certified(cfg, plan, records)
    for r, ok in zip(records, certified_mask, strict=True):
        if r.status == "certified" and not ok:
            r.reason = "passed its own test but is not in the procedure's certified set"
    if key is not None:
        sel = int(select(certified_mask, key))
    else:  # FST without an objective: the end of the certified prefix
        sel = int(np.flatnonzero(certified_mask)[-1]) if certified_mask.any() else -1
    K = len(records)
    level = {"fst": f"fixed-sequence, each at delta = {cfg.delta:g}",
             "bonferroni": f"Bonferroni, each at delta/K = {cfg.delta / K:.4g}",
             "holm": f"Holm step-down from delta/K = {cfg.delta / K:.4g} to delta = {cfg.delta:g}"}[cfg.procedure]
    return JobResult(cfg, data, records, [records[k].name for k in np.flatnonzero(certified_mask)],
                     names[sel] if sel >= 0 else None, level, _totals(records), plan.full_budget(), rounds,
                     time.perf_counter() - t0,
                     labels=_collect_labels(recovery, home, names) if collect_labels else None, resume=resume,
                     recovered=recovery.recovered)


def _dump_records(records) -> list[dict]:
    out = []
    for r in records:
        d = dataclasses.asdict(r)
        d["path"] = np.asarray(r.path, dtype=np.float64)
        out.append(d)
    return out


def _load_records(records, saved: list[dict]) -> None:
    if [d["name"] for d in saved] != [r.name for r in records]:
        raise RuntimeError("the driver checkpoint is of other candidates")
    for r, d in zip(records, saved, strict=True):
        for k, v in d.items():
            setattr(r, k, v)
        r.path = np.asarray(d["path"]).tolist()


class _Recovery:
    """Steps hosts and recovers from hosts that die mid-round.

    A lost host (on the actor Ray restarted, or a fresh one) rebuilds its candidates, each
    from its newest policy snapshot plus the batches after it from the durable label log
    (``CandidateHost.rebuild``: no request, the same states); hosts lost in the same call
    are rebuilt in parallel. Then the interrupted call is sent again. The labels that
    step had already bought were logged before use, so it finds them in the log: nothing is
    bought or counted twice. A host lost more than :data:`MAX_HOST_LOSSES` times in a row
    (no step completed between: a crash loop) ends its candidates as "worker lost" (not
    certified); the others go on.
    """

    def __init__(self, runtime, home, per_host, plan, rows, records):
        self.runtime, self.home, self.per_host, self.plan, self.rows = runtime, home, per_host, plan, rows
        self.records = {r.name: r for r in records}
        self.losses: dict[int, int] = {}
        # hosts rebuilt during the run, and how their candidates' steps were restored
        self.recovered = {"hosts": 0, "steps_from_snapshots": 0, "steps_replayed": 0}
        self.tolerant = hasattr(runtime, "gather_tolerant")

    def _batches(self, name: str) -> list[int]:
        """Labels the candidate consumed at each of its steps, from the driver's records."""
        return np.diff([0] + [row["step"] for row in self.records[name].rounds]).tolist()

    def _check_restored(self, snaps, batches: dict, counts: dict) -> None:
        for snap in snaps:
            if snap["t"] != self.records[snap["name"]].t:
                raise RuntimeError(f"candidate {snap['name']}: rebuilt at {snap['t']} labels, "
                                   f"expected {self.records[snap['name']].t}")
            counts["steps_from_snapshots"] += snap["restored_steps"]
            counts["steps_replayed"] += len(batches[snap["name"]]) - snap["restored_steps"]

    def restore_all(self) -> dict:
        """Every candidate that has run, rebuilt on its host (a resumed driver); how many
        of their steps came from policy snapshots and how many were replayed from the log."""
        by_host: dict = {}
        for name, r in self.records.items():
            if r.rounds:
                by_host.setdefault(self.home[name], {})[name] = self._batches(name)
        counts = {"steps_from_snapshots": 0, "steps_replayed": 0}
        for h, snaps in self.call("restore", {h: (b,) for h, b in by_host.items()}).items():
            self._check_restored(snaps, by_host[h], counts)
        return counts

    def step(self, calls: dict, batch: int) -> dict:
        """Advance ``calls[host]`` (candidate names) by ``batch``; snapshots by name."""
        got = self.call("step", {h: (names, batch) for h, names in calls.items()})
        return {s["name"]: s for group in got.values() for s in group}

    def call(self, method: str, args: dict) -> dict:
        """``method(*args[host])`` on every host in parallel, recovering lost hosts and
        sending their call again; ``{host: result}`` (hosts given up on are left out)."""
        if not self.tolerant:
            order = list(args)
            return dict(zip(order, self.runtime.gather([(h, method, args[h]) for h in order]), strict=True))
        out = {}
        pending = list(args)
        while pending:
            got = self.runtime.gather_tolerant([(h, method, args[h]) for h in pending])
            lost = {}
            for h, res in zip(pending, got, strict=True):
                if isinstance(res, HostLost):
                    lost[h] = res.why
                else:
                    self.losses[h] = 0  # progress: only losses in a row count
                    out[h] = res
            pending = self._recover(lost) if lost else []
        return out

    def _recover(self, lost: dict, patience: float = 120.0) -> list[int]:
        """Rebuild the lost hosts (``{host: why}``) all at once, each in one call
        (``CandidateHost.rebuild``: load + restore from snapshot + log), on the actor Ray
        restarted or on a fresh one; returns the hosts to send the interrupted call again.
        A host still restarting is waited for (a fresh actor after ``patience`` s); one
        lost again while rebuilding counts as another loss in a row."""
        ray = self.runtime.ray
        exc = ray.exceptions
        t0 = time.monotonic()
        deadline = {h: t0 + patience for h in lost}
        todo, new_loss, done = dict(lost), dict(lost), []
        while todo:
            for h, why in new_loss.items():
                self.losses[h] = self.losses.get(h, 0) + 1
                log.warning("candidate host %d lost (%s; %d in a row): rebuilding its %d candidates", h, why,
                            self.losses[h], len(self.per_host[h]))
                if self.losses[h] > MAX_HOST_LOSSES:  # a crash loop (e.g. a candidate that always OOMs)
                    for spec in self.per_host[h]:
                        r = self.records[spec["name"]]
                        if not r.finished:
                            r.status, r.reason = "failed", f"worker lost {self.losses[h]} times in a row ({why})"
                    del todo[h]
            new_loss = {}
            batches = {h: {s["name"]: self._batches(s["name"]) for s in self.per_host[h]
                           if self.records[s["name"]].rounds} for h in todo}
            refs = {h: self.runtime.submit(h, "rebuild", self.per_host[h], self.plan.shared, self.rows, batches[h])
                    for h in todo}
            waiting = False
            for h, ref in refs.items():
                try:
                    snaps = ray.get(ref)
                except exc.ActorUnavailableError:  # still restarting: try again shortly
                    if time.monotonic() > deadline[h]:
                        self.runtime.replace_host(h)
                        deadline[h] = time.monotonic() + patience
                    waiting = True
                    continue
                except exc.RayActorError as err:  # lost again while rebuilding: on a fresh actor
                    self.runtime.replace_host(h)
                    new_loss[h] = todo[h] = first_line(err, "actor died")
                    continue
                self._check_restored(snaps, batches[h], self.recovered)
                self.recovered["hosts"] += 1
                log.warning("candidate host %d rebuilt in %.1f s", h, time.monotonic() - t0)
                done.append(h)
                del todo[h]
            if waiting:
                time.sleep(0.2)
        return done


def _final_certified(cfg: RunConfig, plan: JobPlan, records) -> np.ndarray:
    """The procedure applied to the final evidence (for e-values: the running maxima)."""
    if plan.testing:
        max_e = np.exp(np.array([r.max_log_e for r in records]))
        return certified_set(max_e, cfg.delta, cfg.procedure)
    ok = np.array([r.status == "certified" for r in records])
    if cfg.procedure == "fst":  # the longest certified prefix; levels were set per candidate
        return np.cumprod(ok).astype(bool)
    return ok


def _round_row(r: CandidateRecord) -> dict:
    row = {"labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests, "estimate": r.estimate}
    if r.path:
        row.update(log_evalue=r.log_e, max_log_evalue=r.max_log_e)
    if r.ci is not None:
        row.update(ci_low=r.ci[0], ci_high=r.ci[1])
    if r.rho_weights is not None and len(r.rho_weights) > 1:
        row.update({f"rho_weight_{s}": w for s, w in enumerate(r.rho_weights)})
    row["step"] = r.t
    return row


# -- pairwise ranking --------------------------------------------------------------------


def _judge_losses(names, home, recovery, records, dead, n_items) -> list:
    """The judge's loss on every item for every model (Cer-Eval's judge strata); a model
    whose source fails is marked dead like in the rounds."""
    everything = np.arange(n_items, dtype=np.int64)
    calls = {}
    for nm in names:
        calls.setdefault(home[nm], {})[nm] = everything
    got = recovery.call("losses", {h: (calls[h], "judge") for h in calls})
    out = [None] * len(names)
    for ans in got.values():
        for nm, losses in ans.items():
            m = names.index(nm)
            if isinstance(losses, dict):
                dead.add(m)
                records[m].status, records[m].reason = "failed", f"source failed: {losses['error']}"
            else:
                out[m] = np.asarray(losses, dtype=np.float64)
    return out


def _run_pairwise(cfg, data, plan, runtime, records, home, progress, tracker, t0, recovery, job_dir) -> JobResult:
    """Every pair (i, j) is compared on u = (loss_i - loss_j + 1)/2 by Seq or Cer-Eval with
    threshold 1/2 at level delta/P (Bonferroni over the P pairs); a pair stops as soon as
    its sign is certified. All pairs share one seed, so they ask for the same items for as
    long as their states agree and a model is labelled once per item, whatever the number
    of pairs it is in."""
    names = data.names
    K, I = len(names), data.n_items
    ii, jj = np.triu_indices(K, 1)
    P = ii.size
    cap = min(cfg.budget.n, I)
    # each direction of a pair's sign at delta/(2P): a false order, an exact tie included, has
    # probability <= delta/P, and <= delta over all P pairs
    pair_delta = sign_policy_delta(cfg.delta / P, cfg.policy.radius)
    # a model whose label source failed for good: its pairs end undecided, the others go on
    dead = set()
    scores = [None] * P
    if plan.judge_strata:  # every model's judge loss on every item, before any human label
        judged = _judge_losses(names, home, recovery, records, dead, I)
        scores = [None if ii[p] in dead or jj[p] in dead else (judged[ii[p]] - judged[jj[p]] + 1.0) / 2.0
                  for p in range(P)]
    pairs = [make_estimation_policy(cfg.policy.kind, I, delta=pair_delta, alpha=0.5, radius=cfg.policy.radius,
                                    seed=cfg.seed, features=data.features, partition=cfg.policy.partition,
                                    judge_scores=scores[p] if scores[p] is not None else np.full(I, 0.5))
             for p in range(P)]
    known = [dict() for _ in range(K)]  # item -> loss, per model
    rounds, resume = 0, None
    every = cfg.state.snapshot_every
    ckpt = None if job_dir is None else read_checkpoint(job_dir, "pairwise", names)
    if ckpt is not None:  # the pair policies and the losses they saw, as they were
        pairs = [restore_policy(p, s) for p, s in zip(pairs, ckpt["pairs"], strict=True)]
        known = [dict(zip(k["item"].tolist(), k["loss"].tolist(), strict=True)) for k in ckpt["known"]]
        _load_records(records, ckpt["records"])
        rounds = int(ckpt["round"])
        resume = {"from_round": rounds, "steps_from_snapshots": rounds, "steps_replayed": 0}  # the pairs live here
        dead = {m for m, r in enumerate(records) if r.status == "failed"}
    while True:
        open_pairs = [p for p in range(P) if not pairs[p].done and pairs[p].n_labeled < cap
                      and ii[p] not in dead and jj[p] not in dead]
        if not open_pairs:
            break
        asks = {}
        for p in open_pairs:
            b = min(cfg.budget.batch, cap - pairs[p].n_labeled)
            asks[p] = pairs[p].next_items(b)
        need = [set() for _ in range(K)]
        for p, items in asks.items():
            for m in (ii[p], jj[p]):
                need[m].update(int(i) for i in items if int(i) not in known[m])
        calls = {}
        for m in range(K):
            if need[m]:
                calls.setdefault(home[names[m]], {})[names[m]] = np.array(sorted(need[m]), dtype=np.int64)
        order = list(calls)
        got = recovery.call("losses", {h: (calls[h],) for h in order})
        for h, ans in ((h, got[h]) for h in order):
            for nm, losses in ans.items():
                m = names.index(nm)
                if isinstance(losses, dict):  # its source failed for good
                    dead.add(m)
                    records[m].status, records[m].reason = "failed", f"source failed: {losses['error']}"
                    continue
                known[m].update(zip(calls[h][nm].tolist(), np.asarray(losses).tolist(), strict=True))
        for p, items in asks.items():
            if ii[p] in dead or jj[p] in dead:
                continue  # stopped undecided (stopping is always allowed)
            a = np.array([known[ii[p]][int(i)] for i in items])
            b = np.array([known[jj[p]][int(i)] for i in items])
            pairs[p].update(items, (a - b + 1.0) / 2.0)
        for m in range(K):
            records[m].n_human = records[m].t = len(known[m])
            records[m].n_judge = I if plan.judge_strata else 0
            records[m].requests = len(known[m]) + records[m].n_judge
            if records[m].status == "pending" and known[m]:
                records[m].status = "running"
        rounds += 1
        if job_dir is not None and rounds % every == 0:
            write_checkpoint(job_dir, {
                "kind": "pairwise", "names": list(names), "round": rounds, "records": _dump_records(records),
                "pairs": [p.state_dict() for p in pairs],
                "known": [{"item": np.fromiter(k.keys(), dtype=np.int64, count=len(k)),
                           "loss": np.fromiter(k.values(), dtype=np.float64, count=len(k))} for k in known]})
        if progress is not None:
            progress(records, rounds)
    better = np.zeros((K, K), dtype=bool)
    n_used = np.zeros((K, K), dtype=np.int64)
    intervals = {}
    for p in range(P):
        d = pairs[p].decision  # -1: E[u] < 1/2, model ii better
        if d == -1:
            better[ii[p], jj[p]] = True
        elif d == 1:
            better[jj[p], ii[p]] = True
        n_used[ii[p], jj[p]] = n_used[jj[p], ii[p]] = pairs[p].n_labeled
        lo, hi = pairs[p].ci
        intervals[f"{names[ii[p]]} - {names[jj[p]]}"] = [2 * lo - 1, 2 * hi - 1]  # CI on the risk difference
    score = better.sum(axis=1) - better.sum(axis=0)
    order = np.argsort(-score, kind="stable")
    for m, r in enumerate(records):
        if m not in dead:
            r.status = "certified" if better[m].sum() == K - 1 else "stopped"
            r.reason = f"{int(better[m].sum())} certified wins, {int(better[:, m].sum())} certified losses"
        r.estimate = float(np.mean(list(known[m].values()))) if known[m] else float("nan")
    top = [names[m] for m in range(K) if better[m].sum() == K - 1 and m not in dead]
    ranking = {
        "order": [names[m] for m in order],
        "score": {names[m]: int(score[m]) for m in range(K)},
        "better": {names[a]: [names[b] for b in np.flatnonzero(better[a])] for a in range(K)},
        "pairs_certified": int(better.sum()),
        "pairs": P,
        "pair_delta": cfg.delta / P,
        "pair_delta_per_direction": pair_delta,
        "items_per_pair": {f"{names[ii[p]]} vs {names[jj[p]]}": int(n_used[ii[p], jj[p]]) for p in range(P)},
        "difference_intervals": intervals,
    }
    level = f"pairwise, each of {P} pairs at delta/P = {cfg.delta / P:.4g} ({pair_delta:.4g} per direction)"
    return JobResult(cfg, data, records, top, top[0] if top else None, level, _totals(records), plan.full_budget(),
                     rounds, time.perf_counter() - t0, ranking=ranking, resume=resume)
