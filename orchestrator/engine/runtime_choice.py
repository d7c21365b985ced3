"""Which runtime a job gets (``runtime: auto | local | ray``, ``--runtime``), and why, in one line.

The two runtimes (:mod:`.runtime`) host the same candidates and hand them the same requests, so a job's certificate,
label log and MLflow run are the same under both (tests/test_runtime_choice.py); they differ only in what they cost.
Ray pays where work runs in parallel for long enough to outweigh its start (a few seconds for the cluster, more for
each worker process to import the product): model servers and model runs (live, lm-eval, a Python label function), a
cluster, GPUs. A recorded table's labels are arithmetic, milliseconds a round, so ``auto`` runs it in-process: on two
cores Ray took 2.8x as long with 4 candidates, 1.8x with 32 and 1.4x with 128 (benchmarks/overhead.py, docs/results.md
"Overhead"); past that, a many-core machine may cross over, and ``runtime: ray`` asks for it.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from certsel.errors import InputError


class RuntimeKind(str, enum.Enum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime a job runs on and the rule's reason, as its one line of output says it."""

    kind: RuntimeKind
    reason: str

    def line(self) -> str:
        if self.kind is RuntimeKind.LOCAL:
            return f"runtime: in-process ({self.reason}; --runtime ray runs it on Ray)"
        return f"runtime: Ray ({self.reason}; --runtime local runs it in-process)"


def choose_runtime(cfg) -> RuntimeChoice:
    """``cfg.runtime`` resolved: ``local`` and ``ray`` as asked (``local`` where the job needs Ray is bad input),
    ``auto`` by :func:`ray_needed`."""
    from certsel.orchestrator.inputs.sources import source_of

    need = ray_needed(cfg, source_of(cfg))
    if cfg.runtime == "ray":
        return RuntimeChoice(RuntimeKind.RAY, "runtime: ray asked")
    if cfg.runtime == "local":
        if need is not None and need.startswith(_MUST):
            raise InputError(f"runtime: local: {need.removeprefix(_MUST)} (runtime: auto or ray)")
        return RuntimeChoice(RuntimeKind.LOCAL, "runtime: local asked")
    if need is not None:
        return RuntimeChoice(RuntimeKind.RAY, need.removeprefix(_MUST))
    return RuntimeChoice(RuntimeKind.LOCAL, f"{_WORDS.get(source_of(cfg).name, 'its source')}: its labels are "
                                            "lookups, nothing runs long enough in parallel to pay for starting Ray")


_WORDS = {"replay": "a recorded table", "tasks": "recorded tables"}
_MUST = "must: "  # a reason only Ray can serve (its servers are Ray actors, its cluster is Ray's)


def ray_needed(cfg, kind) -> str | None:
    """Why this job runs on Ray (prefixed :data:`_MUST` where only Ray can run it), or None: in-process pays."""
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        return f"{_MUST}a Ray cluster is named ({'ray.address' if cfg.ray.address else 'RAY_ADDRESS'}: {address})"
    if kind.server_specs(cfg):
        return f"{_MUST}the job starts its own model servers (live.serve), which run as Ray actors"
    if kind.parallel:
        return f"the {kind.name} source's labels come from model calls that run in parallel across candidates"
    return None
