"""``certsel audit`` and ``certsel plan``: the policies checked by simulation, a job's labels predicted."""

from __future__ import annotations

import sys


from .progress import PlainLines, make_console


def audit_command(args) -> int:
    import tempfile

    from certsel.config import load_config
    from certsel.orchestrator.audit.job_audit import write_audit
    from certsel.orchestrator.commands.audit import audit
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.mlflow_store import precheck
    from certsel.orchestrator.outputs.tracking import log_audit

    cfg = load_config(args.config, args.overrides)
    if cfg.tasks is not None and cfg.aggregate is None:
        return audit_tasks_command(args, cfg)
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
                   TimeRemainingColumn(), console=make_console(stderr=True), transient=True)
    task = bar.add_task("audit", total=args.reps)
    piped = PlainLines("certsel audit", bar.console)

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


def audit_tasks_command(args, cfg) -> int:
    """``certsel audit`` of a multi-task job (orchestrator/audit/tasks_audit.py): Markdown on stdout."""
    import json as _json

    from certsel.orchestrator.audit.tasks_audit import audit_tasks
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


def plan_command(args) -> int:
    from certsel.config import load_config
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.engine.forecast import plan
    from certsel.orchestrator.inputs.planning import pilot, plan_table

    from .parser import PLAN_PILOT

    cfg = load_config(args.config, args.overrides)
    if cfg.tasks is not None and cfg.aggregate is None:
        raise ValueError(f"{args.config}: certsel plan sizes one job; plan each task's table as a job of its own")
    if args.sims < 1:
        raise ValueError(f"--sims must be at least 1, got {args.sims}")
    data = load_job_data(cfg)
    if data.table is None:
        raise ValueError("certsel plan needs a replay job (data:): its pilot comes from the loss table")
    m = min(PLAN_PILOT, data.table.human.shape[1]) if args.pilot is None else args.pilot
    items = pilot(data.table, m, args.seed)

    def variant(kind: str, r: int | None):
        """The job file with another policy, checked as the user's own file is."""
        other = load_config(args.config, [*args.overrides, f"policy.kind={kind}",
                                          *([] if r is None else [f"budget.r={r}"])])
        return other, load_job_data(other)

    rows, mine, skipped = plan(cfg, data, items, sims=args.sims, seed=args.seed, variant=variant)
    # an aggregate is shown in its stacked table's units (alpha / M), as its test runs
    print(plan_table(data.policy_config(cfg), rows, m, args.sims))
    for line in skipped:
        print(line)
    print(mine.line())
    return 0
