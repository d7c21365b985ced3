"""Which candidates' servers may be up together: the schedule of a job's own model servers.

A job served by certsel itself (``live.serve``) may have more servers than its cluster holds at once. Every round
:meth:`ServerSchedule.admit` chooses which of the candidates the procedure wants to advance run now: the first always
(the procedure's priority: FST's frontier), then those whose servers are up, then the rest in the procedure's order,
each only if its servers (target, judge, reference) fit next to those admitted (:func:`~certsel.workers.serving.pack`;
placement is Ray's). The others wait. Servers no unfinished candidate needs stop at once; servers the round does not use
stop when room is needed. A ranking labels its models in waves (:meth:`ServerSchedule.waves`) whose servers fit
together, servers already up first. Details: docs/live.md, 'Servers as a scheduled resource'.

Why the schedule cannot change a certificate: it decides only *when* a candidate receives labels, never which (each
follows its own seeded order) nor how its evidence is judged. Each e-process is a test supermartingale in its own label
count and its certificate holds at any stopping time (Ville's inequality), so pausing it is optional stopping and
continuation; the procedures' arguments (docs/driver.md) hold for any schedule that depends only on the past. The
default, :class:`AllAtOnce`, admits everything (a job with no servers of its own).
"""

from __future__ import annotations

import uuid
from typing import Protocol

from certsel.workers.gpu_time import FleetUsage
from certsel.workers.serving import ServeError, amounts, demand, node_capacities, pack, unplaceable


def choose(order: list[str], needs: dict[str, set[str]], up: set[str], demands: dict[str, dict[str, float]],
           nodes: list[dict[str, float]], head: bool = True) -> tuple[list[str], set[str]]:
    """The names of ``order`` to run together and their servers: with ``head`` the first always, then the others by how
    few of their servers are down (those with all theirs ``up`` first), ties in ``order``'s order, each only if its
    servers fit next to those already chosen (:func:`pack`)."""
    first, rest = (order[:1], order[1:]) if head else ([], order)
    ranked = first + sorted(rest, key=lambda n: len(needs.get(n, set()) - up))  # stable: order kept in ties
    chosen, servers = [], set()
    for n in ranked:
        want = servers | needs.get(n, set())
        if not chosen or pack([demands[s] for s in want], nodes):
            chosen.append(n)
            servers = want
    return chosen, servers


class ServerSchedule(Protocol):
    prefetched: frozenset | set  # shared servers whose answers were all generated before the rounds

    def set_needs(self, needs: dict[str, set[str]]) -> None:
        """Each candidate's servers (checked to fit together on the cluster)."""

    def admit(self, active: list, open_: list) -> list:
        """The records among ``active`` (in the procedure's order) to advance this round; ``open_``: every unfinished
        record (their servers stay available)."""

    def waves(self, names: list[str], open_names: list[str]):
        """``names`` (models to label now) in groups whose servers fit together, each group's servers reserved as it is
        yielded; ``open_names``: every model still needed."""

    def lost(self) -> list[str]:
        """Servers found dead since they started (they start again on their next request)."""

    def usage(self) -> FleetUsage | None:
        """The servers' GPU time so far (None: no servers of its own)."""

    def close(self) -> None: ...


class AllAtOnce:
    """No servers of the job's own: every candidate the procedure asks for runs."""

    prefetched: frozenset = frozenset()

    def set_needs(self, needs):
        pass

    def admit(self, active, open_):
        return list(active)

    def waves(self, names, open_names):
        if names:
            yield list(names)

    def lost(self):
        return []

    def usage(self):
        return None

    def close(self):
        pass


