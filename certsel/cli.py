"""The ``certsel`` command line.

``certsel run CONFIG.yaml`` runs a selection job (Ray actors per candidate, MLflow
tracking; see :mod:`certsel.orchestrator.commands.job`); ``certsel show RUN_ID`` prints a past
job's certificate. Bad input exits with status 2 and a one-line error.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import sys
import time
from typing import TYPE_CHECKING

from certsel._version import __version__
from certsel.errors import CertselError, first_line

if TYPE_CHECKING:
    from certsel.orchestrator.outputs.selection_schema import Selection, TasksSelection



class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        if message.startswith("unrecognized arguments") and "=" in message and "--" not in message.split(":", 1)[1]:
            message += " (to override a config key, write --set KEY=VALUE)"
        self.exit(2, f"certsel: error: {message}\n")


def _job_arguments(parser: argparse.ArgumentParser, config_help: str, set_example: str, *, seed_help: str | None = None):
    """The job file and its ``--set`` overrides, and ``--seed`` where the command draws its own samples."""
    parser.add_argument("config", type=pathlib.Path, help=config_help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a config key, e.g. --set {set_example} (repeatable)")
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=0, help=seed_help)


def _format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", default="table", choices=("table", "json", "csv", "markdown"),
                        help="table (default: for people, fitted to the terminal), json (selection.json), csv (a row "
                             "per candidate) or markdown; the formats other than table print only the result on stdout")


LOG_LEVELS = ("debug", "info", "warning", "error")


def _build_parser() -> argparse.ArgumentParser:
    # no heavy imports: `certsel --help` answers at once (registry names are checked when the command runs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="logging of certsel, Ray and MLflow on stderr (default: warning)")
    common.add_argument("--home", type=pathlib.Path, default=argparse.SUPPRESS, metavar="DIR",
                        help="certsel's home for this command: its jobs/ folder and MLflow store mlruns.db (default: "
                             "CERTSEL_HOME, else ~/.certsel; a job file's state.dir or tracking.uri still wins)")
    p = _Parser(prog="certsel", description="Certified model / config / prompt selection.", parents=[common])
    p.add_argument("--version", action="version", version=f"certsel {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, parents=[common], **k)
    run = sub.add_parser("run", help="run a selection job from a YAML config (Ray + MLflow)")
    _job_arguments(run, "job file, e.g. examples/quantization.yaml", "budget.n=100")
    run.add_argument("--json", type=pathlib.Path, help="also write selection.json here")
    run.add_argument("--output", "--report-dir", dest="output", type=pathlib.Path, metavar="DIR",
                     help="write report.html, selection.json, labels.parquet and the plots here (default: the job's "
                          "folder, STATE_DIR/JOB_ID; the path is printed at the end)")
    _format_argument(run)
    run.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.add_argument("--quiet", action="store_true", help="print only the selection")
    run.add_argument("--resume", metavar="JOB_ID", help="resume this unfinished job (its labels are not bought again)")
    run.add_argument("--fresh", action="store_true",
                     help="start a new job even if an unfinished one with this configuration exists")
    gt = sub.add_parser("gate", help="pass, fail or undecided for each candidate of a job, as CI needs it (exit 0 all "
                                     "pass, 1 any fail, 3 any undecided, 2 bad input)")
    _job_arguments(gt, "job file, as certsel run takes it (or an llm-compressor lmeval test config)", "budget.n=1000")
    gt.add_argument("--only", action="append", metavar="NAME", help="gate only this candidate (repeatable)")
    gt.add_argument("--compressed", metavar="MODEL",
                    help="an llm-compressor test config: the compressed checkpoint to gate (a folder or model id)")
    gt.add_argument("--base", metavar="MODEL",
                    help="an llm-compressor test config: the reference model (default: the config's model)")
    gt.add_argument("--json", type=pathlib.Path, metavar="PATH",
                    help="write the outcomes here: per candidate outcome, labels, reused, bound")
    gt.add_argument("--junit", type=pathlib.Path, metavar="PATH", help="write JUnit XML here (a test case per candidate)")
    gt.add_argument("--summary", type=pathlib.Path, metavar="PATH",
                    help="append a Markdown summary here (e.g. \"$GITHUB_STEP_SUMMARY\")")
    gt.add_argument("--output", type=pathlib.Path, metavar="DIR",
                    help="write report.html, selection.json and labels.parquet here (default: the job's folder)")
    gt.add_argument("--labels", type=pathlib.Path, metavar="PATH",
                    help="the label store, reused across runs (default: HOME/labels.db; a path CI caches)")
    gt.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    gt.add_argument("--fresh", action="store_true", help="run again even if this gate finished before")
    gt.add_argument("--quiet", action="store_true", help="print only the outcome lines")
    aud = sub.add_parser("audit", help="repeat a job's policy on its replay data: failure rates, coverage, FT-Eval")
    _job_arguments(aud, "a replay job file, e.g. examples/quantization.yaml", "policy.kind=r-eval",
                   seed_help="seed of the repetitions' item orders")
    aud.add_argument("--reps", type=int, default=1000, help="repetitions (random item orders; default 1000)")
    aud.add_argument("--workers", type=int, default=None,
                     help="processes for Seq / Cer-Eval repetitions (default: one per CPU; results do not depend on it)")
    aud.add_argument("--out", type=pathlib.Path, help="also write audit.json, audit.md and the plot here")
    aud.add_argument("--no-tracking", action="store_true", help="do not log an MLflow run")
    pl = sub.add_parser("plan", help="expected labels and cost of each policy for a replay job, from a pilot sample")
    _job_arguments(pl, "a replay job file with its costs: section", "costs.judge=0.01",
                   seed_help="seed of the pilot's draws (independent of the job's)")
    pl.add_argument("--pilot", type=int, default=50, help="pilot items per candidate (default 50)")
    show = sub.add_parser("show", help="print the certificate of a past job")
    show.add_argument("run_id", help="the job's id or MLflow run id, or a prefix of either (as certsel run prints "
                                     "them); a candidate's run id is looked up in MLflow")
    show.add_argument("--tracking-uri", help="look in this MLflow store (default: the job's folder in HOME/jobs, then "
                                             "MLFLOW_TRACKING_URI, else HOME/mlruns.db)")
    show.add_argument("--json", action="store_true", help="print selection.json as is (same as --format json)")
    _format_argument(show)
    sch = sub.add_parser("schema", help="print the JSON Schema of selection.json")
    sch.add_argument("--version-only", action="store_true", help="print only the schema version")
    jobs = sub.add_parser("jobs", help="list past jobs (their labels, reports and status), remove old ones")
    jobs.add_argument("state_dir", nargs="?", type=pathlib.Path, default=None,
                      help="the jobs folder (default: HOME/jobs; a job file's state.dir if it sets one)")
    jobs.add_argument("--remove", nargs="+", metavar="JOB_ID", default=[], help="delete these jobs' folders")
    jobs.add_argument("--clean", choices=("finished", "failed", "all"),
                      help="delete every job with this status (all: every job not running now)")
    lm = sub.add_parser("lm-eval-table", help="pair lm-evaluation-harness runs (--log_samples) into a loss table")
    lm.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                    help="a model's lm_eval --output_path (repeatable; the order given is the table's rank, "
                         "the fixed sequence of procedure fst)")
    lm.add_argument("--task", required=True, help="the lm-eval task name (as in samples_TASK_DATE.jsonl)")
    lm.add_argument("--metric", default=None, help="the per-document metric (default: the task's only one)")
    lm.add_argument("--filter", default=None, help="the lm-eval filter (default: the task's only one)")
    lm.add_argument("--reference", default=None, metavar="NAME",
                    help="a run to compare with: adds score_reference and loss_drop (for recovery or drop jobs)")
    lm.add_argument("--out", required=True, type=pathlib.Path, help="the table to write (.parquet, .csv or .jsonl)")
    it = sub.add_parser("inspect-table", help="pair inspect-ai logs (one per model or prompt) into a loss table")
    it.add_argument("logs", nargs="+", type=pathlib.Path, metavar="LOG_DIR_OR_FILE",
                    help="inspect logs (.eval or .json) or folders of them; the order given is the table's rank, "
                         "the fixed sequence of procedure fst")
    it.add_argument("--scorer", default=None, help="the scorer whose score is used (default: the task's first)")
    it.add_argument("--key", default=None, help="the key of a dict-valued score")
    it.add_argument("--out", required=True, type=pathlib.Path, help="the table to write (.parquet, .csv or .jsonl)")
    return p


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(highlight=False, stderr=stderr)


PROGRESS_EVERY = 5.0  # seconds between progress lines when the output is a pipe or a file


class _Lines:
    """Progress where a live bar cannot be drawn (a pipe, a file, CI's log): a plain line on
    stderr every :data:`PROGRESS_EVERY` seconds, no carriage returns; silent on a terminal."""

    def __init__(self, what: str, console):
        self.what, self.on = what, not console.is_terminal
        self.t0 = self.last = time.monotonic()

    def __call__(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.on and (force or now - self.last >= PROGRESS_EVERY):
            self.last = now
            print(f"{self.what}: {text} ({_duration(now - self.t0)})", file=sys.stderr, flush=True)


def _progress(console, total: int):
    """A live line: candidates certified / running / stopped and labels spent."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} human labels"),
                   TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("starting", total=total)
    piped = _Lines("certsel run", console)
    line = {"rounds": "starting", "servers": "", "t0": None}

    def show():
        bar.update(task, description=line["rounds"] + line["servers"])
        piped(line["rounds"] + line["servers"] + f", {int(bar.tasks[0].completed)} human labels")

    def stage(name):  # between rounds' lines: what the job is doing (Ray starting, the report, ...)
        if name == "rounds":
            line["t0"] = time.monotonic()
            name = "first round"
        line["rounds"] = f"{name} ..."
        show()

    def update(records, rounds):
        certified = sum(str(r.status) == "certified" for r in records)
        running = sum(not r.finished and r.n_human > 0 for r in records)
        settled = sum(r.finished for r in records)
        line["rounds"] = f"round {rounds}: {certified} certified, {running} running, {settled - certified} ended"
        if line["t0"] is not None and 0 < settled < len(records):
            left = (time.monotonic() - line["t0"]) / settled * (len(records) - settled)
            line["rounds"] += f", ~{_duration(left)} left"  # at the pace candidates have settled so far
        waiting = sum(r.waiting for r in records if not r.finished)
        if waiting:  # labels from people (an annotation queue): the job holds nothing while it waits
            line["rounds"] += f", waiting for {waiting} annotation{'s' if waiting > 1 else ''}"
        bar.update(task, completed=sum(r.n_human for r in records))
        show()

    def servers(status):  # the job's own model servers (live.serve): a wait for placement is shown
        line["servers"] = servers_text(status)
        show()

    update.servers = servers
    update.stage = stage
    return bar, update


