"""Driver throughput with the replay source: label events per second through the actors.

A label event is one loss delivered to a policy: a human label, the judge's label on the
same item, or a judge-only label. The load is the heaviest the driver sees: R-AutoEval+
(UP betting, 10 reliance factors), Bonferroni with every candidate running to its full
budget (``scheduling.mode: full``), n = 300 human and r n = 900 judge-only labels per
candidate, 25 human labels per candidate per round. Three ways to run the same job:

* ``direct``: the policies called in-process on all candidates at once
  (:func:`certsel.policies.log_evalue_paths`, vectorised: the floor on the statistics' cost);
* ``in-process driver``: the driver's rounds with candidates hosted in this process;
* ``Ray driver``: the same rounds through ``CandidateWorker`` actors on a local Ray
  (``ray.init(num_cpus=2)``, one actor per CPU).

Candidates: the 48 real TriviaQA configurations, and 500 candidates drawn from them
(each a random real configuration's losses on a fresh random subset of items).

    python benchmarks/bench_driver.py
"""

from __future__ import annotations

import tempfile
import pathlib
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from certsel.config import parse_config
from certsel.orchestrator.engine.driver import LocalRuntime, RayRuntime, run_job
from certsel.orchestrator.inputs.sources import load_job_data
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))  # the tests' reference
from helpers.replicated import replicated_selection  # noqa: E402
from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

N, R, BATCH = 300, 3, 25


def make_500(path, k=500, items=2000, seed=0):
    base = load_loss_table(DEFAULT_TABLE, judge="loss_judge_best")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, base.candidates.size, k)
    cols = {"candidate": [], "item": [], "loss_human": [], "loss_judge": [], "size": []}
    for c in range(k):
        pick = rng.choice(base.items.size, items, replace=False)
        cols["candidate"].append(np.full(items, f"cand_{c:03d}"))
        cols["item"].append(np.arange(items))
        cols["loss_human"].append(base.human[src[c], pick])
        cols["loss_judge"].append(base.judge[src[c], pick])
        cols["size"].append(np.full(items, base.objective[src[c]]))
    pq.write_table(pa.table({k: np.concatenate(v) for k, v in cols.items()}), path)


def cfg_for(path, judge, objective):
    return parse_config({
        "data": {"path": str(path), "judge": judge}, "policy": {"kind": "r-autoeval+", "betting": "up"},
        "procedure": "bonferroni", "objective": {"column": objective},
        "budget": {"n": N, "r": R, "batch": BATCH}, "scheduling": {"mode": "full"},
        "tracking": {"intervals": "none"}, "seed": 0,
    })


def events(res) -> int:
    return res.spent["human"] + res.spent["judge"]


def bench(name, cfg, rt_ray):
    data = load_job_data(cfg)
    K = len(data.names)
    t = time.perf_counter()
    direct = replicated_selection(data.table, n=N, r=R, reps=1, seed=0, procedure="bonferroni")
    t_direct = time.perf_counter() - t
    t = time.perf_counter()
    res_local = run_job(cfg, data, LocalRuntime(1), n_hosts=1, collect_labels=False)
    t_local = time.perf_counter() - t
    run_job(cfg, data, rt_ray, collect_labels=False)  # warm the actors (imports, first load)
    t = time.perf_counter()
    res_ray = run_job(cfg, data, rt_ray, collect_labels=False)
    t_ray = time.perf_counter() - t
    ev = events(res_ray)
    assert ev == events(res_local) == K * N * (2 + R)
    assert res_ray.certified == res_local.certified == [data.names[k] for k in np.flatnonzero(direct.certified[0])]
    return (f"| {name} | {K} | {ev:,} | {ev / t_direct:,.0f} | {ev / t_local:,.0f} | {ev / t_ray:,.0f} | "
            f"{t_ray / t_local:.2f} | {t_ray / t_direct:.2f} | {res_ray.rounds} |")


def main() -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rt = RayRuntime()
    print("| candidates | K | label events | direct (events/s) | in-process driver (events/s) | "
          "Ray driver (events/s) | Ray / in-process time | Ray / direct time | rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(bench("TriviaQA 48 MX configs", cfg_for(DEFAULT_TABLE, "loss_judge_best", "avg_bitwidth"), rt), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/c500.parquet"
        make_500(path)
        print(bench("500 drawn from TriviaQA", cfg_for(path, "loss_judge", "size"), rt), flush=True)
    print(f"\n{len(rt.hosts)} CandidateWorker actors; n = {N}, r = {R}, {BATCH} human labels per candidate per round")
    rt.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
