"""The command line's arguments: one parser, its subcommands and their options (no heavy imports)."""

from __future__ import annotations

import argparse
import pathlib
import re

from certsel._version import __version__

# certsel plan's pilot items per candidate without --pilot (a replay table gives them for free; fewer items: all of them).
# A job's labels go mostly to candidates near their threshold, which 200 items cannot place: the forecast then follows
# where the pilot's draw put them (docs/results.md, "plan", measures both sizes over several draws)
PLAN_PILOT = 1000
# its simulated runs without --sims: a job's labels vary by a third from run to run where they hinge on a candidate near
# its threshold (prompts.yaml), so 8 runs left the forecast's mean about 12% uncertain
PLAN_SIMS = 16


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        if message.startswith("unrecognized arguments") and "=" in message and "--" not in message.split(":", 1)[1]:
            message += " (to override a config key, write --set KEY=VALUE)"
        self.exit(2, f"certsel: error: {message}\n")


def a_path(text: str, hint: str = "an unset variable?") -> pathlib.Path:
    """A path argument; an empty one is refused, not read as the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path ({hint})")
    return pathlib.Path(text)


def summary_path(text: str) -> pathlib.Path:
    """``--summary "$GITHUB_STEP_SUMMARY"`` outside GitHub Actions is an empty path: said so."""
    return a_path(text, "is $GITHUB_STEP_SUMMARY unset? GitHub Actions sets it on its runners only")


def outputs_path(text: str) -> pathlib.Path:
    """``--outputs "$GITHUB_OUTPUT"`` outside GitHub Actions is an empty path: said so."""
    return a_path(text, "is $GITHUB_OUTPUT unset? GitHub Actions sets it on its runners only")


SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12}


def size_bytes(text: str) -> int:
    """A size: a number of bytes, or with a unit (500MB, 2GB, 100k; decimal units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).lower() not in SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 500MB, 2GB)")
    return int(float(m.group(1)) * SIZE_UNITS[m.group(2).lower()])


def job_arguments(parser: argparse.ArgumentParser, config_help: str, set_example: str, *, seed_help: str | None = None):
    """The job file and its ``--set`` overrides, and ``--seed`` where the command draws its own samples."""
    parser.add_argument("config", type=a_path, help=config_help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a config key, e.g. --set {set_example} (repeatable)")
    if seed_help is not None:
        parser.add_argument("--seed", type=int, default=0, help=seed_help)


def format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", default="table", choices=("table", "json", "csv", "markdown"),
                        help="table (default: for people, fitted to the terminal), json (selection.json), csv (a row "
                             "per candidate) or markdown; the formats other than table print only the result on stdout")


LOG_LEVELS = ("debug", "info", "warning", "error")


