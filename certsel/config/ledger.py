"""Every front end keeps each claim's test in the label store's ledger (workers/claims.py) unless the job turns it off.

The engine takes ``state.store`` as given (None: no ledger); the front ends (``certsel run``, ``certsel gate``, the
Python API, inspect-ai's selections, rankings and early stopping) fill in certsel's home's ``labels.db`` when the job
names no store. ``state: {store: null}`` in the job file (or ``--set state.store=null``) turns it off explicitly: each
run is then a test of its own, and every output of it says so (:data:`OFF_LINE`)."""

from __future__ import annotations

import pathlib

from certsel.home import home

STORE_FILE = "labels.db"
# what every output of a run without the ledger says (the terminal, the report, selection.json's ledger block)
OFF_LINE = ("ledger: off (state.store: null): this statement holds for this run alone; a rerun of any of its claims "
            "is a new test, and reruns together can pass a false claim more often than delta (docs/gate.md, 'Reruns')")


def default_store() -> pathlib.Path:
    """certsel's home's label store, its folder made on first use (as the jobs folder is)."""
    home().mkdir(parents=True, exist_ok=True)
    return home() / STORE_FILE


def with_ledger(cfg):
    """``cfg`` with its ledger: the store it names, else certsel's home's; an explicit ``state.store: null`` stays
    off."""
    if cfg.state.store is not None or "store" in cfg.state.model_fields_set:
        return cfg
    return cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": default_store()})})


def raw_with_ledger(raw: dict, labels=None) -> dict:
    """A job's mapping with its ledger (``labels``: the store a command line names, first); an explicit
    ``state: {store: null}`` stays off unless ``labels`` names one."""
    state = dict(raw.get("state") or {})
    if labels is not None:
        state["store"] = str(pathlib.Path(labels).expanduser().absolute())
    elif "store" not in state:
        state["store"] = str(default_store())
    return {**raw, "state": state}
