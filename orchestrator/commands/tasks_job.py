"""``certsel run`` on a multi-task job: every task as a job of its own, then the combined certificate
(:mod:`certsel.orchestrator.results.task_combination`)."""

from __future__ import annotations

import pathlib
import re

from certsel.config import RunConfig

from certsel.orchestrator.outputs.paths import output_dir
from certsel.orchestrator.outputs.tasks_outputs import TasksTracker, write_tasks_report
from certsel.orchestrator.outputs.mlflow_store import precheck
from certsel.orchestrator.engine.state import JobState, config_fingerprint

from .job import Answered, execute, finished_certificate, finished_job
from .lifecycle import JobLifecycle
from certsel.orchestrator.inputs.stacked_tasks import load_tasks
from certsel.orchestrator.results.task_combination import MultiTaskResult, TaskOutcome, combine


def execute_tasks(cfg: RunConfig, *, output=None, track: bool = True, progress=None, warn=None,
                  on_job=None) -> MultiTaskResult:
    """Run every task of ``cfg`` as a durable, tracked job (outputs in ``output/TASK``, else its job folder), then
    combine them; the combined certificate goes to ``output`` (default: ``state.dir/NAME.tasks``) and to an MLflow
    run holding the tasks' runs. The multi-task job is a job of its own (:class:`JobLifecycle`: listed by ``certsel
    jobs``, each task's folder naming it as ``parent``), recorded as failed when a task fails, resumed by a rerun."""
    given = output is not None
    folder = output_dir(output if given else pathlib.Path(cfg.state.dir) / f"{_slug(cfg.name)}.tasks",
                        "--output" if given else "state.dir")
    cfgs, datas = load_tasks(cfg)
    if track:
        precheck(cfg.tracking.uri)
    with JobLifecycle.open(cfg.state.dir, tasks_fingerprint(cfg, datas), name=cfg.name, front_end="multi-task",
                           auto=cfg.state.resume == "auto") as life:
        def task_job(job):  # each task's folder names its parent
            job.update(parent=life.job.job_id)
            if on_job is not None:
                on_job(job)

        tracker = TasksTracker(cfg) if track else None
        life.tracker, life.run_id = tracker, None if tracker is None else tracker.run_id
        outcomes = []
        for t, tc, data in zip(cfg.tasks, cfgs, datas, strict=True):
            done = finished_job(tc, data)  # a task that finished in an earlier run: its labels are in its log
            result, run_id = execute(tc, output=folder / t.name if given else None, track=track,
                                     progress=progress, warn=warn, on_job=task_job,
                                     parent_run=None if tracker is None else tracker.run_id, data=data,
                                     resume=None if done is None else done.job_id, reopen=done is not None)
            outcomes.append(TaskOutcome(t.name, tc, result, run_id))
        res = combine(cfg, outcomes)
        if tracker is not None:
            res.run_id, res.tracking = tracker.run_id, tracker.where
        res.files, res.output_dir = write_tasks_report(res, folder), folder
        if tracker is not None:
            tracker.finish(res)
        life.mark_ended(cfg.name, folder, res.selected, all(o.result.evaluated for o in outcomes))
        return res


def finished_tasks_job(cfg: RunConfig) -> Answered | None:
    """The finished multi-task job a rerun of ``cfg`` is (None: none, or no auto-resume), its certificate read: a rerun
    shows it instead of buying its tasks' labels again."""
    from certsel.orchestrator.outputs.tasks_schema import parse_any

    if cfg.state.resume != "auto":
        return None
    done = JobState.finished(cfg.state.dir, tasks_fingerprint(cfg, load_tasks(cfg)[1]))
    return None if done is None else Answered(done.job_id, done.output, finished_certificate(done, parse_any),
                                              done.mlflow_run)


def tasks_fingerprint(cfg: RunConfig, datas) -> str:
    """What makes two multi-task runs the same job: the job's configuration and every task's data."""
    return config_fingerprint(cfg, "+".join(d.fingerprint for d in datas))


def _slug(name: str) -> str:
    """A job name as a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "job"
