"""The ``certsel`` command line.

``certsel run CONFIG.yaml`` runs a selection job (Ray actors per candidate, MLflow
tracking; see :mod:`certsel.orchestrator.run.job`); ``certsel show RUN_ID`` prints a past
job's certificate. ``certsel select`` runs one certified selection on a recorded loss table (by default the
bundled TriviaQA table of 48 MX-quantized Llama-3.1-8B configurations): it draws n
human-labelled and r*n judge-labelled items, tests every candidate for R <= alpha with the
chosen scheme, applies the multiple-testing procedure and selects the certified candidate
with the smallest objective (average bitwidth). Bad input exits with status 2 and a
one-line error.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

from certsel import __version__
from certsel.errors import CertselError, first_line

JUDGES = {"best": "loss_judge_best", "med": "loss_judge_med", "bad": "loss_judge_bad"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        if message.startswith("unrecognized arguments") and "=" in message and "--" not in message.split(":", 1)[1]:
            message += " (to override a config key, write --set KEY=VALUE)"
        self.exit(2, f"certsel: error: {message}\n")


def _job_arguments(parser: argparse.ArgumentParser, config_help: str, set_example: str, *, seed_help: str | None = None):
    """The job file and its ``--set`` overrides (every command that reads a job file), and
    ``--seed`` where the command draws its own samples."""
    parser.add_argument("config", type=pathlib.Path, help=config_help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a config key, e.g. --set {set_example} (repeatable)")
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=0, help=seed_help)


def _build_parser() -> argparse.ArgumentParser:
    from certsel.policies.procedures import PROCEDURES
    from certsel.policies import SCHEMES, STRATEGIES
    from certsel.workers.replay import DEFAULT_TABLE

    p = _Parser(prog="certsel", description="Certified model / config / prompt selection.")
    p.add_argument("--version", action="version", version=f"certsel {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a selection job from a YAML config (Ray + MLflow)")
    _job_arguments(run, "job file, e.g. examples/quantization.yaml", "budget.n=100")
    run.add_argument("--json", type=pathlib.Path, help="also write selection.json here")
    run.add_argument("--report-dir", type=pathlib.Path, help="also keep the report and plots here")
    run.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.add_argument("--quiet", action="store_true", help="print only the selection")
    run.add_argument("--resume", metavar="JOB_ID", help="resume this unfinished job (its labels are not bought again)")
    run.add_argument("--fresh", action="store_true",
                     help="start a new job even if an unfinished one with this configuration exists")
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
    show.add_argument("run_id", help="MLflow run id of the job (or of one of its candidates)")
    show.add_argument("--tracking-uri", help="default: MLFLOW_TRACKING_URI, else sqlite:///mlruns.db")
    show.add_argument("--json", action="store_true", help="print selection.json as is")
    s = sub.add_parser("select", help="certified selection on a recorded loss table")
    s.add_argument("--data", type=pathlib.Path, default=DEFAULT_TABLE, help="Parquet loss table")
    s.add_argument("--judge", default="best", help="judge column: best|med|bad or a column name")
    s.add_argument("--scheme", default="r-autoeval+", choices=sorted(SCHEMES),
                   help="r-eval (human labels only), r-autoeval (judge with rho = 1), r-autoeval+ (default: "
                        "a mixture over reliance factors)")
    s.add_argument("--observation", default="split", choices=["split", "paper"],
                   help="split (default: two factors sharing each bet) or paper (eq. 10 of R-AutoEval+)")
    s.add_argument("--betting", default="up", choices=list(STRATEGIES),
                   help="betting strategy of the e-processes (default up: the universal portfolio)")
    s.add_argument("--procedure", default="fst", choices=[n for n, p in PROCEDURES.items() if p.testing],
                   help="multiple testing over candidates (default fst: fixed sequence in the table's order)")
    s.add_argument("--alpha", type=float, default=0.1, help="target risk (default 0.1)")
    s.add_argument("--delta", type=float, default=0.1, help="error level (default 0.1)")
    s.add_argument("--n", type=int, default=300, help="human labels per candidate")
    s.add_argument("--r", type=int, default=3, help="judge-only labels per human label")
    s.add_argument("--seed", type=int, default=0, help="seed of the item order (default 0)")
    s.add_argument("--json", type=pathlib.Path, help="write the certificate as JSON here")
    s.add_argument("--quiet", action="store_true", help="print only the selection")
    return p


def _select(args) -> dict:
    from certsel.orchestrator.inputs.jobdata import fingerprint
    from certsel.orchestrator.run.replicated import candidate_intervals, replicated_selection
    from certsel.policies._validation import check_level
    from certsel.workers.replay import load_loss_table

    check_level(args.alpha, "--alpha")
    check_level(args.delta, "--delta")
    if args.n < 1 or args.r < 1:
        raise ValueError(f"--n and --r must be positive, got n={args.n}, r={args.r}")
    table = load_loss_table(args.data, judge=JUDGES.get(args.judge, args.judge))
    kw = dict(alpha=args.alpha, delta=args.delta, scheme=args.scheme, betting=args.betting)
    out = replicated_selection(table, n=args.n, r=args.r, reps=1, seed=args.seed, procedure=args.procedure,
                               observation=args.observation, **kw)
    low, high = candidate_intervals(out, delta=args.delta, scheme=args.scheme, betting=args.betting)
    sel = int(out.selected[0])
    rows = [
        {
            "candidate": str(out.candidates[k]),
            "objective": float(out.objective[k]),
            "max_evalue": float(out.max_evalue[0, k]),
            "labels_to_certify": int(out.labels_to_certify[0, k]),
            "ci": [float(low[0, k]), float(high[0, k])],
            "certified": bool(out.certified[0, k]),
            "risk_on_full_table": float(out.true_risk[k]),
        }
        for k in range(out.candidates.size)
    ]
    return {
        "selected": rows[sel]["candidate"] if sel >= 0 else None,
        "selected_index": sel,
        "certificate": (
            f"R({rows[sel]['candidate']}) <= {args.alpha} with probability >= {1 - args.delta:g} "
            f"(family-wise over {out.candidates.size} candidates, {args.procedure})"
            if sel >= 0
            else "no candidate certified"
        ),
        "certified_set": [r["candidate"] for r in rows if r["certified"]],
        "procedure": args.procedure,
        "alpha": args.alpha,
        "delta": args.delta,
        "scheme": args.scheme,
        "betting": args.betting,
        "labels": {"human_per_candidate": args.n, "judge_per_candidate": args.r * args.n},
        "seed": args.seed,
        "data": {"path": str(args.data), "sha256_16": fingerprint(args.data), "judge": table.judge_column},
        "candidates": rows,
    }


def _print_report(report: dict, quiet: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=120)
    if not quiet:
        t = Table(title=f"{report['scheme']} / {report['betting']} / {report['procedure']}  "
                        f"alpha={report['alpha']} delta={report['delta']}")
        for col in ("candidate", "bits", "max E", "labels", f"{1 - report['delta']:g} CI", "certified", "R (full table)"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in report["candidates"]:
            t.add_row(
                r["candidate"], f"{r['objective']:.2f}", f"{r['max_evalue']:.3g}",
                str(r["labels_to_certify"] or "-"), f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]",
                "yes" if r["certified"] else "no", f"{r['risk_on_full_table']:.4f}",
            )
        console.print(t)
    if report["selected"] is None:
        console.print("selected: none (no candidate certified)")
    else:
        r = report["candidates"][report["selected_index"]]
        console.print(f"selected: {report['selected']} ({r['objective']:.2f} bits) — {report['certificate']}")
        console.print(f"labels: {report['labels']['human_per_candidate']} human + "
                      f"{report['labels']['judge_per_candidate']} judge per candidate")


def _console():
    from rich.console import Console

    return Console(highlight=False) if sys.stdout.isatty() else Console(width=150, highlight=False)


def _progress(console, total: int):
    """A live line: candidates certified / running / stopped and labels spent."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} human labels"),
                   TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("starting", total=total)

    def update(records, rounds):
        certified = sum(str(r.status) == "certified" for r in records)
        running = sum(not r.finished and r.n_human > 0 for r in records)
        ended = sum(r.finished for r in records) - certified
        text = f"round {rounds}: {certified} certified, {running} running, {ended} ended"
        bar.update(task, completed=sum(r.n_human for r in records), description=text)

    return bar, update