def build_parser() -> argparse.ArgumentParser:
    # no heavy imports: `certsel --help` answers at once (registry names are checked when the command runs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help="logging of certsel, Ray and MLflow on stderr (default: warning)")
    common.add_argument("--home", type=a_path, default=argparse.SUPPRESS, metavar="DIR",
                        help="certsel's home for this command: its jobs/ folder and MLflow store mlruns.db (default: "
                             "CERTSEL_HOME, else ~/.certsel; a job file's state.dir or tracking.uri still wins)")
    p = Parser(prog="certsel", description="Certified model / config / prompt selection.", parents=[common])
    p.add_argument("--version", action="version", version=f"certsel {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, parents=[common], **k)
    run = sub.add_parser("run", help="run a selection job from a YAML config (Ray + MLflow)")
    job_arguments(run, "job file, e.g. examples/quantization.yaml", "budget.n=100")
    run.add_argument("--json", type=a_path, help="also write selection.json here")
    run.add_argument("--output", "--report-dir", dest="output", type=a_path, metavar="DIR",
                     help="write report.html, selection.json, labels.parquet and the plots here (default: the job's "
                          "folder, STATE_DIR/JOB_ID; the path is printed at the end)")
    format_argument(run)
    run.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    run.add_argument("--runtime", choices=("auto", "local", "ray"),
                    help="where the candidates run (the job's runtime: key): auto (default) runs a recorded table "
                         "in-process and live models, lm-eval and clusters on Ray; the certificate is the same")
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.add_argument("--quiet", action="store_true", help="print only the selection")
    run.add_argument("--resume", metavar="JOB_ID", help="resume this unfinished job (its labels are not bought again)")
    run.add_argument("--fresh", action="store_true",
                     help="start a new job even if an unfinished one with this configuration exists")
    gt = sub.add_parser("gate", help="pass, fail or undecided for each candidate of a job, as CI needs it (exit 0 all "
                                     "pass, 1 any fail, 3 any undecided, 2 bad input)")
    job_arguments(gt, "job file, as certsel run takes it (or an llm-compressor lmeval test config)", "budget.n=1000")
    gt.add_argument("--only", action="append", metavar="NAME", help="gate only this candidate (repeatable)")
    gt.add_argument("--compressed", metavar="MODEL",
                    help="an llm-compressor test config: the compressed checkpoint to gate (a folder or model id)")
    gt.add_argument("--base", metavar="MODEL",
                    help="an llm-compressor test config: the reference model (default: the config's model)")
    gt.add_argument("--json", type=a_path, metavar="PATH",
                    help="write the outcomes here: per candidate outcome, labels, reused, bound")
    gt.add_argument("--junit", type=a_path, metavar="PATH", help="write JUnit XML here (a test case per candidate)")
    gt.add_argument("--summary", type=summary_path, metavar="PATH",
                    help="append a Markdown summary here (e.g. \"$GITHUB_STEP_SUMMARY\")")
    gt.add_argument("--outputs", type=outputs_path, metavar="PATH",
                    help="append NAME=VALUE lines here (exit-code, passed, failed, undecided, delta, job-id, report; "
                         "e.g. \"$GITHUB_OUTPUT\")")
    gt.add_argument("--output", type=a_path, metavar="DIR",
                    help="write report.html, selection.json and labels.parquet here (default: the job's folder)")
    gt.add_argument("--labels", type=a_path, metavar="PATH",
                    help="the label store, reused across runs (default: HOME/labels.db; a path CI caches)")
    gt.add_argument("--baseline", metavar="NAME",
                    help="a regression gate: compare each candidate with this one on the same items (a candidate of "
                         "the table); pass: score >= the baseline's - --margin")
    gt.add_argument("--margin", type=float, metavar="M",
                    help="the regression gate's margin in score points, in [0, 1) (default 0)")
    gt.add_argument("--superiority", action="store_true",
                    help="a regression gate's pass is score >= the baseline's + --margin (better, not only not worse)")
    gt.add_argument("--series", metavar="NAME",
                    help="gate a release of this series: release k is gated at delta / (k (k + 1)), so the error over "
                         "every release of the series is at most delta")
    gt.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    gt.add_argument("--runtime", choices=("auto", "local", "ray"),
                    help="where the candidates run (the job's runtime: key): auto (default) runs a recorded table "
                         "in-process and live models, lm-eval and clusters on Ray; the certificate is the same")
    gt.add_argument("--fresh", action="store_true", help="run again even if this gate finished before")
    gt.add_argument("--quiet", action="store_true", help="print only the outcome lines")
    aud = sub.add_parser("audit", help="repeat a job's policy on its replay data: failure rates, coverage, FT-Eval")
    job_arguments(aud, "a replay job file, e.g. examples/quantization.yaml", "policy.kind=r-eval",
                   seed_help="seed of the repetitions' item orders")
    aud.add_argument("--reps", type=int, default=1000, help="repetitions (random item orders; default 1000)")
    aud.add_argument("--workers", type=int, default=None,
                     help="processes for Seq / Cer-Eval repetitions (default: one per CPU; results do not depend on it)")
    aud.add_argument("--out", type=a_path, help="also write audit.json, audit.md and the plot here")
    aud.add_argument("--no-tracking", action="store_true", help="do not log an MLflow run")
    pl = sub.add_parser("plan", help="expected labels and cost of each policy for a replay job, from a pilot sample")
    job_arguments(pl, "a replay job file with its costs: section", "costs.judge=0.01",
                   seed_help="seed of the pilot's draws (independent of the job's)")
    pl.add_argument("--pilot", type=int, default=None,
                    help=f"pilot items per candidate (default {PLAN_PILOT}, or every item of a smaller table)")
    pl.add_argument("--sims", type=int, default=PLAN_SIMS,
                    help=f"simulated runs of the job for each policy, on the same tables drawn from the pilot (default "
                         f"{PLAN_SIMS})")
    show = sub.add_parser("show", help="print the certificate of a past job")
    show.add_argument("run_id", help="the job's id or MLflow run id, or a prefix of either (as certsel run prints "
                                     "them); a candidate's run id is looked up in MLflow")
    show.add_argument("--tracking-uri", help="look in this MLflow store (default: the job's folder in HOME/jobs, then "
                                             "MLFLOW_TRACKING_URI, else HOME/mlruns.db)")
    show.add_argument("--json", action="store_true", help="print selection.json as is (same as --format json)")
    format_argument(show)
    sch = sub.add_parser("schema", help="print the JSON Schema of selection.json")
    sch.add_argument("--version-only", action="store_true", help="print only the schema version")
    jobs = sub.add_parser("jobs", help="list past jobs (their labels, reports and status), remove old ones")
    jobs.add_argument("state_dir", nargs="?", type=a_path, default=None,
                      help="the jobs folder (default: HOME/jobs; a job file's state.dir if it sets one)")
    jobs.add_argument("--remove", nargs="+", metavar="JOB_ID", default=[], help="delete these jobs' folders")
    jobs.add_argument("--clean", choices=("finished", "failed", "all"),
                      help="delete every job with this status (all: every job not running now)")
    jobs.add_argument("--max-size", type=size_bytes, metavar="SIZE",
                      help="delete finished and failed jobs, oldest first, until the jobs folder holds at most SIZE "
                           "(e.g. 500MB, 2GB); jobs that can resume are kept, and so is the label store")
    lm = sub.add_parser("lm-eval-table", help="pair lm-evaluation-harness runs (--log_samples) into a loss table")
    lm.add_argument("--run", action="append", required=True, metavar="NAME=FOLDER",
                    help="a model's lm_eval --output_path (repeatable; the order given is the table's rank, "
                         "the fixed sequence of procedure fst)")
    lm.add_argument("--task", required=True, help="the lm-eval task name (as in samples_TASK_DATE.jsonl)")
    lm.add_argument("--metric", default=None, help="the per-document metric (default: the task's only one)")
    lm.add_argument("--filter", default=None, help="the lm-eval filter (default: the task's only one)")
    lm.add_argument("--reference", default=None, metavar="NAME",
                    help="a run to compare with: adds score_reference and loss_drop (for recovery or drop jobs)")
    lm.add_argument("--out", required=True, type=a_path, help="the table to write (.parquet, .csv or .jsonl)")
    it = sub.add_parser("inspect-table", help="pair inspect-ai logs (one per model or prompt) into a loss table")
    it.add_argument("logs", nargs="+", type=a_path, metavar="LOG_DIR_OR_FILE",
                    help="inspect logs (.eval or .json) or folders of them; the order given is the table's rank, "
                         "the fixed sequence of procedure fst")
    it.add_argument("--scorer", default=None, help="the scorer whose score is used (default: the task's first)")
    it.add_argument("--key", default=None, help="the key of a dict-valued score")
    it.add_argument("--out", required=True, type=a_path, help="the table to write (.parquet, .csv or .jsonl)")
    return p
