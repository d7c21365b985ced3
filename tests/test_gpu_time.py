"""GPU-time accounting and server packing (workers/gpu_time.py, workers/serving.py,
orchestrator/engine/servers.py ``choose``): against brute force on a fine time grid and
by hand."""

import numpy as np
import pytest
from certsel.orchestrator.engine.servers import choose
from certsel.workers.gpu_time import Busy, Spell, fair_shares, fleet_usage, server_usage
from certsel.workers.serving import demand, pack, unplaceable

STEP = 1e-3  # the brute-force grid (seconds)


def brute(spells, busy, now, gpus=1.0):
    """The same quantities by marking a grid of instants."""
    t = np.arange(0.0, now, STEP) + STEP / 2
    placed = np.zeros(t.size, bool)
    ready = np.zeros(t.size, bool)
    for s in spells:
        end = now if s.stopped is None else s.stopped
        if s.placed is not None:
            placed |= (t > s.placed) & (t < end)
        if s.ready is not None:
            ready |= (t > s.ready) & (t < end)
    flight = {}
    for b in busy:
        flight.setdefault(b.who, np.zeros(t.size, bool))
        flight[b.who] |= (t > b.t0) & (t < b.t1)
    n = sum(flight.values()) if flight else np.zeros(t.size)
    busy_mask = (n > 0) & ready
    shares = {w: float(np.sum(np.where(busy_mask & f, STEP / np.maximum(n, 1), 0.0))) * gpus for w, f in flight.items()}
    return {"load": float(np.sum(placed & ~ready)) * STEP, "busy": float(np.sum(busy_mask)) * STEP,
            "idle": float(np.sum(ready & ~busy_mask)) * STEP, "shares": shares}


@pytest.mark.parametrize("seed", range(20))
def test_usage_equals_brute_force_on_random_lives(seed):
    rng = np.random.default_rng(seed)
    spells, busy, t = [], [], 0.0
    for _ in range(rng.integers(1, 4)):  # a few start-stop spells
        req = t + rng.uniform(0, 1)
        placed = req + rng.uniform(0, 0.5)
        ready = placed + rng.uniform(0.1, 1)
        stopped = ready + rng.uniform(0.5, 3)
        spells.append(Spell(req, placed, ready, stopped))
        for _ in range(rng.integers(1, 6)):  # spans, overlapping, from three candidates
            t0 = rng.uniform(ready - 0.2, stopped)
            busy.append(Busy(t0, min(t0 + rng.uniform(0.05, 1), stopped + 0.2), f"c{rng.integers(3)}",
                             int(rng.integers(1, 9))))
        t = stopped
    now = t + 0.5
    got = server_usage("s", 2.0, spells, busy, now)
    want = brute(spells, busy, now, gpus=2.0)
    assert got.starts == len(spells) and got.requests == sum(b.requests for b in busy)
    assert got.load_s == pytest.approx(want["load"], abs=0.01)
    assert got.busy_s == pytest.approx(want["busy"], abs=0.01)
    assert got.idle_s == pytest.approx(want["idle"], abs=0.01)
    assert got.gpu_s == pytest.approx(2.0 * (got.load_s + got.busy_s + got.idle_s))
    assert got.wait_s == pytest.approx(sum(s.placed - s.requested for s in spells))
    windows = np.array([(s.ready, s.stopped) for s in spells])
    shares = fair_shares(busy, windows)
    assert sum(shares.values()) == pytest.approx(got.busy_s, abs=1e-9)  # the busy time, shared out exactly
    for who, sec in shares.items():
        assert 2.0 * sec == pytest.approx(want["shares"][who], abs=0.01)


def test_shares_by_hand():
    """A judge busy 0-4 s for candidate a and 2-6 s for b: 0-2 a alone, 2-4 shared, 4-6 b."""
    busy = [Busy(0, 4, "a", 10), Busy(2, 6, "b", 10)]
    assert fair_shares(busy, np.array([[0.0, 10.0]])) == {"a": pytest.approx(3.0), "b": pytest.approx(3.0)}
    use = fleet_usage({"judge": 1.0, "ca": 2.0}, {"judge": [Spell(-2, -1, 0, 10)], "ca": [Spell(0, 0, 1, 3)]},
                      {"judge": busy, "ca": [Busy(1, 3, "a", 5)]}, now=20)
    j, c = use.servers
    assert (j.load_s, j.busy_s, j.idle_s, j.wait_s) == (1, 6, 4, 1) and j.gpu_s == 11
    assert (c.load_s, c.busy_s, c.idle_s) == (1, 2, 0) and c.gpu_s == 6
    assert use.candidate_gpu_s == {"a": pytest.approx(3 + 4), "b": pytest.approx(3)}
    assert use.candidate_requests == {"a": {"judge": 10, "ca": 5}, "b": {"judge": 10}}
    assert use.gpu_s == 17 and use.starts == 2


def test_a_spell_still_running_counts_to_now_and_one_never_placed_only_waits():
    got = server_usage("s", 1.0, [Spell(0, 1, 2, None)], [], now=5)
    assert (got.load_s, got.idle_s) == (1, 3)
    got = server_usage("s", 1.0, [Spell(0, None, None, 4)], [], now=9)  # abandoned while waiting
    assert got.wait_s == 4 and got.up_s == 0