def _candidate_table(cert: dict):
    """The per-candidate table: the joint bound (what the certificate is about) first, then
    the bound of the candidate's own test at its level, the two-sided interval as a secondary
    column; the judge's agreement when there is one."""
    from rich.table import Table

    from certsel.orchestrator.outputs.certificate import bound_text, efficiency_cell, judge_cell

    p = cert["procedure"]
    alpha = p["alpha"]
    t = Table(title=f"{cert['job']}: {cert['policy']['kind']} / {p['level']}, alpha={alpha:g}")
    testing = any(c.get("e_value") is not None for c in cert["candidates"])
    judged = any(c.get("judge") for c in cert["candidates"])
    levels = {c["level"] for c in cert["candidates"] if c.get("upper_bound") is not None}
    cols = ["candidate", "objective", "status", "in set", *(["e-value / threshold"] if testing else []),
            "joint bound", "own bound" + (f" (level {next(iter(levels)):.3g})" if len(levels) == 1 else " @ level"),
            "estimate", "two-sided interval", "human", *(["to certify / min"] if testing else []),
            *(["judge agrees (kappa)"] if judged else [])]
    for c in cols:
        t.add_column(c, justify="right", no_wrap=True)
    for c in cert["candidates"]:
        ci = "" if c["ci"] is None else f"[{c['ci'][0]:.3f}, {bound_text(c['ci'][1])}]"
        ub = bound_text(c.get("upper_bound"), alpha)
        if ub and len(levels) > 1:
            ub += f" @ {c['level']:.3g}"
        est = "" if c.get("estimate") is None else f"{c['estimate']:.3f}"
        obj = "" if c["objective"] is None else f"{c['objective']:g}"
        row = [c["candidate"] + (" *" if c["selected"] else ""), obj, c["status"], "yes" if c["certified"] else "no"]
        if testing:
            row.append("" if c.get("e_value") is None else f"{c['e_value']:.3g} / {c.get('threshold', 0):.3g}")
        row += [bound_text(c.get("simultaneous_bound"), alpha), ub, est, ci, str(c["labels_human"])]
        if testing:
            row.append(efficiency_cell(c))
        if judged:
            row.append(judge_cell(c.get("judge")))
        t.add_row(*row, style="bold" if c["selected"] else None)
    return t


