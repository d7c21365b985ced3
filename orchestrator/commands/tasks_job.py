"""``certsel run`` on a multi-task job: every task as a job of its own, then the combined certificate
(:mod:`certsel.orchestrator.results.task_combination`)."""

from __future__ import annotations

import pathlib
import re

from certsel.config import RunConfig

from certsel.orchestrator.outputs.paths import output_dir
from certsel.orchestrator.outputs.tasks_outputs import TasksTracker, write_tasks_report
from certsel.orchestrator.outputs.mlflow_store import precheck
from .job import execute
from certsel.orchestrator.inputs.stacked_tasks import load_tasks
from certsel.orchestrator.results.task_combination import MultiTaskResult, TaskOutcome, combine


def execute_tasks(cfg: RunConfig, *, output=None, track: bool = True, progress=None, warn=None,
                  on_job=None) -> MultiTaskResult:
    """Run every task of ``cfg`` as a durable, tracked job (outputs in ``output/TASK``, else its job folder), then
    combine them; the combined certificate goes to ``output`` (default: ``state.dir/NAME.tasks``) and to an MLflow
    run holding the tasks' runs."""
    given = output is not None
    folder = output_dir(output if given else pathlib.Path(cfg.state.dir) / f"{_slug(cfg.name)}.tasks",
                        "--output" if given else "state.dir")
    cfgs, datas = load_tasks(cfg)
    if track:
        precheck(cfg.tracking.uri)
    tracker = TasksTracker(cfg) if track else None
    try:
        outcomes = []
        for t, tc, data in zip(cfg.tasks, cfgs, datas, strict=True):
            result, run_id = execute(tc, output=folder / t.name if given else None, track=track,
                                     progress=progress, warn=warn, on_job=on_job,
                                     parent_run=None if tracker is None else tracker.run_id, data=data)
            outcomes.append(TaskOutcome(t.name, tc, result, run_id))
        res = combine(cfg, outcomes)
        if tracker is not None:
            res.run_id, res.tracking = tracker.run_id, tracker.where
        res.files, res.output_dir = write_tasks_report(res, folder), folder
        if tracker is not None:
            tracker.finish(res)
        return res
    except BaseException as exc:
        if tracker is not None:
            tracker.fail("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise


def _slug(name: str) -> str:
    """A job name as a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "job"
