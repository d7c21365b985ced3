"""A job's own model servers as a scheduled resource: started on the first request the response cache cannot answer,
stopped when the schedule no longer needs them, never more at once than the Ray cluster can hold (docs/live.md, 'Servers
as a scheduled resource').

:class:`ServerFleet` is the body of one threaded Ray actor per job, pinned to the driver's node. Label sources ask it
for a server's URL (:class:`ServerHandle`, only on a cache miss) and report their requests' time in flight
(:mod:`certsel.workers.gpu_time`). Before each round the driver says which servers the round may use
(:meth:`ServerFleet.reserve`) and which no unfinished candidate needs (:meth:`ServerFleet.retire`); its schedule admits
only candidates whose servers fit together (:func:`~certsel.workers.serving.pack`), so the fleet can always make room
for a reserved server by stopping servers the round does not use.

Placement is Ray's (a :class:`~certsel.workers.serving.ModelServer` actor with its ``live.serve`` resources). A server
no node could hold is an error before any label (:func:`~certsel.workers.serving.unplaceable`); one waiting for
resources held by others is listed by :meth:`ServerFleet.status`, its startup timeout counting from placement; a lost
one (:meth:`ServerFleet.lost`) starts again on its next request. A server that cannot start fails the job: every later
request for it gets the one-line reason at once, and the driver raises it after the round (:meth:`ServerFleet.failure`).
"""

from __future__ import annotations

import contextlib
import threading
import time

from .gpu_time import Busy, FleetUsage, Spell, fleet_usage
from .serving import ServeError, demand, node_capacities, pack, server_class