BOUNDS_LEGEND = ("joint bound: R <= it for every candidate at once, with probability >= {conf:g} (<= alpha exactly "
                 "for the certified set; blank: no statement). own bound: the one-sided bound that inverts the "
                 "candidate's own test at the level of its decision; a per-candidate statement, not adjusted for "
                 "the selection. to certify / min: human labels until certified against log(1/level) / KL_inf, the "
                 "fewest any test would need on average, estimated from its own labels (a rough guide).")


def _ranking_table(cert: dict):
    """A ranking as the partial order it certifies: per model its certified wins and losses."""
    from rich.table import Table

    rk = cert["ranking"]
    t = Table(title=f"{cert['job']}: {cert['policy']['kind']} / {cert['procedure']['level']} "
                    f"({rk['pairs_certified']} of {rk['pairs']} pair orders certified)")
    for c in ("model", "better than", "worse than", "possible winner", "mean loss", "items", "Copeland (uncertified)"):
        t.add_column(c, justify="right", no_wrap=True)
    worse = {m: sum(m in b for b in rk["better"].values()) for m in rk["order"]}
    rows = {c["candidate"]: c for c in cert["candidates"]}
    for m in rk["order"]:
        c = rows[m]
        est = "" if c.get("estimate") is None else f"{c['estimate']:.3f}"
        t.add_row(m, str(len(rk["better"][m])), str(worse[m]), "yes" if m in rk.get("possible_winners", ()) else "",
                  est, str(c["labels_human"]), f"{rk['score'][m]:+d}")
    return t


