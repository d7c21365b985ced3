"""Family-wise error of multi-task certificates at the boundary (intersection-union).

Designs on the bundled Instruction-Induction tables (sentiment, larger_animal, sum; template
slots as candidates):

* **boundary** (FST, the full delta per candidate): the first slot in the sequence sits exactly
  at the target of one task (alpha = its risk there minus 1e-9, so it is a null by a hair) and
  comfortably below the targets of the other two; a repetition fails when that slot (or any
  later null) is certified. This is the least favourable case: the combined e-value is at most
  the boundary task's e-value, so the failure rate is that one test's type-I error;
* **medians** (Bonferroni and Holm over 25 slots): every task's alpha at the median risk of the
  slots minus 1e-9, so about half of the slots miss each task and the nulls of a task sit at its
  boundary.

Each line: the measured family-wise failure with its 99% Clopper-Pearson upper bound, and the
mean number of slots certified (on every task).

A second table does the same for **aggregate** jobs (``aggregate: {weights: equal | size}``):
one test on the stacked tables at alpha / M, the null being a weighted risk sum_t w_t R_t above
alpha. Boundary: the slot with the lowest weighted risk first in a fixed sequence, alpha = its
weighted risk minus 1e-9; medians: alpha = the median weighted risk minus 1e-9, Bonferroni.

    python benchmarks/multitask_fwer.py --reps 1000
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASKS = ("sentiment", "larger_animal", "sum")
SLOTS = [f"prompt_{k:03d}" for k in range(0, 100, 4)]


def risks() -> dict:
    import pyarrow.parquet as pq

    out = {}
    for t in TASKS:
        d = pq.read_table(ROOT / "examples" / "data" / f"prompts_{t}.parquet", columns=["candidate", "loss_human"])
        m = d.group_by("candidate").aggregate([("loss_human", "mean")]).to_pydict()
        by = dict(zip(m["candidate"], m["loss_human_mean"], strict=True))
        out[t] = np.array([by[s] for s in SLOTS])
    return out


def job(alphas: dict, candidates: list, procedure: str, policy: dict, n: int) -> dict:
    return {"name": "fwer", "tasks": [{"name": t, "data": {"path": str(ROOT / "examples" / "data" / f"prompts_{t}.parquet"),
                                                            "judge": "loss_judge_icl5"}, "alpha": float(alphas[t])}
                                      for t in TASKS],
            "candidates": candidates, "order": candidates if procedure == "fst" else None, "policy": policy,
            "procedure": procedure, "delta": 0.1, "budget": {"n": n, "r": 3},
            **({} if procedure == "fst" else {"objective": {"column": "prompt_len"}})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--n", type=int, default=250)
    args = ap.parse_args(argv)

    from certsel.config import parse_config
    from certsel.orchestrator.audit.tasks_audit import audit_tasks
    from certsel.orchestrator.inputs.stacked_tasks import load_tasks

    R = risks()
    print(f"{args.reps} repetitions, n = {args.n} human labels per candidate and task, delta = 0.1")
    print("| design | policy | procedure | boundary | family-wise failure | 99% CP upper | mean certified |")
    print("|---|---|---|---|---|---|---|")
    for policy in ({"kind": "r-eval"}, {"kind": "r-autoeval+"}):
        rows = []
        for t_star in TASKS:  # boundary: slot j at the boundary of t_star, good elsewhere
            others = [t for t in TASKS if t != t_star]
            j = int(np.argmin(np.max([R[t] for t in others], axis=0)))  # the slot best on the other tasks
            alphas = {t: min(0.95, R[t][j] + 0.15) for t in others}
            alphas[t_star] = R[t_star][j] - 1e-9
            rest = [s for s in SLOTS if s != SLOTS[j]][:4]
            rows.append(("boundary", "fst", f"{SLOTS[j]} on {t_star} (R = {R[t_star][j]:.3f})",
                         job(alphas, [SLOTS[j], *rest], "fst", policy, args.n)))
        med = {t: float(np.median(R[t])) - 1e-9 for t in TASKS}
        for proc in ("bonferroni", "holm"):
            rows.append(("medians", proc, ", ".join(f"{t} {med[t]:.3f}" for t in TASKS), job(med, SLOTS, proc, policy,
                                                                                          args.n)))
        for design, proc, where, raw in rows:
            t0 = time.perf_counter()
            cfg = parse_config(raw)
            cfgs, datas = load_tasks(cfg)
            au = audit_tasks(cfg, cfgs, datas, reps=args.reps, seed=1)
            ov = au.overall
            print(f"| {design} | {policy['kind']} | {proc} | {where} | {ov['familywise_failure']:.4f} | "
                  f"{ov['failure_upper']:.4f} | {ov['mean_certified']:.2f} |  <!-- {time.perf_counter() - t0:.0f} s -->")
    aggregate_rows(R, args.reps, args.n)
    return 0


def aggregate_rows(R: dict, reps: int, n: int) -> None:
    """The aggregate designs (module docstring), audited as the one job they are."""
    from certsel.config import parse_config
    from certsel.orchestrator.audit.job_audit import audit
    from certsel.orchestrator.inputs.sources import load_job_data

    sizes = {}
    for t in TASKS:
        import pyarrow.parquet as pq

        sizes[t] = pq.read_metadata(ROOT / "examples" / "data" / f"prompts_{t}.parquet").num_rows // 100
    print()
    print(f"Aggregate jobs: {reps} repetitions, n = {n} human labels per candidate on the stacked tables, delta = 0.1")
    print("| weights | M | policy | procedure | boundary | family-wise failure | 99% CP upper | mean certified |")
    print("|---|---|---|---|---|---|---|---|")
    for weights in ("equal", "size"):
        w = np.ones(len(TASKS)) if weights == "equal" else np.array([sizes[t] for t in TASKS], dtype=float)
        w /= w.sum()
        weighted = sum(wt * R[t] for wt, t in zip(w, TASKS, strict=True))
        j = int(np.argmin(weighted))
        rest = [s for s in SLOTS if s != SLOTS[j]][:4]
        med = float(np.median(weighted)) - 1e-9
        for policy in ({"kind": "r-eval"}, {"kind": "r-autoeval+"}):
            designs = [("fst", f"{SLOTS[j]} (R = {weighted[j]:.3f})", weighted[j] - 1e-9, [SLOTS[j], *rest]),
                       ("bonferroni", f"median R = {med:.3f}", med, SLOTS)]
            for proc, where, alpha, cands in designs:
                raw = job({t: 0.5 for t in TASKS}, cands, proc, policy, n)
                for t in raw["tasks"]:
                    t.pop("alpha")
                raw.update(alpha=float(alpha), aggregate={"weights": weights})
                t0 = time.perf_counter()
                cfg = parse_config(raw)
                data = load_job_data(cfg)
                ov = audit(data.policy_config(cfg), data, reps=reps, seed=1).overall
                print(f"| {weights} | {data.unit:.3f} | {policy['kind']} | {proc} | {where} | "
                      f"{ov['familywise_failure']:.4f} | {ov['failure_upper']:.4f} | {ov['mean_certified']:.2f} |  "
                      f"<!-- {time.perf_counter() - t0:.0f} s -->")


if __name__ == "__main__":
    sys.exit(main())