def _duration(sec: float) -> str:
    return f"{sec:.0f} s" if sec < 90 else (f"{sec / 60:.0f} min" if sec < 5400 else f"{sec / 3600:.1f} h")


def servers_text(status: dict) -> str:
    """The progress line's part on the job's own servers: how many are up, and those awaiting placement (seconds)."""
    waiting = status.get("waiting") or {}
    text = f"; servers up: {len(status.get('up') or [])}"
    if waiting:
        text += "; waiting for placement: " + ", ".join(f"{n} ({s:.0f} s)" for n, s in sorted(waiting.items()))
    return text


def _run(args) -> int:
    from certsel.config import load_config
    from certsel.orchestrator.commands.job import execute
    from certsel.orchestrator.outputs.certificate import certificate_of

    cfg = load_config(args.config, args.overrides)
    if args.fresh:
        if args.resume:
            raise ValueError("--fresh and --resume exclude each other")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
    machine = args.format != "table"  # stdout holds only the formatted result
    console = _console(stderr=machine)

    def on_job(job):
        # what Ctrl-C prints: the same command, resuming this job (its labels are not bought again)
        words = ["certsel", "run", str(args.config), *(x for o in args.overrides for x in ("--set", o)),
                 *(["--home", str(args.home)] if getattr(args, "home", None) else []), "--resume", job.job_id]
        args.resume_command = shlex.join(words)
        # printed first: the job id is what a resume needs if this process dies
        verb = f"resuming job {job.job_id} (attempt {job.meta['attempts']})" if job.resumed else f"job {job.job_id}"
        if not args.quiet or job.resumed:
            print(f"{verb}: labels kept in {job.dir}", flush=True, file=sys.stderr if machine else sys.stdout)

    if cfg.tasks is not None and cfg.aggregate is None:
        return _run_tasks(args, cfg, console, machine, on_job)
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
            _emit(args, console, machine, done.certificate, run_id=done.mlflow_run, output_dir=done.output)
            return 0
    kw = {"output": args.output, "track": not args.no_tracking, "resume": args.resume, "on_job": on_job, "data": data,
          "warn": lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True),
          "check_outputs": [] if args.json is None else [(args.json, "--json")]}
    if args.no_progress:
        result, run_id = execute(cfg, **kw)
    else:
        bar, update = _progress(console, 0)
        with bar:
            def progress(records, rounds):
                if bar.tasks[0].total == 0:
                    bar.update(bar.tasks[0].id, total=cfg.budget.n * len(records))
                update(records, rounds)

            result, run_id = execute(cfg, progress=progress, on_servers=lambda st: update.servers(st),
                                     on_stage=update.stage, **kw)
    cert = certificate_of(result)
    _emit(args, console, machine, cert, run_id=run_id, tracking=result.tracking, output_dir=result.output_dir)
    if not result.evaluated:
        print(f"certsel: error: no candidate could be evaluated ({_failures(cert)})", file=sys.stderr)
        return 1
    return 0