def test_pack_and_demand():
    two = [{"GPU": 1.0, "CPU": 8.0}, {"GPU": 1.0, "CPU": 8.0}]
    assert demand({"num_gpus": 1, "num_cpus": 0, "resources": {"slot": 1}}) == {"GPU": 1.0, "slot": 1.0}
    assert demand({}) == {}
    assert pack([{"GPU": 1.0}] * 2, two) and not pack([{"GPU": 1.0}] * 3, two)
    assert not pack([{"GPU": 2.0}], two)  # two GPUs, but not on one node
    assert pack([{"GPU": 0.5}] * 4, two) and not pack([{"GPU": 0.5}] * 5, two)
    assert pack([{}] * 100, two)  # servers that ask for nothing always fit
    # first fit, largest first: 1.5 then 0.5 + 0.5 + 0.5 on two 2-GPU nodes
    assert pack([{"GPU": 0.5}, {"GPU": 1.5}, {"GPU": 0.5}, {"GPU": 0.5}, {"GPU": 1.0}], [{"GPU": 2.0}] * 2)
    assert not pack([{"serving": 1.0}], two)


def test_unplaceable_says_what_was_asked_and_what_there_is():
    nodes = [{"GPU": 2.0, "CPU": 4.0}, {"GPU": 1.0, "CPU": 4.0}]
    assert unplaceable({"name": "a", "num_gpus": 2}, nodes) is None
    assert unplaceable({"name": "big", "num_gpus": 4}, nodes) == (
        "live.serve: server 'big' asks for 4 GPU but no node of the Ray cluster has that: the largest node has "
        "2 GPU (2 nodes, 3 GPU in all)")
    assert "asks for 1 GPU, 1 serving" in unplaceable({"name": "x", "num_gpus": 1, "resources": {"serving": 1}}, nodes)
    assert "the cluster has no alive node" in unplaceable({"name": "x", "num_gpus": 1}, [])


def test_choose_keeps_the_head_prefers_servers_up_and_packs():
    demands = {s: {"GPU": 1.0} for s in ("a", "b", "c", "d", "judge")}
    needs = {n: {n, "judge"} for n in "abcd"}
    nodes = [{"GPU": 3.0}]
    # the head always; c's server is up so it comes before b; d does not fit
    assert choose(list("abcd"), needs, {"c", "judge"}, demands, nodes) == (["a", "c"], {"a", "c", "judge"})
    # without a head (a ranking's wave): the up ones first
    assert choose(list("abcd"), needs, {"d"}, demands, nodes, head=False)[0] == ["d", "a"]
    # nothing fits next to the head: it runs alone
    assert choose(list("abcd"), needs, set(), demands, [{"GPU": 2.0}]) == (["a"], {"a", "judge"})


def _block(gpus: float, full, saved):
    server = {"name": "smollm2", "gpus": gpus, "starts": 1, "wait_s": 0.2, "load_s": 40.0, "busy_s": 300.0,
              "idle_s": 5.0, "up_s": 345.2, "gpu_s": 345.2 * gpus, "requests": 1600}
    return {"gpu_seconds": 345.2 * gpus, "gpu_hours": 345.2 * gpus / 3600, "busy_gpu_seconds": 300.0 * gpus,
            "load_gpu_seconds": 40.0 * gpus, "idle_gpu_seconds": 5.0 * gpus, "server_seconds": 345.2,
            "server_starts": 1, "max_servers_up": 1, "max_gpus_up": gpus, "full_budget_estimate_gpu_seconds": full,
            "saved_fraction_estimate": saved, "servers": [server], "candidates": {"a": 150.0 * gpus, "b": 150.0 * gpus},
            "shared": {}}


def test_report_gpu_section():
    """The report's GPU tables: every server and candidate listed, the estimate row where there is
    an estimate; servers that hold no GPU get their seconds alone (no GPU-time section)."""
    from types import SimpleNamespace

    from certsel.orchestrator.outputs.report import _gpu_tables as tables
    from certsel.orchestrator.outputs.selection_schema import Gpu

    def _gpu_tables(cert):  # the report reads the typed certificate: only its gpu block matters here
        return tables(SimpleNamespace(gpu=None if cert["gpu"] is None else Gpu.model_validate(cert["gpu"])))

    assert _gpu_tables({"gpu": None}) == []
    # servers that hold no GPU (the CPU build): their seconds alone, no all-zero GPU tables
    [servers] = _gpu_tables({"gpu": _block(0.0, 0.0, None)})
    assert servers[0] == ["server", "starts", "waiting (s)", "loading (s)", "generating (s)", "idle (s)", "requests"]
    assert servers[1][:2] == ["smollm2", "1"]
    summary, servers, shares = _gpu_tables({"gpu": _block(2.0, 2000.0, 0.6548)})
    assert [r[0] for r in summary[:5]] == ["GPU time", "used", "of which loading", "of which generating", "of which idle"]
    assert servers[1][:3] == ["smollm2", "2", "1"] and [r[0] for r in shares[1:]] == ["a", "b"]
    assert summary[-1][0].startswith("every candidate to its budget") and "65% saved" in summary[-1][0]
    assert summary[1][1:] == ["690.4", "0.1918"] and summary[-1][1] == "2,000.0"


def test_a_cached_rerun_starts_no_server_and_the_report_says_so():
    from types import SimpleNamespace

    from certsel.orchestrator.outputs.report import _gpu_heading, _gpu_tables
    from certsel.orchestrator.outputs.selection_schema import Gpu

    cached = {**_block(0.0, 0.0, None), "server_starts": 0}
    cert = SimpleNamespace(gpu=Gpu.model_validate(cached))
    assert _gpu_tables(cert) == []  # no all-zero table
    assert _gpu_heading(cert) == ("Model servers", "None started: every request was answered from the response cache.")
    assert _gpu_heading(SimpleNamespace(gpu=None)) is None
    assert _gpu_heading(SimpleNamespace(gpu=Gpu.model_validate(_block(0.0, 0.0, None))))[0] == "Model servers"
