"""GPU time of a 48-checkpoint quantization job on a few GPUs: servers on demand against
every server up for the whole job, and against every candidate run to its budget.

The job is the quickstart (examples/quantization.yaml: 48 MX-quantized Llama-3.1-8B
configurations, FST in decreasing bitwidth, R-AutoEval+ with a judge that answers the
questions itself, n = 300, r = 3), run by certsel's engine on the recorded losses; only
the servers are simulated. :class:`SimFleet` is a
:class:`~certsel.orchestrator.engine.servers.ServerSchedule` with the real schedule's
decisions (:func:`~certsel.orchestrator.engine.servers.choose`, the retirement of servers
no unfinished candidate needs, the judge's answers generated before the rounds) on a
virtual clock:

* one server per checkpoint and one judge server, ``--gpus-per-server`` GPUs each, on
  ``--gpus`` GPUs (one node);
* a server takes ``--load`` seconds from placement to ready;
* a server answers a batch of q requests in ``q x --per-request`` seconds (its throughput
  at full batch; the requests of a candidate's round are sent together);
* a round is synchronous: it lasts as long as its slowest admitted candidate (its server's
  load if it starts this round, plus its generations); every server that is up holds its
  GPUs for the whole round.

Per candidate and round the generations are the items the candidate labelled (human
items and judge-only items: one target generation each); the judge's calls are its
answers on the seeded order's first n (1 + r) items, generated once before the rounds.

Three runs, each reported as wall time, GPU-hours, and the ratio to what the labels bought
need (busy GPU-seconds of the generations and judge answers + one load per server started):

* (a) every server up for the whole job, as before servers were scheduled (needs one GPU
  per server: 49 here, whatever ``--gpus`` says);
* (b) servers on demand on ``--gpus`` GPUs (the schedule: a candidate after the round's
  first whose server is down waits while its server loads in the background), and (b')
  the same without background loading (such a candidate's load holds up its round);
* (c) every candidate to its budget (``scheduling.mode: full``), servers on demand.

Defaults (``--load 60 --per-request 0.01``) are assumptions for an 8B model on one H100,
not measurements here (no GPU with vLLM is reachable from this machine): a minute from
process start to ready (weights from local disk, CUDA graphs), and about 100 short-answer
requests per second at full batch. ``--cpu`` uses what was measured on this repository's
CPU build instead (SmolLM2-135M, float32, two cores: 45 s to ready, 64 chat requests in
16.4 s, docs/live.md).

    python benchmarks/gpu_schedule.py [--gpus 8] [--load 60] [--per-request 0.01] [--cpu] [--config C] [--set K=V]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from certsel.config import load_config  # noqa: E402
from certsel.orchestrator.inputs.sources import load_job_data  # noqa: E402
from certsel.orchestrator.engine.driver import LocalRuntime, run_job  # noqa: E402
from certsel.orchestrator.engine.servers import choose  # noqa: E402
from certsel.workers.gpu_time import Busy, Spell, fleet_usage  # noqa: E402

JUDGE = "judge"


class SimFleet:
    """The servers of the job on a virtual clock (see the module docstring)."""

    def __init__(self, names: list[str], *, gpus: float, per_server: float, load: float, per_request: float,
                 judge_items: int, unlimited: bool = False, warm: bool = True):
        self.names, self.load, self.per_request = names, load, per_request
        self.demands = {n: {"GPU": per_server} for n in [*names, JUDGE]}
        self.nodes = [{"GPU": float(len(self.demands) * per_server if unlimited else gpus)}]
        self.unlimited = unlimited
        self.needs = {n: {n} for n in names}  # the judge's answers are generated before the rounds
        self.prefetched = frozenset({JUDGE})
        self.clock = 0.0
        self.up: set[str] = set()
        self.ready_at: dict[str, float] = {}
        self.warm = warm
        self.spells: dict[str, list[Spell]] = {n: [] for n in self.demands}
        self.busy: dict[str, list[Busy]] = {n: [] for n in self.demands}
        self.records = None
        self.last: dict[str, int] = {}
        self.round: list[str] = []
        self.max_up = 0
        if unlimited:  # (a): every server loads at once and stays up to the end
            for n in self.demands:
                self._start(n)
            self.clock += load
        self._serve(JUDGE, JUDGE, judge_items, ready=self.clock if unlimited else None)

    # -- the schedule protocol ---------------------------------------------------------------
    def set_needs(self, needs):
        pass  # replay specs: every candidate needs its own server (set above)

    def admit(self, active, open_):
        if self.records is None:
            self.records = {r.name: r for r in open_}
        self._finish_round()
        if not self.unlimited:
            later = set().union(*(self.needs[r.name] for r in open_))
            for n in sorted(self.up - later):
                self._stop(n)
        ready = {n for n in self.up if self.ready_at[n] <= self.clock}
        chosen, servers = choose([r.name for r in active], self.needs, ready, self.demands, self.nodes)
        if self.warm and len(chosen) > 1:  # FleetSchedule._warm_instead: the others load in the background
            later = [n for n in chosen[1:] if not self.needs[n] <= ready]
            for n in later:
                for srv in self.needs[n] - self.up:
                    self._start(srv)
            chosen = [n for n in chosen if n not in later]
        self.round = chosen
        self.last = {n: self.records[n].n_judge for n in chosen}
        keep = set(chosen)
        return [r for r in active if r.name in keep]

    def waves(self, names, open_names):
        yield list(names)

    def lost(self):
        return []

    def usage(self):
        self._finish_round()
        for n in sorted(self.up):
            self._stop(n)
        gpus = {n: d["GPU"] for n, d in self.demands.items()}
        return fleet_usage(gpus, self.spells, self.busy, self.clock, self.max_up, self.max_up * gpus[JUDGE])

    def close(self):
        pass

    # -- the clock ---------------------------------------------------------------------------
    def _start(self, n: str) -> float:
        """Place and load server ``n`` now; the time it is ready."""
        self.spells[n].append(Spell(self.clock, self.clock, self.clock + self.load))
        self.up.add(n)
        self.ready_at[n] = self.clock + self.load
        self.max_up = max(self.max_up, len(self.up))
        return self.clock + self.load

    def _stop(self, n: str) -> None:
        self.spells[n][-1].stopped = self.clock
        self.up.discard(n)

    def _serve(self, server: str, who: str, q: int, ready: float | None = None) -> float:
        """``q`` requests of ``who`` on ``server`` (started now if down); when they are done."""
        if q <= 0:
            return self.clock
        if ready is not None:
            start = ready
        else:
            start = max(self.clock, self.ready_at[server]) if server in self.up else self._start(server)
        end = start + q * self.per_request
        self.busy[server].append(Busy(start, end, who, q))
        if server == JUDGE:  # the judge's answers come first; on demand, the judge then goes
            self.clock = end
            if not self.unlimited:
                self._stop(JUDGE)
        return end

    def _finish_round(self) -> None:
        """Advance the clock over the round just run: its slowest candidate."""
        if not self.round:
            return
        ends = [self._serve(n, n, self.records[n].n_judge - self.last[n]) for n in self.round]
        self.clock = max([self.clock, *ends])
        self.round = []


def run(cfg, data, warm: bool = True, **kw):
    names = data.names
    fleet = SimFleet(names, judge_items=min(data.n_items, cfg.budget.n * (1 + cfg.budget.r)), warm=warm, **kw)
    res = run_job(cfg, data, LocalRuntime(), collect_labels=False, servers=fleet)
    use = res.gpu
    need = sum(s.busy_s * s.gpus for s in use.servers) + sum(s.starts * kw["load"] * s.gpus for s in use.servers)
    return {"wall_h": fleet.clock / 3600, "gpu_h": use.gpu_s / 3600, "need_h": need / 3600,
            "ratio": use.gpu_s / need, "starts": use.starts, "max_up": use.max_up,
            "labels": res.spent["human"], "selected": res.selected, "idle_h": sum(s.idle_s * s.gpus for s in use.servers)
            / 3600}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "examples" / "quantization.yaml"))
    ap.add_argument("--gpus", type=float, default=8)
    ap.add_argument("--gpus-per-server", type=float, default=1)
    ap.add_argument("--load", type=float, default=60.0, help="seconds from placement to ready")
    ap.add_argument("--per-request", type=float, default=0.01, help="seconds per request at full batch")
    ap.add_argument("--cpu", action="store_true", help="the CPU build's measured rates (45 s, 16.4 s / 64)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="job overrides, as certsel run")
    args = ap.parse_args(argv)
    if args.cpu:
        args.load, args.per_request = 45.0, 16.4 / 64
    cfg = load_config(args.config, args.set or None)
    data = load_job_data(cfg)
    kw = {"gpus": args.gpus, "per_server": args.gpus_per_server, "load": args.load, "per_request": args.per_request}
    t0 = time.perf_counter()
    rows = {"(a) every server up for the whole job": run(cfg, data, unlimited=True, **kw),
            "(b) servers on demand": run(cfg, data, **kw),
            "(b') on demand, no background loading": run(cfg, data, warm=False, **kw),
            "(c) every candidate to its budget, on demand": run(
                cfg.model_copy(update={"scheduling": cfg.scheduling.model_copy(update={"mode": "full"})}), data, **kw)}
    print(f"{len(data.names)} checkpoints + judge, {args.gpus:g} GPUs ({args.gpus_per_server:g} per server), "
          f"load {args.load:g} s, {args.per_request:g} s per request; {time.perf_counter() - t0:.1f} s to simulate")
    print(f"{'run':46s} {'wall h':>7s} {'GPU-h':>7s} {'needed':>7s} {'ratio':>6s} {'idle GPU-h':>10s} "
          f"{'starts':>6s} {'max up':>6s} {'human labels':>12s}  selected")
    for name, r in rows.items():
        print(f"{name:46s} {r['wall_h']:7.2f} {r['gpu_h']:7.2f} {r['need_h']:7.2f} {r['ratio']:6.2f} "
              f"{r['idle_h']:10.2f} {r['starts']:6d} {r['max_up']:6d} {r['labels']:12d}  {r['selected']}")
    b = rows["(b) servers on demand"]
    print(f"goal: (b) within 1.2x of what its labels need (busy + one load per server started): {b['ratio']:.2f}x "
          f"({'met' if b['ratio'] <= 1.2 else 'NOT met'})")


if __name__ == "__main__":
    main()