def _gate(args) -> int:
    """``certsel gate``: a line per candidate, the files CI reads, and the gate's exit status."""
    from certsel.gates import gate
    from certsel.orchestrator.outputs.gate_files import gate_markdown, junit_xml, write_json
    from certsel.orchestrator.outputs.goals import goal_of
    from certsel.orchestrator.outputs.paths import output_file

    for path, opt in ((args.json, "--json"), (args.junit, "--junit"), (args.summary, "--summary")):
        if path is not None:
            output_file(path, opt)  # a folder that cannot be written is bad input, before anything runs
    res = gate(args.config, only=args.only, overrides=args.overrides, output=args.output,
               track=not args.no_tracking, fresh=args.fresh, compressed=args.compressed, base=args.base,
               labels=args.labels,
               warn=lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True))
    cert = res.selection
    for row in res.rows:
        print(row.line(), flush=True)
    print(goal_of(cert).headline(cert), flush=True)
    if res.answered_by is not None:  # nothing ran: said whatever --quiet asks, as CI logs must show it
        print(f"answered by the finished job {res.answered_by} (same configuration and data): no label bought now "
              "(certsel gate --fresh runs it again)", flush=True)
    if not args.quiet:
        print(cert.gate.note)
        if res.output_dir is not None:
            print(f"report: {res.output_dir / 'report.html'}  (certsel show {res.job_id} for the full table)")
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
    return res.exit_code


