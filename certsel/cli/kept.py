"""``certsel jobs``, ``certsel show`` and ``certsel schema``: the jobs kept, a past certificate, the published schema."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from certsel.errors import first_line

from .progress import make_console

if TYPE_CHECKING:
    from certsel.orchestrator.outputs.selection_schema import Certificate
    from certsel.orchestrator.outputs.tasks_schema import TasksCertificate


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def over_size(jobs, limit: int, gone: set[str]) -> list[str]:
    """The finished and failed jobs to delete, oldest first, until what is left holds at most ``limit`` bytes (jobs
    that can resume, or are running, are never among them)."""
    size = sum(j.bytes for j in jobs if j.job_id not in gone)
    out = []
    for j in sorted(jobs, key=lambda j: j.created):
        if size <= limit:
            break
        if j.job_id not in gone and j.status in ("finished", "failed"):
            out.append(j.job_id)
            size -= j.bytes
    return out


def jobs_command(args) -> int:
    from certsel.orchestrator.engine.state import list_jobs, remove_job

    from certsel.home import jobs_dir

    root = args.state_dir or jobs_dir()
    if not root.is_dir():
        if args.state_dir is None:  # nothing run yet: not an error
            print(f"no jobs yet in {root} (certsel run keeps them there unless a job file sets state.dir)")
            return 0
        raise ValueError(f"no jobs folder {root}")
    gone = list(args.remove)
    if args.clean:  # failed: every job that did not finish (failed, interrupted, or its driver died)
        wanted = {"finished": {"finished"}, "failed": {"failed", "interrupted", "unfinished"},
                  "all": {"finished", "failed", "interrupted", "unfinished"}}[args.clean]
        gone += [j.job_id for j in list_jobs(root) if j.status in wanted]
    if args.max_size is not None:
        gone += over_size(list_jobs(root), args.max_size, set(gone))
    if args.remove or args.clean or args.max_size is not None:
        freed = sum(remove_job(root, job_id) for job_id in dict.fromkeys(gone))
        left = sum(j.bytes for j in list_jobs(root))
        print(f"removed {len(set(gone))} job(s) from {root}, {size_text(freed)} freed, {size_text(left)} left")
        if args.max_size is not None and left > args.max_size:
            print(f"certsel: the jobs that are left can resume (or are running) and were kept: {size_text(left)}, "
                  f"over --max-size {size_text(args.max_size)}", file=sys.stderr)
        return 0
    jobs = list_jobs(root)
    if not jobs:
        print(f"no jobs in {root}")
        return 0
    from rich.table import Table

    t = Table(title=f"jobs in {root.resolve()}")
    for c in ("job id", "name", "status", "created", "selected", "size", "report"):
        t.add_column(c, overflow="fold")
    for j in jobs:
        t.add_row(j.job_id, j.name, j.status, j.created.replace("T", " ")[:19], j.selected or "", size_text(j.bytes),
                  "" if j.report is None else str(j.report))
    console = make_console()
    if not console.is_terminal:
        console.width = 250
    console.print(t)
    return 0


def schema_command(args) -> int:
    from certsel.orchestrator.outputs.selection_schema import SCHEMA_VERSION, json_schema

    print(SCHEMA_VERSION if args.version_only else json.dumps(json_schema(), indent=2))
    return 0


def show_command(args) -> int:
    from certsel.terminal import format_job, print_job

    found, where = None, f"{args.run_id}: its selection.json"
    if args.tracking_uri is None:  # the job's own folder first: a file on disk, no MLflow client
        from certsel.home import jobs_dir
        from certsel.orchestrator.engine.state import find_certificate

        found = find_certificate(jobs_dir(), args.run_id)
        if found is not None:
            where = str(found)  # the file itself, named in any error about it
            try:
                raw = json.loads(found.read_text())
            except ValueError as exc:  # not JSON (a file cut short, edited by hand)
                raise ValueError(f"{where} is not JSON ({exc})") from None
    if found is None:
        from certsel.orchestrator.outputs.mlflow_store import TrackingProblem, load_certificate

        try:
            raw = load_certificate(args.run_id, args.tracking_uri)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc})") from None
        except TrackingProblem as exc:  # neither a job of this home nor a run of the store
            hint = "" if args.tracking_uri is not None else "; no job of certsel's home either (certsel jobs lists them)"
            raise TrackingProblem(f"{first_line(exc)}{hint}") from None
    cert = typed_certificate(raw, where)
    fmt = "json" if args.json else args.format
    if fmt != "table":
        print(format_job(cert, fmt))
    else:
        print_job(make_console(), cert, False)
    return 0


def typed_certificate(raw, where: str) -> Certificate | TasksCertificate:
    """A selection.json file's content as the typed certificate (a multi-task job's or one job's), or a one-line
    ``ValueError`` naming the file (``where``) and the first field that does not match the schema."""
    from pydantic import ValidationError

    from certsel.orchestrator.outputs.tasks_schema import parse_any

    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not a certificate (a JSON {type(raw).__name__}, not an object)")
    try:
        return parse_any(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{where} does not match certsel's schema at "
                         f"{'.'.join(map(str, err['loc'])) or 'the top'}: {err['msg']}") from None