class ServerFleet:
    """The servers of one job; ``specs``: ``live.serve`` entries as dicts (``log_dir`` and ``python`` settled by the
    driver)."""

    def __init__(self, specs: list[dict]):
        import ray

        self._ray = ray
        self.specs = {s["name"]: s for s in specs}
        self.demands = {n: demand(s) for n, s in self.specs.items()}
        self.actors: dict[str, object] = {}
        self.urls: dict[str, str] = {}
        self.spells: dict[str, list[Spell]] = {n: [] for n in self.specs}
        self.busy: dict[str, list[Busy]] = {n: [] for n in self.specs}
        self.last_used: dict[str, float] = {}
        self.reserved: set[str] = set()
        self.failed: dict[str, str] = {}
        self.waiting: dict[str, float] = {}
        self.max_up, self.max_gpus_up = 0, 0.0
        self._lock = threading.RLock()  # the fleet's books: who is up, reservations
        self._starting = {n: threading.Lock() for n in self.specs}  # one start at a time per server
        self._warming: set[str] = set()

    # -- what sources ask ------------------------------------------------------------------
    def url(self, name: str) -> str:
        """The server's base URL, started first if it is down (making room by stopping servers the current round does
        not use); :class:`ServeError` if it cannot start."""
        if name not in self.specs:
            raise ServeError(f"no server {name!r} in live.serve")
        with self._starting[name]:
            if name in self.failed:
                raise ServeError(self.failed[name])
            with self._lock:
                if name in self.urls:
                    self.last_used[name] = time.time()
                    return self.urls[name]
                # room made and the new actor counted in one step: two servers starting at once each see the other
                self._make_room(name)
                spell, actor = self._create(name)
            try:
                return self._start(name, spell, actor)
            except ServeError as err:
                self.failed[name] = str(err)
                raise

    def warm(self, names) -> list[str]:
        """Start these servers in background threads, so that the candidates waiting for them join a later round with
        their server loaded instead of holding up a round; returns the names it set going (a failed start fails the job
        as usual, :meth:`failure`)."""
        out = []
        for n in names:
            with self._lock:
                if n in self.urls or n in self.actors or n in self.failed or n in self._warming:
                    continue
                self._warming.add(n)
            threading.Thread(target=self._warm_one, args=(n,), daemon=True).start()
            out.append(n)
        return out

    def _warm_one(self, name: str) -> None:
        try:
            self.url(name)
        except Exception:  # noqa: BLE001 - kept in self.failed, raised by the next request and failure()
            pass
        finally:
            with self._lock:
                self._warming.discard(name)

    def started(self) -> int:
        """How many server starts this job has made (0: every answer so far came from the cache)."""
        with self._lock:
            return sum(len(v) for v in self.spells.values())

    def record(self, name: str, who: str, t0: float, t1: float, requests: int) -> None:
        """Requests of candidate ``who`` were in flight on ``name`` from ``t0`` to ``t1``."""
        with self._lock:
            self.busy[name].append(Busy(float(t0), float(t1), str(who), int(requests)))
            self.last_used[name] = max(self.last_used.get(name, 0.0), float(t1))

    # -- what the driver decides -------------------------------------------------------------
    def reserve(self, names) -> None:
        """The servers the next round may use (the schedule checked that they fit together)."""
        with self._lock:
            self.reserved = set(names)

    def retire(self, names) -> list[str]:
        """Stop the servers among ``names`` that are up (no unfinished candidate needs them); returns those stopped."""
        out = []
        with self._lock:
            for n in names:
                if n in self.urls:
                    self._stop(n)
                    out.append(n)
        return out

    def up(self) -> list[str]:
        with self._lock:
            return sorted(self.urls)

    def status(self) -> dict:
        """Servers up, and servers waiting for Ray to place them (with seconds waited)."""
        now = time.time()
        with self._lock:
            return {"up": sorted(self.urls), "waiting": {n: now - t for n, t in self.waiting.items()}}

    def failure(self) -> str | None:
        """The first server that could not start, as its one-line reason (None: none)."""
        return next(iter(self.failed.values()), None)

    def lost(self, probe_timeout: float = 10.0) -> list[str]:
        """Servers up whose process, actor or node is gone: marked down (their next request restarts them)."""
        ray = self._ray
        out = []
        with self._lock:
            for name, actor in list(self.actors.items()):
                if name not in self.urls:
                    continue
                try:
                    ok = ray.get(actor.alive.remote(), timeout=probe_timeout)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                        ray.exceptions.GetTimeoutError):
                    ok = False
                if not ok:
                    self._stop(name)
                    out.append(name)
        return out

    def usage(self) -> FleetUsage:
        with self._lock:
            gpus = {n: float(self.specs[n].get("num_gpus") or 0.0) for n in self.specs}
            return fleet_usage(gpus, self.spells, self.busy, time.time(), self.max_up, self.max_gpus_up)

    def stop_all(self) -> None:
        with self._lock:
            for name in list(self.urls):
                self._stop(name)
            for actor in self.actors.values():  # servers still being placed or started
                with contextlib.suppress(Exception):
                    self._ray.kill(actor)
            self.actors = {}

    # -- inside ------------------------------------------------------------------------------
    def _make_room(self, name: str | None) -> None:
        """Stop up servers, those outside the round's reservation first and the least recently used first, until
        ``name`` fits next to the rest (on the nodes' totals). The rest includes servers being started right now by
        other requests: they hold, or are about to hold, their resources too."""
        nodes = node_capacities(self._ray)
        up = sorted(self.urls, key=lambda n: (n in self.reserved, self.last_used.get(n, 0.0)))
        while not pack([self.demands[n] for n in [*self.actors, *([] if name is None else [name])]], nodes):
            victims = [n for n in up if n in self.urls and n not in self.reserved]
            if not victims:
                return  # the reservation itself does not fit: Ray will wait for resources (shown in status)
            self._stop(victims[0])

    def _create(self, name: str):
        """The server's actor (Ray places it when its resources are free); under the lock."""
        spell = Spell(requested=time.time())
        self.spells[name].append(spell)
        self.waiting[name] = spell.requested
        actor = self.actors[name] = server_class(self._ray, self.specs[name]).remote(self.specs[name])
        return spell, actor

    def _start(self, name: str, spell: Spell, actor) -> str:
        """Wait for Ray to place the server's actor (listed in :meth:`status` meanwhile; servers outside the round's
        reservation are stopped if in the way), launch the process and wait for ``/health`` within its startup timeout,
        counted from placement."""
        ray, spec = self._ray, self.specs[name]
        try:
            ref = actor.start.remote()
            while not ray.wait([ref], timeout=1.0)[0]:
                with self._lock:  # not placed yet: resources held by others, or by our idle servers
                    self._make_room(None)
            url = ray.get(ref)
            spell.placed = time.time()
            with self._lock:
                self.waiting.pop(name, None)
                self._count_placed()
            ray.get(actor.wait_ready.remote(spec.get("startup_timeout", 900)))
        except ray.exceptions.RayTaskError as err:
            self._abandon(name, spell)
            cause = err.cause if isinstance(getattr(err, "cause", None), ServeError) else None
            raise ServeError(str(cause) if cause else f"server {name!r} failed to start: {err}") from None
        except BaseException:
            self._abandon(name, spell)
            raise
        spell.ready = time.time()
        with self._lock:
            self.urls[name] = url
            self.last_used[name] = spell.ready
        return url

    def _count_placed(self) -> None:
        """The most servers (and GPUs) placed at once: every actor holding its resources, loading or serving."""
        placed = [n for n in self.actors if self.spells[n] and self.spells[n][-1].placed is not None
                  and self.spells[n][-1].stopped is None]
        self.max_up = max(self.max_up, len(placed))
        self.max_gpus_up = max(self.max_gpus_up, sum(self.demands[n].get("GPU", 0.0) for n in placed))

    def _abandon(self, name: str, spell: Spell) -> None:
        with self._lock:
            self.waiting.pop(name, None)
            spell.stopped = time.time()
            actor = self.actors.pop(name, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)

    def _stop(self, name: str) -> None:
        """Stop the process and release the actor (its GPUs go back to Ray)."""
        ray = self._ray
        actor = self.actors.pop(name, None)
        self.urls.pop(name, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.get(actor.stop.remote(), timeout=120)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self.spells[name] and self.spells[name][-1].stopped is None:
            self.spells[name][-1].stopped = time.time()


class ServerHandle:
    """What a label source holds for a server of the job's fleet: the fleet actor's name and the server's name;
    :meth:`url` asks the fleet (starting the server if it is down), :meth:`record` reports a batch's time in flight."""

    def __init__(self, fleet: str, name: str, who: str):
        self.fleet, self.name, self.who = fleet, name, who
        self._actor = None

    def _fleet(self):
        if self._actor is None:
            import ray

            self._actor = ray.get_actor(self.fleet)
        return self._actor

    def url(self) -> str:
        import ray

        try:
            return ray.get(self._fleet().url.remote(self.name))
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            raise (cause if isinstance(cause, ServeError) else ServeError(f"server {self.name!r}: {err}")) from None

    def record(self, t0: float, t1: float, requests: int) -> None:
        import ray

        # waited for: the job's GPU time is read right after its last round
        ray.get(self._fleet().record.remote(self.name, self.who, t0, t1, requests))

    def __reduce__(self):  # the actor handle is looked up again where it is unpickled
        return (ServerHandle, (self.fleet, self.name, self.who))


def start_fleet(specs: list[dict], name: str):
    """The job's :class:`ServerFleet` actor, named ``name``, pinned to the driver's node (it lives as long as the
    driver)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    cls = ray.remote(num_cpus=0, max_concurrency=64, scheduling_strategy=here)(ServerFleet)
    return cls.options(name=name).remote(specs)