def _run_tasks(args, cfg, console, machine: bool, on_job) -> int:
    """``certsel run`` on a multi-task job: every task, then the combined certificate."""
    from certsel.orchestrator.outputs.multitask import tasks_certificate
    from certsel.orchestrator.commands.multitask import execute_tasks

    if args.resume:
        raise ValueError("--resume names one job; a multi-task job resumes each task by itself (run it again)")
    res = execute_tasks(cfg, output=args.output, track=not args.no_tracking, on_job=on_job,
                        warn=lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True))
    _emit(args, console, machine, tasks_certificate(res), tracking=res.tracking, output_dir=res.output_dir)
    return 0 if all(o.result.evaluated for o in res.tasks) else 1


def _emit(args, console, machine: bool, cert: Selection | TasksSelection, **where) -> None:
    """A finished job's certificate: to ``--json``, and formatted on stdout or as the table."""
    from certsel.terminal import format_job, print_job

    if args.json:
        args.json.write_text(json.dumps(cert.as_json(), indent=2, allow_nan=False))
    if machine:
        print(format_job(cert, args.format))
    else:
        print_job(console, cert, args.quiet, **where)


def _failures(cert: Selection) -> str:
    """Why the candidates ended, for the one-line error when none could be evaluated."""
    reasons = list(dict.fromkeys(c.reason or c.status for c in cert.candidates))
    return "; ".join(reasons[:2]) + (f"; and {len(reasons) - 2} more" if len(reasons) > 2 else "")


