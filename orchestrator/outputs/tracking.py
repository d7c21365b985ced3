"""MLflow tracking of a selection job: a parent run, one nested run per candidate.

Parent run: the job's params, final metrics (labels spent against the full budget), tags (``certsel.selected``),
artifacts (``selection.json``, reports, plots). Nested runs: the candidate's params, step metrics after every round
(labels, log e-value and running maximum, estimate, interval, rho weights; the per-label e-value path as
``log_evalue_path``), final tags ``certified`` / ``selected`` / ``status``. See docs/driver.md, "MLflow".

The store is :mod:`.mlflow_store`'s. A job that fails after its runs exist marks them FAILED (KILLED on Ctrl-C), so
no half-written run is left FINISHED.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
import time
from concurrent.futures import ThreadPoolExecutor

from certsel._version import __version__
from certsel.orchestrator.results.outcomes import budget_stopped
from certsel.orchestrator.results.records import Status


from .cells import headline
from .mlflow_store import NOTE, PARENT_TAG, client_for, experiment_id
from .certificate import certificate_of
from .goals import goal_for, goal_for_config
from .gpu import gpu_metrics
from .selection_schema import Candidate

@dataclass(frozen=True)
class TrackedJob:
    """What the runs say of the job folder they belong to: its id, which attempt this is, and the parent runs earlier
    attempts left (a killed driver's, RUNNING until this one marks them KILLED)."""

    job_id: str
    attempt: int
    earlier_runs: tuple[str, ...]

    @classmethod
    def of(cls, state) -> TrackedJob | None:
        """From a :class:`~certsel.orchestrator.engine.state.JobState` (None: no folder)."""
        if state is None:
            return None
        return cls(state.job_id, int(state.meta.get("attempts", 1)), tuple(state.meta.get("mlflow_runs", [])))


class JobTracker:
    """Logs one job; use :meth:`start`, :meth:`on_round`, then :meth:`finish` or :meth:`fail`."""

    def __init__(self, uri: str | None, experiment: str):
        self.client, self.uri = client_for(uri)
        self.experiment_id = experiment_id(self.client, self.uri, experiment)
        self.parent_id: str | None = None
        self.child: dict[str, str] = {}
        self._logged: dict[str, int] = {}  # rounds already logged per candidate
        self._path_logged: dict[str, int] = {}  # e-value path entries already logged
        # one thread writes step metrics in order while the next round runs (finish and fail wait for it)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="certsel-mlflow-steps")
        self._pending: list = []

    def start(self, cfg, data, records, job: TrackedJob | None = None, parent_run: str | None = None,
              started: float | None = None) -> str:
        """``job``: its folder (id and attempt are tagged; runs a killed driver left RUNNING become KILLED)."""
        from mlflow.entities import Param, RunTag

        c = self.client
        tags = {"certsel.version": __version__, "certsel.kind": "job"}
        if parent_run is not None:  # a task of a multi-task job: nested under the job's run
            tags["mlflow.parentRunId"] = parent_run
        if job is not None:
            tags.update({"certsel.job_id": job.job_id, "certsel.attempt": str(job.attempt)})
            for old in job.earlier_runs:
                self._close_stale(old)
        goal = goal_for_config(cfg)
        tags[NOTE] = (f"certsel job **{cfg.name}**: {cfg.policy.kind}, procedure {cfg.procedure}, delta = {cfg.delta:g}"
                      + goal.note_target(cfg) + f", {len(records)} candidates. Running.")
        # started: when the command began (time.time()), so the run's duration is the job's, Ray's start included
        parent = c.create_run(self.experiment_id, run_name=cfg.name, tags=tags,
                              start_time=None if started is None else int(started * 1000))
        self.parent_id = parent.info.run_id
        params = {
            "delta": cfg.delta, "policy": cfg.policy.kind, "betting": cfg.policy.strategy.describe(),
            "radius": cfg.policy.radius, "partition": cfg.policy.partition, "procedure": cfg.procedure,
            "budget_n": cfg.budget.n,
            "budget_r": cfg.budget.r, "budget_batch": cfg.budget.batch, "budget_max_requests": cfg.budget.max_requests,
            "scheduling": cfg.scheduling.mode, "lookahead": cfg.scheduling.lookahead, "seed": cfg.seed,
            "data_path": cfg.data_path, "data_fingerprint": data.fingerprint, "judge": cfg.judge_name,
            "source": cfg.source_kind,
            "objective": None if cfg.objective is None else f"{cfg.objective.goal} {cfg.objective.column}",
            "n_candidates": len(records), "n_items": data.n_items,
        }
        params.update(goal.params(cfg, data))  # alpha (not for a ranking), an aggregate's weights and scale
        # only what means something for this job: no judge or judge ratio without a judge
        if not cfg.policy.uses_judge:
            params.pop("budget_r")
        if not (cfg.policy.uses_judge or cfg.policy.judge_first):
            params.pop("judge")
        if not cfg.policy.is_testing:
            params.pop("betting")
        if cfg.policy.is_testing:  # the radius of an estimation policy's interval (Seq, Cer-Eval)
            params.pop("radius")
        if "partition" not in cfg.policy.policy_kind.takes:
            params.pop("partition")
        c.log_batch(self.parent_id, params=[Param(k, str(v)) for k, v in params.items()])
        for r in records:
            run = c.create_run(self.experiment_id, run_name=r.name,
                               tags={PARENT_TAG: self.parent_id, "certsel.kind": "candidate", "candidate": r.name})
            self.child[r.name] = run.info.run_id
            ps = [Param("candidate", r.name), Param("position", str(r.index))]
            if r.objective is not None:
                ps.append(Param("objective", repr(r.objective)))
            c.log_batch(run.info.run_id, params=ps, tags=[RunTag("status", "pending")])
        return self.parent_id

    def on_round(self, records) -> None:
        """Step metrics of the rounds not yet logged, built from the records now, written by the tracker's thread."""
        from mlflow.entities import Metric

        self._check_writes()
        now = int(time.time() * 1000)
        for r in records:
            done = self._logged.get(r.name, 0)
            new = r.rounds[done:]
            if not new:
                continue
            metrics = []
            for row in new:
                step = int(row["step"])
                metrics += [Metric(k, float(v), now, step) for k, v in row.items() if k != "step" and v == v]
            start = self._path_logged.get(r.name, 0)
            metrics += [Metric("log_evalue_path", float(v), now, i + 1)
                        for i, v in enumerate(r.path[start:], start=start)]
            for i in range(0, len(metrics), 1000):
                self._pending.append(self._writer.submit(self.client.log_batch, self.child[r.name],
                                                         metrics=metrics[i : i + 1000]))
            self._logged[r.name] = len(r.rounds)
            self._path_logged[r.name] = len(r.path)

    def _check_writes(self) -> None:
        """Raise the first failure of a finished step-metric write (a store that broke mid-job)."""
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            f.result()

    def _drain(self) -> None:
        """Wait for every step-metric write; raise the first failure."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    def finish(self, result, artifacts: list) -> None:
        from mlflow.entities import Metric, Param, RunTag

        c = self.client
        now = int(time.time() * 1000)
        self.on_round(result.records)
        self._drain()
        self._writer.shutdown()
        in_set = set(result.certified)
        whole = certificate_of(result)
        cert = {c.candidate: c for c in whole.candidates}
        goal = goal_for(result)
        gpu_by = {} if whole.gpu is None else whole.gpu.candidates
        for r in result.records:
            tags = [RunTag("status", r.status), RunTag("certified", str(r.name in in_set).lower()),
                    RunTag("selected", str(r.name == result.selected).lower()),
                    RunTag(NOTE, _candidate_note(result, cert[r.name]))]
            if r.reason:
                tags.append(RunTag("reason", r.reason[:250]))
            row = cert[r.name]
            final = {"labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests,
                     "certified": float(r.name in in_set), "selected": float(r.name == result.selected),
                     "level": row.level}
            if row.cost is not None:
                final["cost"] = row.cost
            if r.name in gpu_by:  # the GPU-seconds of its generations (live.serve)
                final["gpu_seconds"] = gpu_by[r.name]
            if row.threshold is not None:  # e-values: the threshold, and its log next to log_evalue
                final.update(threshold=row.threshold, log_threshold=math.log(row.threshold))
            if r.ci is not None:
                final.update(final_ci_low=r.ci[0], final_ci_high=r.ci[1])
            if r.upper_bound is not None:
                final["final_upper_bound"] = r.upper_bound
            if r.joint_bound is not None:
                final["final_simultaneous_bound"] = r.joint_bound
            if r.judge is not None:
                final.update({f"judge_{k}": v for k, v in r.judge.items() if k != "items" and v is not None})
            if r.queue is not None:  # labels from people: what the annotation queue did
                q = dataclasses.asdict(r.queue)
                agree = q.pop("agreement") or {}
                final.update({f"annotators_{k}": v for k, v in q.items()})
                final.update({f"annotators_{k}": v for k, v in agree.items() if isinstance(v, float)})
            if r.path:
                final["final_max_log_evalue"] = r.max_log_e
            final.update(goal.candidate_metrics(result, row))  # a recovery's shares, a rank interval, per task
            c.log_batch(self.child[r.name], tags=tags,
                        metrics=[Metric(k, float(v), now, r.t) for k, v in final.items()])
            c.set_terminated(self.child[r.name], "FINISHED")
        metrics = {"rounds": result.rounds, "seconds": result.seconds, "n_certified": len(result.certified),
                   "n_candidates": len(result.records)}
        # the stops, as the job's last lines count them: jobs compare on them in the runs table
        metrics["n_futile"] = sum(r.status == Status.FUTILE for r in result.records)
        metrics["n_budget_stopped"] = sum(budget_stopped(r.status, r.reason) for r in result.records)
        metrics.update(goal.job_metrics(result))
        for k in ("human", "judge", "requests"):
            metrics[f"labels_{k}"] = result.spent[k]
            metrics[f"full_budget_{k}"] = result.full[k]
            if result.full[k]:
                metrics[f"saved_fraction_{k}"] = 1 - result.spent[k] / result.full[k]
                metrics[f"{k}_labels_saved_percent"] = round(100 * metrics[f"saved_fraction_{k}"], 1)  # a column
        sel = result.selected_record
        if sel is not None and sel.objective is not None:
            metrics["selected_objective"] = sel.objective
        metrics.update(gpu_metrics(whole.gpu))
        if whole.labels.oracle is not None:  # labels used against an oracle's estimate (engine/derived.py)
            metrics.update(oracle_estimate_labels=whole.labels.oracle.oracle_estimate,
                           labels_over_oracle=whole.labels.oracle.ratio)
        if result.cfg.costs is not None:  # the spend in the user's unit (tag certsel.cost_unit)
            spent = result.cfg.costs.of(result.spent["human"], result.spent["judge"], result.spent["requests"])
            metrics.update({f"cost_{k}": v for k, v in spent.items()})
        tags = [RunTag("certsel.selected", str(result.selected)), RunTag("certsel.procedure", result.cfg.procedure),
                RunTag(NOTE, _job_note(result))]
        if result.cfg.costs is not None:
            tags.append(RunTag("certsel.cost_unit", result.cfg.costs.unit))
        # what was certified, as a runs-table column (the headline without "selected: " or the objective)
        shown = headline(whole, objective=False).removeprefix("selected: ")
        c.log_batch(self.parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()], tags=tags,
                    params=[Param("selected", shown[:6000])])
        for path in artifacts:
            c.log_artifact(self.parent_id, str(path))
        c.set_terminated(self.parent_id, "FINISHED")

    def _close_stale(self, parent_id: str) -> None:
        """A parent run (and its candidates' runs) left RUNNING by a driver that died."""
        from mlflow.entities import RunTag

        try:
            runs = self.client.search_runs([self.experiment_id], f"tags.`{PARENT_TAG}` = '{parent_id}'")
            for run in [*runs, self.client.get_run(parent_id)]:
                if run.info.status == "RUNNING":
                    self.client.log_batch(run.info.run_id, tags=[RunTag("certsel.interrupted", "resumed later")])
                    self.client.set_terminated(run.info.run_id, "KILLED")
        except Exception:  # another store, or a run deleted by hand: nothing to close
            pass

    def fail(self, status: str = "FAILED") -> None:
        """Mark every run of this job that is still open as FAILED (or KILLED)."""
        try:
            self._drain()
        except Exception:  # the store may be what failed: the runs are closed below if it still answers
            pass
        self._writer.shutdown(cancel_futures=True)
        for run_id in [*self.child.values(), self.parent_id]:
            if run_id is None:
                continue
            try:
                if self.client.get_run(run_id).info.status == "RUNNING":
                    self.client.set_terminated(run_id, status)
            except Exception:  # the store itself may be what failed; nothing more to do
                pass


def log_audit(cfg, result, files) -> str:
    """One MLflow run for a ``certsel audit``: rates as metrics (step = candidate position), its files as artifacts."""
    from mlflow.entities import Metric, Param

    client, uri = client_for(cfg.tracking.uri)
    exp = experiment_id(client, uri, cfg.tracking.experiment)
    run = client.create_run(exp, run_name=f"audit {cfg.name}", tags={"certsel.kind": "audit",
                                                                     "certsel.version": __version__})
    rid = run.info.run_id
    try:
        params = {"policy": cfg.policy.kind, "betting": cfg.policy.strategy.describe(), "alpha": cfg.alpha, "delta": cfg.delta,
                  "procedure": cfg.procedure, "budget_n": cfg.budget.n, "budget_r": cfg.budget.r, "reps": result.reps,
                  "data_path": str(cfg.data.path), "judge": cfg.data.judge}
        now = int(time.time() * 1000)
        o = result.overall
        metrics = [Metric(k, float(o[k]), now, 0) for k in ("familywise_failure", "failure_upper", "mean_certified")]
        for i, r in enumerate(result.rows):
            for k in ("failure", "failure_upper", "power", "coverage", "labels_mean", "rmse"):
                if r[k] is not None:
                    metrics.append(Metric(f"candidate_{k}", float(r[k]), now, i))
        client.log_batch(rid, params=[Param(k, str(v)) for k, v in params.items()])
        for i in range(0, len(metrics), 1000):
            client.log_batch(rid, metrics=metrics[i : i + 1000])
        for path in files:
            client.log_artifact(rid, str(path))
        client.set_tag(rid, "certsel.audit_verdict", str(o["verdict"]))
        client.set_terminated(rid, "FINISHED")
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    return rid


def _job_note(result) -> str:
    """The parent run's description: the certificate and what it cost."""
    cert = certificate_of(result)
    lab = cert.labels
    saved = ", ".join(f"{getattr(lab.spent, k)} {k} of {getattr(lab.full_budget, k)} "
                      f"({getattr(lab.saved_fraction, k):.0%} saved)"
                      for k in ("human", "judge") if getattr(lab.full_budget, k))
    return (f"**Selected: {cert.selected or 'none'}.** {cert.certificate}.\n\n{cert.guarantee}\n\n"
            f"Labels: {saved}. Procedure: {cert.procedure.level}. Details: artifacts report.html, "
            "selection.json.")


def _candidate_note(result, row: Candidate) -> str:
    """A candidate run's description: its status and the numbers it was decided on."""
    bits = [f"**{row.candidate}: {row.status}**" + (" (selected)" if row.selected else "")
            + ("; in the certified set" if row.certified else "; not in the certified set")]
    bits += goal_for(result).candidate_note(result, row)
    if row.exact:
        bits.append("decided on the exact mean of every item")
    elif row.e_value is not None:
        bits.append(f"e-value {row.e_value:.3g} against the threshold {row.threshold:.3g}")
    if row.reason:
        bits.append(row.reason)
    bits.append(f"{row.labels_human} human labels")
    return ". ".join(bits) + "."



def log_finished(uri: str | None, experiment: str, job_id: str, folder, cert) -> tuple[str, bool]:
    """The run of the finished job ``job_id`` in the tracking store ``uri``: the one there (tagged with its job id),
    else one logged now from its folder (its certificate ``cert`` as a parent run with a run per candidate, its
    files as artifacts): a rerun answered by a finished job reaches the store it names. Returns (run id, logged now)."""
    import pathlib

    from mlflow.entities import Metric, Param, RunTag

    client, uri = client_for(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    if exps:
        found = client.search_runs(exps, f"tags.`certsel.job_id` = '{job_id}' and tags.`certsel.kind` = 'job' "
                                         "and attributes.status = 'FINISHED'", max_results=1)
        if found:
            return found[0].info.run_id, False
    exp = experiment_id(client, uri, experiment)
    now = int(time.time() * 1000)
    parent = client.create_run(exp, run_name=cert.job, tags={
        "certsel.version": __version__, "certsel.kind": "job", "certsel.job_id": job_id,
        "certsel.logged_from": str(folder), "certsel.selected": str(cert.selected),
        NOTE: f"**Selected: {cert.selected or 'none'}.** {cert.certificate}.\n\nLogged from the finished job {job_id} "
              f"({folder}) when a rerun was answered by it: no label was bought then."})
    pid = parent.info.run_id
    try:
        spent = cert.labels.spent
        client.log_batch(pid, params=[Param("job_id", job_id), Param("procedure", cert.procedure.name),
                                      Param("seed", str(cert.seed))],
                         metrics=[Metric(f"labels_{k}", float(getattr(spent, k)), now, 0)
                                  for k in ("human", "judge", "requests")]
                         + [Metric("n_certified", float(len(cert.certified_set)), now, 0),
                            Metric("n_candidates", float(len(cert.candidates)), now, 0)])
        for c in cert.candidates:
            run = client.create_run(exp, run_name=c.candidate, tags={PARENT_TAG: pid, "certsel.kind": "candidate",
                                                                    "candidate": c.candidate})
            final = {"labels_human": c.labels_human, "certified": float(c.certified), "selected": float(c.selected),
                     "level": c.level}
            final.update({k: v for k, v in (("final_upper_bound", c.upper_bound), ("threshold", c.threshold),
                                             ("final_max_log_evalue", c.log_e_value)) if v is not None})
            client.log_batch(run.info.run_id, tags=[RunTag("status", c.status),
                                                    RunTag("certified", str(c.certified).lower())],
                             metrics=[Metric(k, float(v), now, 0) for k, v in final.items()])
            client.set_terminated(run.info.run_id, "FINISHED")
        for name in ("selection.json", "report.html", "labels.parquet"):
            if (pathlib.Path(folder) / name).is_file():
                client.log_artifact(pid, str(pathlib.Path(folder) / name))
        client.set_terminated(pid, "FINISHED")
    except BaseException:
        client.set_terminated(pid, "FAILED")
        raise
    return pid, True
