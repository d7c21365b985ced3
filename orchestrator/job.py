"""``certsel run``: validate everything, then track, run and report one selection job.

Order matters for the "no half-written run" rule: the config, the data, the tracking store
and the Ray connection are all checked *before* the MLflow parent run is created, so bad
input leaves no run at all; once runs exist, any failure marks them FAILED (KILLED on
Ctrl-C) before the error propagates.
"""

from __future__ import annotations

import tempfile

from certsel.config import RunConfig

from .driver import JobResult, RayRuntime, run_job
from .jobdata import load_job_data
from .report import write_report
from .scheduling import CandidateRecord
from .tracking import JobTracker, precheck


def execute(cfg: RunConfig, *, progress=None, report_dir=None, track: bool = True) -> tuple[JobResult, str | None]:
    """Run ``cfg`` end to end; returns the result and the MLflow parent run id."""
    data = load_job_data(cfg)
    if track:
        precheck(cfg.tracking.uri)
    runtime = RayRuntime(cfg.ray.address, cfg.ray.num_cpus, cfg.ray.max_actors)
    tracker = run_id = None
    try:
        if track:
            tracker = JobTracker(cfg.tracking.uri, cfg.tracking.experiment)
            obj = data.objective
            run_id = tracker.start(cfg, data, [
                CandidateRecord(n, k, None if obj is None else float(obj[k])) for k, n in enumerate(data.names)
            ])
        result = run_job(cfg, data, runtime, progress=progress, tracker=tracker)
        with tempfile.TemporaryDirectory() as tmp:
            files = write_report(result, report_dir or tmp)
            if tracker is not None:
                tracker.finish(result, files)
        return result, run_id
    except KeyboardInterrupt:
        if tracker is not None:
            tracker.fail("KILLED")
        raise
    except BaseException:
        if tracker is not None:
            tracker.fail("FAILED")
        raise
    finally:
        runtime.close()