def _audit(args) -> int:
    import tempfile

    from certsel.config import load_config
    from certsel.orchestrator.audit.job import write_audit
    from certsel.orchestrator.commands.audit import audit
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.mlflow_store import precheck
    from certsel.orchestrator.outputs.tracking import log_audit

    cfg = load_config(args.config, args.overrides)
    if cfg.tasks is not None and cfg.aggregate is None:
        return _audit_tasks(args, cfg)
    data = load_job_data(cfg)
    cfg = data.policy_config(cfg)  # an aggregate is audited in its stacked table's units
    if data.table is None:
        raise ValueError(f"{args.config}: certsel audit needs a replay job (data:), whose table gives the true risks")
    if not args.no_tracking:
        precheck(cfg.tracking.uri)
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    # progress on stderr (stdout carries the Markdown table); silent when stderr is not a terminal
    bar = Progress(TextColumn("audit"), BarColumn(), MofNCompleteColumn(), TextColumn("repetitions"),
                   TimeRemainingColumn(), console=_console(stderr=True), transient=True)
    task = bar.add_task("audit", total=args.reps)
    piped = _Lines("certsel audit", bar.console)

    def progress(done, total):
        bar.update(task, completed=done, total=total)
        piped(f"{done}/{total} repetitions", force=done == total)

    with bar:
        result = audit(cfg, data, reps=args.reps, seed=args.seed, workers=args.workers, progress=progress)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_audit(result, args.out or tmp)
        run_id = None if args.no_tracking else log_audit(cfg, result, files)
    # plain Markdown on stdout (never wrapped at the terminal's width): it pastes into docs
    print(result.table())
    print()
    print(result.summary())
    if data.aggregate is not None:
        print(f"aggregate: the stacked test is audited in its own units (risks and alpha divided by M = "
              f"{data.unit:.4g}; R = M x the stacked risk)")
    if run_id:
        print(f"MLflow run: {run_id}")
    if args.out:
        print(f"written: {', '.join(str(f) for f in files)}")
    verdict = str(result.overall["verdict"])
    if verdict == "inconclusive":
        need = result.overall.get("reps_to_confirm")
        print(f"certsel: warning: {args.reps} repetitions are too few to confirm delta = {cfg.delta:g} at 99% "
              f"confidence{f' (about {need} would; --reps {need})' if need else ''}; exit status 3", file=sys.stderr)
    # 0: the guarantee is confirmed; 1: it failed on this data; 3: too few repetitions to tell
    return {"confirmed": 0, "failed": 1}.get(verdict, 3)


