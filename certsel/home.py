"""certsel's home: the one folder where a job's outputs go unless the job says otherwise.

``$CERTSEL_HOME`` if set, else ``~/.certsel``: ``jobs/`` holds every job's folder, ``mlruns.db`` with
``mlartifacts/`` is the default MLflow store. One place, so ``certsel jobs`` and ``certsel show`` find a job wherever
it was run from. ``state.dir`` or ``tracking.uri`` (or ``MLFLOW_TRACKING_URI``) put either elsewhere; ``certsel run
--home DIR`` moves both for one command.
"""

from __future__ import annotations

import os
import pathlib

HOME_ENV = "CERTSEL_HOME"


def home() -> pathlib.Path:
    """The home folder (absolute; not created here)."""
    raw = os.environ.get(HOME_ENV) or "~/.certsel"
    return pathlib.Path(raw).expanduser().absolute()


def jobs_dir() -> pathlib.Path:
    """The default jobs folder, ``HOME/jobs``."""
    return home() / "jobs"


def tracking_uri() -> str:
    """The default MLflow store, ``sqlite:///HOME/mlruns.db`` (an absolute path: four slashes)."""
    return f"sqlite:///{home() / 'mlruns.db'}"