def _saved(fraction: float) -> str:
    """A saving in words; a ranking whose pairs drew different items can exceed its nominal budget."""
    return f"{fraction:.0%} saved" if fraction >= 0 else f"{-fraction:.0%} over: pairs drew different items"


def cost_line(costs: dict) -> str:
    """The spend in the user's unit: "cost: 1,432.5 USD (human 1,400, generation 12.5, judge 20) of 7,800 at full budget"."""
    s, u = costs["spent"], costs["unit"]
    parts = ", ".join(f"{k} {s[k]:,.4g}" for k in ("human", "generation", "judge") if s[k])
    return f"cost: {s['total']:,.6g} {u}" + (f" ({parts})" if parts else "") + \
        f" of {costs['full_budget']['total']:,.6g} {u} at full budget"


def evidence_line(ev: dict, alpha: float) -> str:
    """The selected candidate's own evidence, each number with the level it has."""
    from certsel.orchestrator.outputs.certificate import bound_text

    bits = [f"evidence: its own test gives R <= {bound_text(ev['upper_bound'], alpha)} (one-sided, at its level "
            f"{ev['level']:.3g}; not adjusted for the selection)"]
    if ev.get("e_value") is not None:
        bits.append(f"e-value {ev['e_value']:.3g} against its threshold {ev['threshold']:.3g}")
    bits.append(f"estimate {ev['estimate']:.3f} ({ev['estimate_note']})")
    if ev.get("certified_at_labels"):
        bits.append(f"certified after {ev['certified_at_labels']} human labels ({ev['labels_human']} bought"
                    + (f"; any test would need about {ev['labels_minimum_estimate']:.0f} on average, estimated from "
                       "its labels)" if ev.get("labels_minimum_estimate") else ")"))
    else:
        bits.append(f"{ev['labels_human']} human labels")
    return ", ".join(bits)


def _print_job(console, cert: dict, quiet: bool, run_id=None, tracking=None) -> None:
    if not quiet:
        if "ranking" in cert:
            console.print(_ranking_table(cert))
            console.print("possible winners (no other model is certified better): "
                          + ", ".join(cert["ranking"].get("possible_winners", [])), markup=False)
        else:
            console.print(_candidate_table(cert))
            console.print(BOUNDS_LEGEND.format(conf=1 - cert["procedure"]["delta"]), markup=False)
    for c in cert["candidates"]:
        if c["status"] in ("source failed", "worker lost"):
            console.print(f"{c['candidate']}: not certified ({c['reason']})", markup=False)
    console.print(f"selected: {cert['selected'] or 'none'} — {cert['certificate']}")
    ev = cert.get("evidence")
    if ev and ev.get("upper_bound") is not None:
        console.print(evidence_line(ev, cert["procedure"]["alpha"]), markup=False)
    lab = cert["labels"]
    console.print("labels: " + ", ".join(
        f"{lab['spent'][k]} {k} of {lab['full_budget'][k]} ({_saved(lab['saved_fraction'][k])})"
        for k in ("human", "judge", "requests") if lab["full_budget"][k]))
    if cert.get("costs"):
        console.print(cost_line(cert["costs"]), markup=False)
    if cert.get("resume"):
        r = cert["resume"]
        console.print(f"resumed from round {r['from_round']}: {r['steps_from_snapshots']} candidate steps from "
                      f"snapshots, {r['steps_replayed']} replayed from the label log, no label bought twice")
    if cert.get("recovered") and cert["recovered"]["hosts"]:
        r = cert["recovered"]
        console.print(f"workers rebuilt after a crash: {r['hosts']} ({r['steps_from_snapshots']} candidate steps "
                      f"from snapshots, {r['steps_replayed']} replayed from the label log)")
    if run_id:
        console.print(f"MLflow run: {run_id}  (certsel show {run_id[:8]})")
    if tracking:
        console.print(f"MLflow UI: mlflow ui --backend-store-uri {tracking['uri']}, then "
                      f"http://127.0.0.1:5000/#/experiments/{tracking['experiment_id']}/runs/{tracking['run_id']}",
                      markup=False, soft_wrap=True)