def _audit_tasks(args, cfg) -> int:
    """``certsel audit`` of a multi-task job (orchestrator/audit/multitask.py): Markdown on stdout."""
    import json as _json

    from certsel.orchestrator.audit.multitask import audit_tasks
    from certsel.orchestrator.inputs.stacked_tasks import load_tasks

    cfgs, datas = load_tasks(cfg)
    result = audit_tasks(cfg, cfgs, datas, reps=args.reps, seed=args.seed)
    print(result.table())
    print()
    print(result.summary())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "audit.md").write_text(result.table() + "\n\n" + result.summary() + "\n")
        (args.out / "audit.json").write_text(_json.dumps({"rows": result.rows, "overall": {
            k: (str(v) if k.endswith("verdict") else v) for k, v in result.overall.items()}}, indent=2, default=str))
        print(f"written: {args.out / 'audit.md'}, {args.out / 'audit.json'}")
    return {"confirmed": 0, "failed": 1}.get(str(result.overall["verdict"]), 3)


def _plan(args) -> int:
    from certsel.config import load_config
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.inputs.planning import plan, plan_table

    cfg = load_config(args.config, args.overrides)
    if cfg.tasks is not None and cfg.aggregate is None:
        raise ValueError(f"{args.config}: certsel plan sizes one job; plan each task's table as a job of its own")
    data = load_job_data(cfg)
    cfg = data.policy_config(cfg)  # an aggregate is planned in its stacked table's units (alpha / M)
    rows = plan(cfg, data, m=args.pilot, seed=args.seed)
    print(plan_table(cfg, rows, args.pilot))
    return 0


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _jobs(args) -> int:
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
    if args.remove or args.clean:
        freed = sum(remove_job(root, job_id) for job_id in dict.fromkeys(gone))
        print(f"removed {len(set(gone))} job(s) from {root}, {_size(freed)} freed")
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
        t.add_row(j.job_id, j.name, j.status, j.created.replace("T", " ")[:19], j.selected or "", _size(j.bytes),
                  "" if j.report is None else str(j.report))
    console = _console()
    if not console.is_terminal:
        console.width = 250
    console.print(t)
    return 0


def _schema(args) -> int:
    from certsel.orchestrator.outputs.selection_schema import SCHEMA_VERSION, json_schema

    print(SCHEMA_VERSION if args.version_only else json.dumps(json_schema(), indent=2))
    return 0


def _show(args) -> int:
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
    cert = _typed_certificate(raw, where)
    fmt = "json" if args.json else args.format
    if fmt != "table":
        print(format_job(cert, fmt))
    else:
        print_job(_console(), cert, False)
    return 0


def _typed_certificate(raw, where: str) -> Selection | TasksSelection:
    """A selection.json file's content as the typed certificate (a multi-task job's or one job's), or a one-line
    ``ValueError`` naming the file (``where``) and the first field that does not match the schema."""
    from pydantic import ValidationError

    from certsel.orchestrator.outputs.selection_schema import parse_any

    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not a certificate (a JSON {type(raw).__name__}, not an object)")
    try:
        return parse_any(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{where} does not match certsel's schema at "
                         f"{'.'.join(map(str, err['loc'])) or 'the top'}: {err['msg']}") from None


def _lm_eval_table(args) -> int:
    """``certsel lm-eval-table``: lm-eval runs of several models on one task as a loss table."""
    from certsel.orchestrator.inputs.lm_eval_logs import lm_eval_table
    from certsel.workers.tables import table_format

    runs = {}
    for item in args.run:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"--run {item!r} is not NAME=FOLDER")
        if name in runs:
            raise ValueError(f"--run: the name {name!r} is given twice")
        runs[name] = folder
    fmt = table_format(args.out)  # an unknown suffix fails before anything is read
    table, info = lm_eval_table(runs, args.task, metric=args.metric, flt=args.filter, reference=args.reference)
    _write_table(table, args.out, fmt)
    way = "higher is better" if info["higher_is_better"] else "lower is better: score = 1 - metric"
    print(f"wrote {args.out}: {len(info['runs'])} runs x {info['documents']} documents of {info['task']!r}, metric "
          f"{info['metric']!r} ({way}), filter {info['filter']!r}")
    recovery = None
    if info["reference"] is not None:
        recovery = (f"# or certify recovery against {info['reference']}: data: {{path: {args.out.name}, score: score, "
                    f"reference: score_reference, order: rank}}, recovery: {{at_least: 0.95, reference_name: "
                    f"{info['reference']}}}")
    _suggest_job(args.out, info["documents"], recovery)
    return 0


