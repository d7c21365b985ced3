"""Soak run: a 500-candidate x 2,000-item replay job with random actor kills.

The table is built from the bundled TriviaQA losses: candidate k takes the losses of one of
the 48 real MX configurations on 2,000 items drawn for it (a different draw per candidate).
The job (R-AutoEval+, Bonferroni, every candidate to its full budget n = 500 with r = 3)
keeps its durable label log; a killer thread sends SIGKILL to a random candidate actor every
``--kill-every`` seconds. Ray restarts a killed actor and the driver rebuilds its candidates
from the log. At the end the certificate is compared with the same job run without kills,
and the label log is checked for duplicates. Memory: the RSS of the driver and of every actor
process is sampled every second (peak, and the mean of the first and last quarter of the
run, to see that it stays flat).

    python benchmarks/soak.py [--candidates 500] [--items 2000] [--kill-every 3]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import signal
import sys
import tempfile
import threading
import time

import numpy as np

from certsel.config import parse_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
from certsel.orchestrator.inputs.jobdata import JobData
from certsel.workers.replay import DEFAULT_TABLE, LossTable, load_loss_table


def rss_kb(pid: int) -> int | None:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def build(K: int, I: int, seed: int) -> JobData:
    real = load_loss_table(DEFAULT_TABLE, judge="loss_judge_best")
    rng = np.random.default_rng(seed)
    src = rng.integers(real.human.shape[0], size=K)
    idx = np.stack([rng.choice(real.items.size, I, replace=False) for _ in range(K)])
    human = real.human[src[:, None], idx]
    judge = real.judge[src[:, None], idx]
    names = np.array([f"c{k:03d}_{real.candidates[s]}" for k, s in enumerate(src)])
    table = LossTable(candidates=names, items=np.arange(I), human=human, judge=judge, order=None,
                      objective=rng.random(K), judge_column="loss_judge_best")
    return JobData(table=table, features=None, fingerprint="soak")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=500)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--kill-every", type=float, default=3.0)
    ap.add_argument("--hosts", type=int, default=4)
    args = ap.parse_args(argv)
    cfg = parse_config({"data": {"path": str(DEFAULT_TABLE), "judge": "loss_judge_best"},
                        "policy": {"kind": "r-autoeval+"}, "alpha": 0.1, "delta": 0.1, "procedure": "bonferroni",
                        "objective": {"column": "avg_bitwidth"}, "scheduling": {"mode": "full"},
                        "budget": {"n": args.n, "r": 3, "batch": args.batch}, "tracking": {"intervals": "none"}})
    data = build(args.candidates, args.items, 0)
    import logging

    import ray

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        rt = RayRuntime()
        ref = run_job(cfg, data, rt, n_hosts=args.hosts, job_dir=pathlib.Path(tmp) / "ref")
        rt.close()
        t_ref = time.perf_counter() - t
        print(f"reference (no kills): {t_ref:.1f} s, {ref.spent['human']} human + {ref.spent['judge']} judge labels",
              flush=True)

        job_dir = pathlib.Path(tmp) / "soak"
        done = threading.Event()
        kills, samples = [], []
        rng = random.Random(1)

        host_pids_seen = set()

        def host_pids():
            d = job_dir / "hosts"
            pids = [int(p.name) for p in d.iterdir()] if d.is_dir() else []
            host_pids_seen.update(pids)
            return pids

        def killer():
            while not done.wait(args.kill_every):
                live = [p for p in host_pids() if rss_kb(p) is not None]
                if live:
                    pid = rng.choice(live)
                    try:
                        os.kill(pid, signal.SIGKILL)
                        kills.append((time.perf_counter(), pid))
                    except ProcessLookupError:
                        pass

        def sampler():
            while not done.wait(0.5):
                actors = [r for r in (rss_kb(p) for p in host_pids()) if r is not None]
                samples.append((time.perf_counter(), rss_kb(os.getpid()), max(actors, default=0)))

        rt = RayRuntime()
        threads = [threading.Thread(target=killer, daemon=True), threading.Thread(target=sampler, daemon=True)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        res = run_job(cfg, data, rt, n_hosts=args.hosts, job_dir=job_dir)
        done.set()
        secs = time.perf_counter() - t0
        rt.close()

    # valid whatever happened: every certified candidate has exactly the uninterrupted run's
    # evidence up to the labels it used (so its certification is the same event), and the
    # candidates that ended without evidence ("worker lost") are not certified
    by_name = {r.name: r for r in ref.records}
    valid = all(r.status != "certified" or np.allclose(r.path, by_name[r.name].path[: len(r.path)], atol=1e-9)
                for r in res.records) and set(res.certified) <= set(ref.certified)
    lost = sum(r.reason.startswith("worker lost") for r in res.records)
    same = all(a.status == b.status and a.n_human == b.n_human and a.n_judge == b.n_judge
               and abs(a.max_log_e - b.max_log_e) < 1e-9 for a, b in zip(ref.records, res.records, strict=True))
    dup = 0
    for log in res.labels.values():
        pairs = list(zip(log.item.tolist(), log.role.tolist(), strict=True))
        dup += len(pairs) - len(set(pairs))
    q = max(1, len(samples) // 4)
    first, last = samples[:q], samples[-q:]
    print(f"{args.candidates} candidates x {args.items} items, n = {args.n}, r = 3, batch {args.batch}, "
          f"{args.hosts} actors on 2 CPUs, a SIGKILL every {args.kill_every:g} s")
    print("| run | seconds | actor kills | candidates ended by 'worker lost' | certified | valid | human labels | "
          "judge labels | equal to the run without kills | "
          "duplicate labels | driver RSS peak (MB) | driver RSS first/last quarter (MB) | actor RSS peak (MB) | "
          "actor RSS first/last quarter (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    mb = 1 / 1024
    print(f"| soak | {secs:.0f} | {len(kills)} | {lost} | {len(res.certified)} | {'yes' if valid else 'NO'} | "
          f"{res.spent['human']} | {res.spent['judge']} | "
          f"{'yes' if same and res.certified == ref.certified else 'NO'} | {dup} | "
          f"{max(s[1] for s in samples) * mb:.0f} | {np.mean([s[1] for s in first]) * mb:.0f} / "
          f"{np.mean([s[1] for s in last]) * mb:.0f} | {max(s[2] for s in samples) * mb:.0f} | "
          f"{np.mean([s[2] for s in first]) * mb:.0f} / {np.mean([s[2] for s in last]) * mb:.0f} |")
    rec = res.recovered
    for why in sorted({r.reason for r in res.records if r.reason.startswith("worker lost")}):
        print(f"ended: {why}")
    print(f"(reference without kills: {t_ref:.0f} s, {len(ref.certified)} certified; {len(samples)} memory samples, "
          f"host pid files seen: {len(host_pids_seen)}; hosts rebuilt: {rec.hosts}, candidate steps restored "
          f"from snapshots: {rec.steps_from_snapshots}, replayed from the log: {rec.steps_replayed})")
    ray.shutdown()
    return 0 if valid and dup == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