def _run(args) -> int:
    from certsel.config import load_config
    from certsel.orchestrator.run.job import execute
    from certsel.orchestrator.outputs.report import certificate

    cfg = load_config(args.config, args.overrides)
    if args.fresh:
        if args.resume:
            raise ValueError("--fresh and --resume exclude each other")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"resume": "never"})})
    console = _console()

    def on_job(job):
        # printed first: the job id is what a resume needs if this process dies
        verb = f"resuming job {job.job_id} (attempt {job.meta['attempts']})" if job.resumed else f"job {job.job_id}"
        if not args.quiet or job.resumed:
            print(f"{verb}: labels kept in {job.dir}", flush=True)

    kw = {"report_dir": args.report_dir, "track": not args.no_tracking, "resume": args.resume, "on_job": on_job,
          "warn": lambda line: print(f"certsel: {line}", file=sys.stderr, flush=True)}
    if args.no_progress:
        result, run_id = execute(cfg, **kw)
    else:
        bar, update = _progress(console, 0)
        with bar:
            def progress(records, rounds):
                if bar.tasks[0].total == 0:
                    bar.update(bar.tasks[0].id, total=cfg.budget.n * len(records))
                update(records, rounds)

            result, run_id = execute(cfg, progress=progress, **kw)
    cert = certificate(result)
    if args.json:
        args.json.write_text(json.dumps(cert, indent=2))
    _print_job(console, cert, args.quiet, run_id, result.tracking)
    return 0


def _audit(args) -> int:
    import tempfile

    from certsel.config import load_config
    from certsel.orchestrator.audit.job import audit, write_audit
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.outputs.tracking import log_audit, precheck

    cfg = load_config(args.config, args.overrides)
    data = load_job_data(cfg)
    if data.table is None:
        raise ValueError(f"{args.config}: certsel audit needs a replay job (data:), whose table gives the true risks")
    if not args.no_tracking:
        precheck(cfg.tracking.uri)
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    result = audit(cfg, data, reps=args.reps, seed=args.seed, workers=args.workers)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_audit(result, args.out or tmp)
        run_id = None if args.no_tracking else log_audit(cfg, result, files)
    # plain Markdown on stdout (never wrapped at the terminal's width): it pastes into docs
    print(result.table())
    print()
    print(result.summary())
    if run_id:
        print(f"MLflow run: {run_id}")
    # 0: the guarantee is confirmed; 1: it failed on this data; 3: too few repetitions to tell
    return {"confirmed": 0, "failed": 1}.get(str(result.overall["verdict"]), 3)


def _plan(args) -> int:
    from certsel.config import load_config
    from certsel.orchestrator.inputs.sources import load_job_data
    from certsel.orchestrator.inputs.planning import plan, plan_table

    cfg = load_config(args.config, args.overrides)
    rows = plan(cfg, load_job_data(cfg), m=args.pilot, seed=args.seed)
    print(plan_table(cfg, rows, args.pilot))
    return 0


def _show(args) -> int:
    from certsel.orchestrator.outputs.tracking import load_certificate

    cert = load_certificate(args.run_id, args.tracking_uri)
    if args.json:
        print(json.dumps(cert, indent=2))
    else:
        _print_job(_console(), cert, False)
    return 0


def main(argv=None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command in ("run", "show", "audit", "plan"):
        try:
            return {"run": _run, "show": _show, "audit": _audit, "plan": _plan}[args.command](args)
        except CertselError as exc:  # InputError: 2 (nothing was started); JobError: 1 (runs marked FAILED)
            print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
            return exc.exit_code
        except ValueError as exc:  # a check of the command line itself
            print(f"certsel: error: {first_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("certsel: interrupted (runs marked KILLED)", file=sys.stderr)
            return 130
        except Exception as exc:  # anything else once work started: the job failed
            print(f"certsel: error: job failed: {exc.__class__.__name__}: {first_line(exc, '')}", file=sys.stderr)
            return 1
    try:
        report = _select(args)
    except ValueError as exc:
        print(f"certsel: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=lambda o: np.asarray(o).tolist()))
    _print_report(report, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
