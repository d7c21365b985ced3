"""``certsel run`` and ``certsel gate``: a job from its file to the printed certificate."""

from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING

from .progress import make_console, progress_bar

if TYPE_CHECKING:
    from certsel.orchestrator.outputs.selection_schema import Certificate
    from certsel.orchestrator.outputs.tasks_schema import TasksCertificate


def runtime_overrides(args) -> list[str]:
    """The job's ``--set`` overrides, ``--runtime`` among them (the job file's ``runtime:`` key)."""
    return [*args.overrides, *([f"runtime={args.runtime}"] if getattr(args, "runtime", None) else [])]


def run_command(args) -> int:
    from certsel.config import load_config
    from certsel.config.ledger import with_ledger

    cfg = with_ledger(load_config(args.config, runtime_overrides(args)))  # bad input exits before the engine loads
    if args.fresh:
        if args.resume:
            raise ValueError("--fresh and --resume exclude each other")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
    if cfg.tasks is not None and cfg.aggregate is None:
        return run_tasks(args, cfg, *_consoles(args), _on_job(args))
    from certsel.orchestrator.outputs.output_process import outputs_for

    outputs = outputs_for(cfg, not args.no_tracking)  # importing MLflow (or matplotlib) beside everything below
    try:
        return _run(args, cfg, outputs)
    finally:
        if outputs is not None:
            outputs.close()


def _consoles(args):
    machine = args.format != "table"  # stdout holds only the formatted result
    return make_console(stderr=machine), machine


def _on_job(args):
    machine = args.format != "table"

    def on_job(job):
        # what Ctrl-C prints: the same command, resuming this job (its labels are not bought again)
        words = ["certsel", "run", str(args.config), *(x for o in runtime_overrides(args) for x in ("--set", o)),
                 *(["--home", str(args.home)] if getattr(args, "home", None) else []), "--resume", job.job_id]
        args.resume_command = shlex.join(words)
        # printed first: the job id is what a resume needs if this process dies
        verb = f"resuming job {job.job_id} (attempt {job.meta['attempts']})" if job.resumed else f"job {job.job_id}"
        if not args.quiet or job.resumed:
            print(f"{verb}: labels kept in {job.dir}", flush=True, file=sys.stderr if machine else sys.stdout)

    return on_job


def _run(args, cfg, outputs) -> int:
    from certsel.orchestrator.commands.job import execute
    from certsel.orchestrator.outputs.certificate import certificate_of

    console, machine = _consoles(args)
    on_job = _on_job(args)
    data = None
    if not args.resume and args.output is None:  # the same job finished before: show it, buy nothing
        from certsel.orchestrator.commands.job import answer_finished
        from certsel.orchestrator.inputs.sources import load_job_data

        data = load_job_data(cfg)
        done = answer_finished(cfg, data, track=not args.no_tracking)
        if done is not None:
            logged = f"; its MLflow run logged now to {cfg.tracking.uri or 'this store'}" if done.logged else ""
            print(f"job {done.job_id} already finished with this configuration and data: its certificate, no label "
                  f"bought now{logged} (certsel run --fresh runs it again):",
                  file=sys.stderr if machine else sys.stdout, flush=True)
            emit(args, console, machine, done.certificate, run_id=done.mlflow_run, output_dir=done.output)
            return 0
    kw = {"output": args.output, "track": not args.no_tracking, "resume": args.resume, "on_job": on_job, "data": data,
          "outputs": outputs,
          "warn": lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True),
          "on_runtime": None if args.quiet else
          lambda choice: print(choice.line(), flush=True, file=sys.stderr if machine else sys.stdout),
          "check_outputs": [] if args.json is None else [(args.json, "--json")]}
    if args.no_progress:
        result, run_id = execute(cfg, **kw)
    else:
        bar, update = progress_bar(console, 0)
        with bar:
            def progress(records, rounds):
                if bar.tasks[0].total == 0:
                    bar.update(bar.tasks[0].id, total=cfg.budget.n * len(records))
                update(records, rounds)

            result, run_id = execute(cfg, progress=progress, on_servers=lambda st: update.servers(st),
                                     on_stage=update.stage, **kw)
    cert = certificate_of(result)
    emit(args, console, machine, cert, run_id=run_id, tracking=result.tracking, output_dir=result.output_dir)
    if not result.evaluated:
        print(f"certsel: error: no candidate could be evaluated ({failures(cert)})", file=sys.stderr)
        return 1
    return 0