class FleetSchedule:
    """The schedule over a job's :class:`~certsel.workers.server_fleet.ServerFleet` (see the module docstring).
    ``needs``: each candidate's servers."""

    def __init__(self, fleet, specs: list[dict], needs: dict[str, set[str]]):
        import ray

        self._ray = ray
        self.fleet, self.name = fleet, None
        self.demands = {s["name"]: demand(s) for s in specs}
        self.needs = {k: set(v) for k, v in needs.items()}
        # shared servers whose answers are generated before the rounds (reference, answer-mode judge): left out of
        # the candidates' needs (LiveSpec.servers), so they are stopped at round 1
        self.prefetched: set[str] = set()

    @classmethod
    def start(cls, specs: list[dict]) -> FleetSchedule:
        """Check that every server fits on some node (else :class:`ServeError`, one line, before any label), then start
        the job's fleet actor (no server yet)."""
        import ray

        from certsel.workers.server_fleet import start_fleet

        nodes = node_capacities(ray)
        for s in specs:
            why = unplaceable(s, nodes)
            if why is not None:
                raise ServeError(why)
        name = f"certsel-servers-{uuid.uuid4().hex[:12]}"
        out = cls(start_fleet(specs, name), specs, {})
        out.name = name
        return out

    def set_needs(self, needs: dict[str, set[str]]) -> None:
        """Each candidate's servers; a candidate whose servers cannot be up together on the cluster could never run:
        :class:`ServeError`, one line, before any label."""
        nodes = node_capacities(self._ray)
        for who, servers in needs.items():
            if not pack([self.demands[s] for s in servers], nodes):
                asked: dict[str, float] = {}
                for s in servers:
                    for k, v in self.demands[s].items():
                        asked[k] = asked.get(k, 0.0) + v
                raise ServeError(f"candidate {who!r} needs servers {', '.join(sorted(servers))} up together "
                                 f"({amounts(asked)}) and the Ray cluster cannot hold them at once")
        self.needs = {k: set(v) for k, v in needs.items()}

    def _call(self, method: str, *args):
        return self._ray.get(getattr(self.fleet, method).remote(*args))

    def _pick(self, order: list[str], open_names: list[str], head: bool = True) -> tuple[list[str], set[str]]:
        """Retire the servers no open name needs; then admit ``order`` (with ``head`` its first always, then those whose
        servers are up, then the rest) while their servers fit together, and reserve their servers."""
        up = set(self._call("up"))
        later = set().union(*(self.needs.get(n, set()) for n in open_names))
        if up - later:
            self._call("retire", sorted(up - later))
            up &= later
        chosen, servers = choose(order, self.needs, up, self.demands, node_capacities(self._ray), head)
        self._call("reserve", sorted(servers))
        return chosen, servers

    def admit(self, active, open_):
        if not active:
            return []
        chosen, servers = self._pick([r.name for r in active], [r.name for r in open_])
        chosen = self._warm_instead(chosen, servers)
        keep = set(chosen)
        return [r for r in active if r.name in keep]

    def _warm_instead(self, chosen: list[str], servers: set[str]) -> list[str]:
        """A round lasts as long as its slowest candidate: a candidate after the first whose servers are down would hold
        every other admitted server idle while its own loads. Such candidates wait while their servers load in the
        background (reserved, so nothing stops them), and join once up. Only once this job has started a server at all:
        a rerun served from the cache starts none."""
        if len(chosen) < 2 or not self._call("started"):
            return chosen
        up = set(self._call("up"))
        ready = chosen[:1] + [n for n in chosen[1:] if self.needs.get(n, set()) <= up]
        if len(ready) < len(chosen):
            self._call("warm", sorted(servers - up - set().union(*(self.needs.get(n, set()) for n in ready))))
        return ready

    def waves(self, names, open_names):
        left = list(names)
        while left:
            chosen, _ = self._pick(left, sorted(set(open_names) | set(left)), head=False)
            yield chosen
            taken = set(chosen)
            left = [n for n in left if n not in taken]

    def lost(self):
        return self._call("lost")

    def status(self) -> dict:
        return self._call("status")

    def failure(self) -> str | None:
        return self._call("failure")

    def usage(self):
        return self._call("usage")

    def watch(self, callback, every: float = 1.0) -> None:
        """Call ``callback(status)`` every ``every`` seconds from a thread until :meth:`close`: the servers up and those
        waiting to be placed (a wait is never silent)."""
        import threading

        self._watching = threading.Event()

        def loop():
            while not self._watching.wait(every):
                try:
                    callback(self.status())
                except Exception:  # noqa: BLE001 - a display must not end the job; the fleet may be gone
                    return

        threading.Thread(target=loop, daemon=True, name="certsel-servers-watch").start()

    def close(self) -> None:
        import contextlib

        if getattr(self, "_watching", None) is not None:
            self._watching.set()
        with contextlib.suppress(Exception):
            self._call("stop_all")
        with contextlib.suppress(Exception):
            self._ray.kill(self.fleet)
