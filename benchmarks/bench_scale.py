"""Scale: 500 and 2,000 candidates x 5,000 items through the Ray driver (replay source).

The load of ``bench_driver.py`` (R-AutoEval+ with UP and 10 reliance factors, Bonferroni,
every candidate to its whole budget: n = 300 human and r n = 900 judge-only labels, 25
human labels per candidate per round), on tables of K candidates x 5,000 items drawn from
the real TriviaQA losses (each candidate a random real configuration's losses on a random
permutation of items). Reported per K: wall time of the job, label events per second
(human + judge labels delivered to policies), the driver's peak resident memory growth
during the job, the actors' resident memory at the end, and memory per candidate; then the
2,000-candidate figures against the 500-candidate ones (goal: within 2x per candidate and
in events/s).

    python benchmarks/bench_scale.py [--ks 500 2000] [--items 5000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from certsel.config import parse_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
from certsel.workers.contracts import Pid
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.workers.replay import DEFAULT_TABLE, load_loss_table

N, R, BATCH = 300, 3, 25


def make_table(path, k: int, items: int, seed: int = 0) -> None:
    base = load_loss_table(DEFAULT_TABLE, judge="loss_judge_best")
    rng = np.random.default_rng(seed)
    src = rng.integers(0, base.candidates.size, k)
    perm = np.argsort(rng.random((k, base.items.size)), axis=1)[:, :items]
    human = base.human[src[:, None], perm]
    judge = base.judge[src[:, None], perm]
    names = np.repeat(np.array([f"cand_{c:04d}" for c in range(k)]), items)
    pq.write_table(pa.table({"candidate": names, "item": np.tile(np.arange(items), k),
                             "loss_human": human.reshape(-1), "loss_judge": judge.reshape(-1),
                             "size": np.repeat(base.objective[src], items)}), path)


def rss(pid: int | str = "self") -> int:
    """Resident memory of a process in bytes (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRSS:
    """The driver's resident memory, sampled every 50 ms while a job runs."""

    def __init__(self):
        self.peak, self.stop = 0, False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop:
            self.peak = max(self.peak, rss())
            time.sleep(0.05)

    def __enter__(self):
        self.base = rss()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()


def bench(k: int, items: int, rt: RayRuntime, tmp: str) -> dict:
    path = f"{tmp}/scale_{k}.parquet"
    make_table(path, k, items)
    cfg = parse_config({
        "data": {"path": path, "judge": "loss_judge"}, "policy": {"kind": "r-autoeval+", "betting": "up"},
        "procedure": "bonferroni", "objective": {"column": "size"},
        "budget": {"n": N, "r": R, "batch": BATCH}, "scheduling": {"mode": "full"},
        "tracking": {"intervals": "none"}, "seed": 0,
    })
    data = load_job_data(cfg)
    with PeakRSS() as mem:
        t = time.perf_counter()
        res = run_job(cfg, data, rt, collect_labels=False)
        wall = time.perf_counter() - t
    actors = sum(rss(rt.call(h, Pid())) for h in range(len(rt.hosts)))
    ev = res.spent["human"] + res.spent["judge"]
    assert ev == k * N * (2 + R)
    return {"k": k, "wall": wall, "events": ev, "rate": ev / wall, "driver": mem.peak - mem.base,
            "actors": actors, "per_cand": (mem.peak - mem.base + actors) / k, "rounds": res.rounds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[500, 2000])
    ap.add_argument("--items", type=int, default=5000)
    args = ap.parse_args(argv)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rt = RayRuntime()
    rows = []
    print("| candidates | items | label events | wall (s) | events/s | driver peak RSS growth (MB) | "
          "actors RSS (MB) | MB per candidate | rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        bench(100, args.items, rt, tmp)  # warm-up: the actors' imports and first load are not counted
        for k in args.ks:
            r = bench(k, args.items, rt, tmp)
            rows.append(r)
            print(f"| {k:,} | {args.items:,} | {r['events']:,} | {r['wall']:.1f} | {r['rate']:,.0f} | "
                  f"{r['driver'] / 2**20:.0f} | {r['actors'] / 2**20:.0f} | {r['per_cand'] / 2**20:.3f} | "
                  f"{r['rounds']} |", flush=True)
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        print(f"\n{b['k']:,} vs {a['k']:,} candidates: events/s ratio {b['rate'] / a['rate']:.2f}, memory per "
              f"candidate ratio {b['per_cand'] / a['per_cand']:.2f} (goal: within 2x: events/s ratio >= 0.5, "
              f"memory ratio <= 2); {len(rt.hosts)} actors; driver max RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    rt.close()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