def _suggest_job(table: pathlib.Path, items: int, comment: str | None = None) -> None:
    """Write a job for a table just written (``NAME.job.yaml`` beside it) and print the command that runs it: a fixed
    sequence in the table's order, R-Eval (no judge), every item as the budget. A job file already there is kept."""
    job = table.with_name(table.name.split(".")[0] + ".job.yaml")
    if job.exists():
        print(f"certify with: certsel run {job}  (the job file already there, kept as it is)")
        return
    lines = [f"# certsel's suggestion for {table.name}: edit alpha (the risk, 1 - the mean score you need)",
             *([comment] if comment else []),
             f"name: {table.name.split('.')[0]}", f"data: {{path: {table.name}, human: loss, order: rank}}",
             "policy: {kind: r-eval}", "alpha: 0.2", "delta: 0.05", "procedure: fst", f"budget: {{n: {items}}}"]
    job.write_text("\n".join(lines) + "\n")
    print(f"certify with: certsel run {job}  (a fixed sequence in rank order at alpha 0.2: edit it to your claim)")


def _write_table(table, out: pathlib.Path, fmt: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "Parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif fmt in ("CSV", "TSV"):
        from pyarrow import csv

        csv.write_csv(table, out, csv.WriteOptions(delimiter="\t" if fmt == "TSV" else ","))
    else:
        out.write_text("\n".join(json.dumps(r) for r in table.to_pylist()) + "\n")


def _inspect_table(args) -> int:
    """``certsel inspect-table``: inspect-ai logs of several models or prompts as a loss table."""
    from certsel.inspect.logs import inspect_table
    from certsel.workers.tables import table_format

    fmt = table_format(args.out)  # an unknown suffix fails before anything is read
    table, info = inspect_table(args.logs, scorer=args.scorer, key=args.key)
    _write_table(table, args.out, fmt)
    print(f"wrote {args.out}: {len(info['candidates'])} candidates ({', '.join(info['candidates'])}) x "
          f"{info['samples']} samples, {info['scorer']}, score = mean over epochs {info['epochs']}")
    _suggest_job(args.out, info["samples"])
    return 0


# libraries whose debug output drowns certsel's (matplotlib: ~2,000 font lines): at warning whatever --log-level says
_NOISY = ("matplotlib", "PIL", "urllib3", "filelock", "asyncio", "httpcore", "httpx", "alembic", "git", "numba",
          "fsspec", "h5py", "graphviz", "opentelemetry")


def _logging(level: str | None) -> None:
    import logging

    level = (level or "warning").upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for name in _NOISY:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def main(argv=None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `certsel` alone: what it can do
        parser.print_help()
        return 2
    _logging(getattr(args, "log_level", None))
    if getattr(args, "home", None) is not None:  # read by every default (jobs folder, MLflow store) from here on
        from certsel.home import HOME_ENV

        os.environ[HOME_ENV] = str(args.home.expanduser().absolute())
    commands = {"run": _run, "gate": _gate, "show": _show, "audit": _audit, "plan": _plan, "jobs": _jobs, "schema": _schema,
                "lm-eval-table": _lm_eval_table, "inspect-table": _inspect_table}
    try:
        return commands[args.command](args)
    except CertselError as exc:  # InputError: 2 (nothing was started); JobError: 1 (runs marked FAILED)
        print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:  # a check of the command line itself
        print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = getattr(args, "resume_command", None)  # set once the job's folder exists
        print("certsel: interrupted (runs marked KILLED)" + (f"; resume with: {resume}" if resume else ""),
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`certsel schema | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # anything else once work started: the job failed
        print(f"certsel: error: job failed: {exc.__class__.__name__}: {first_line(exc, '')}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