def gate_command(args) -> int:
    """``certsel gate``: a line per candidate, the files CI reads, and the gate's exit status."""
    from certsel.gates import RegressionAsk, gate
    from certsel.orchestrator.outputs.paths import output_file
    from certsel.terminal import folded, short_path

    for path, opt in ((args.json, "--json"), (args.junit, "--junit"), (args.summary, "--summary"),
                      (args.outputs, "--outputs")):
        if path is not None:
            output_file(path, opt)  # a folder that cannot be written is bad input, before anything runs
    res = gate(args.config, only=args.only, overrides=runtime_overrides(args), output=args.output,
               track=not args.no_tracking, fresh=args.fresh, compressed=args.compressed, base=args.base,
               labels=args.labels, regression=RegressionAsk.of(args.baseline, args.margin, args.superiority),
               series=args.series, on_runtime=None if args.quiet else lambda choice: print(folded(choice.line()),
                                                                                        flush=True),
               warn=lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True))
    from certsel.orchestrator.outputs.cells import ledger_lines
    from certsel.orchestrator.outputs.gate_files import gate_markdown, junit_xml, step_outputs, write_json
    from certsel.orchestrator.outputs.goals import goal_of

    cert = res.selection
    for row in res.rows:
        print(row.line(), flush=True)
    print(goal_of(cert).headline(cert), flush=True)
    if res.answered_by is not None:  # nothing ran: said whatever --quiet asks, as CI logs must show it
        print(folded(f"answered by the finished job {res.answered_by} (same configuration and data): no label bought "
                     "now (certsel gate --fresh runs it again)"), flush=True)
    for line in ledger_lines(cert):  # a gate without the ledger: said whatever --quiet asks
        print(line, flush=True)
    if not args.quiet:  # prose folded to the terminal (100 columns piped); paths and commands stay whole
        print(folded(cert.gate.note))
        for line in goal_of(cert).setting_lines(cert):  # what limited the answer (the budget)
            print(folded(line))
        if res.output_dir is not None:
            print(f"report: {short_path(res.output_dir / 'report.html')}  (certsel show {res.job_id} for the full "
                  "table)")
        if res.mlflow_run is not None:
            print(f"MLflow run: {res.mlflow_run}")
    if args.json is not None:
        write_json(cert, args.json, None if res.output_dir is None else
                   {"selection": str(res.output_dir / "selection.json"), "report": str(res.output_dir / "report.html")})
    if args.junit is not None:
        args.junit.write_text(junit_xml(cert))
    if args.summary is not None:
        with args.summary.open("a") as f:
            f.write(gate_markdown(cert))
    if args.outputs is not None:
        with args.outputs.open("a") as f:
            f.write(step_outputs(cert, None if res.output_dir is None else str(res.output_dir / "report.html")))
    return res.exit_code


def run_tasks(args, cfg, console, machine: bool, on_job) -> int:
    """``certsel run`` on a multi-task job: every task, then the combined certificate."""
    from certsel.orchestrator.outputs.tasks_outputs import tasks_certificate
    from certsel.orchestrator.commands.tasks_job import execute_tasks, finished_tasks_job

    if args.resume:
        raise ValueError("--resume names one job; a multi-task job resumes each task by itself (run it again)")
    done = None if args.output is not None or args.fresh else finished_tasks_job(cfg)
    if done is not None:  # the same multi-task job finished before: show it, buy nothing
        print(f"job {done.job_id} already finished with this configuration and data: its certificate, no label "
              "bought now (certsel run --fresh runs it again):", file=sys.stderr if machine else sys.stdout, flush=True)
        emit(args, console, machine, done.certificate, run_id=done.mlflow_run, output_dir=done.output)
        return 0
    res = execute_tasks(cfg, output=args.output, track=not args.no_tracking, on_job=on_job,
                        warn=lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True))
    emit(args, console, machine, tasks_certificate(res), tracking=res.tracking, output_dir=res.output_dir)
    return 0 if all(o.result.evaluated for o in res.tasks) else 1


def emit(args, console, machine: bool, cert: Certificate | TasksCertificate, **where) -> None:
    """A finished job's certificate: to ``--json``, and formatted on stdout or as the table."""
    from certsel.terminal import format_job, print_job

    if args.json:
        args.json.write_text(json.dumps(cert.as_json(), indent=2, allow_nan=False))
    if machine:
        print(format_job(cert, args.format))
    else:
        print_job(console, cert, args.quiet, **where)


def failures(cert: Certificate) -> str:
    """Why the candidates ended, for the one-line error when none could be evaluated."""
    reasons = list(dict.fromkeys(c.reason or c.status for c in cert.candidates))
    return "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more" if len(reasons) > 2 else "")
