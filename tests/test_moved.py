"""Release 0.1's module paths (orchestrator.run.*, orchestrator.runtimes.*) keep working for one
release: each is its new module itself, and importing it warns with the new path."""

import json
import pathlib
import subprocess
import sys

import pytest

from certsel.orchestrator._moved import MOVED

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_old_path_is_the_new_module_and_warns():
    # a fresh interpreter (a warning is raised on a module's first import only); each old
    # path imported on its own, its warnings recorded
    code = """
import importlib, json, sys, warnings
out = {}
for old, new in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    out[old] = [mod is importlib.import_module(new), [str(w.message) for w in seen if w.category is DeprecationWarning]]
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(MOVED)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert len(got) == len(MOVED) == 15
    for old, new in MOVED.items():
        same, warned = got[old]
        assert same, f"{old} is not {new}"
        assert warned == [f"{old} moved to {new}; the old path goes in the next release"], (old, warned)


@pytest.mark.integration  # a job in a subprocess
def test_a_plugin_written_against_the_old_paths_runs_a_job():
    """What a 0.1 plugin does: import the engine and the in-process runtime from their old
    paths and run a job with them; the result is the new engine's own type."""
    code = """
import warnings
warnings.simplefilter("ignore", DeprecationWarning)
from certsel.config import load_config
from certsel.orchestrator.run.engine import run_job
from certsel.orchestrator.runtimes.runtime import LocalRuntime
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.results.records import JobResult
cfg = load_config("examples/quantization.yaml", overrides=["budget.n=50"])
res = run_job(cfg, load_job_data(cfg), LocalRuntime())
assert isinstance(res, JobResult) and res.records, res
print("selected", res.selected)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("selected")
