"""The ``certsel`` command line.

``certsel select`` runs one certified selection on a recorded loss table (by default the
bundled TriviaQA table of 48 MX-quantized Llama-3.1-8B configurations): it draws n
human-labelled and r*n judge-labelled items, tests every candidate for R <= alpha with the
chosen scheme, applies the multiple-testing procedure and selects the certified candidate
with the smallest objective (average bitwidth). Bad input exits with status 2 and a
one-line error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

import numpy as np

from certsel import __version__

JUDGES = {"best": "loss_judge_best", "med": "loss_judge_med", "bad": "loss_judge_bad"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        self.exit(2, f"certsel: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    from certsel.policies import BETTING_STRATEGIES, PROCEDURES, SCHEMES
    from certsel.workers.replay import DEFAULT_TABLE

    p = _Parser(prog="certsel", description="Certified model / config / prompt selection.")
    p.add_argument("--version", action="version", version=f"certsel {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("select", help="certified selection on a recorded loss table")
    s.add_argument("--data", type=pathlib.Path, default=DEFAULT_TABLE, help="Parquet loss table")
    s.add_argument("--judge", default="best", help="judge column: best|med|bad or a column name")
    s.add_argument("--scheme", default="r-autoeval+", choices=sorted(SCHEMES))
    s.add_argument("--betting", default="up", choices=BETTING_STRATEGIES)
    s.add_argument("--procedure", default="fst", choices=PROCEDURES)
    s.add_argument("--alpha", type=float, default=0.1, help="target risk (default 0.1)")
    s.add_argument("--delta", type=float, default=0.1, help="error level (default 0.1)")
    s.add_argument("--n", type=int, default=300, help="human labels per candidate")
    s.add_argument("--r", type=int, default=3, help="judge-only labels per human label")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", type=pathlib.Path, help="write the certificate as JSON here")
    s.add_argument("--quiet", action="store_true", help="print only the selection")
    return p


def _fingerprint(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _select(args) -> dict:
    from certsel.orchestrator.local import candidate_intervals, replicated_selection
    from certsel.policies._validation import check_level
    from certsel.workers.replay import load_loss_table

    check_level(args.alpha, "--alpha")
    check_level(args.delta, "--delta")
    if args.n < 1 or args.r < 1:
        raise ValueError(f"--n and --r must be positive, got n={args.n}, r={args.r}")
    table = load_loss_table(args.data, judge=JUDGES.get(args.judge, args.judge))
    kw = dict(alpha=args.alpha, delta=args.delta, scheme=args.scheme, betting=args.betting)
    out = replicated_selection(table, n=args.n, r=args.r, reps=1, seed=args.seed, procedure=args.procedure, **kw)
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
        "data": {"path": str(args.data), "sha256_16": _fingerprint(args.data), "judge": table.judge_column},
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


def main(argv=None) -> int:
    args = _build_parser().parse_args(argv)
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
