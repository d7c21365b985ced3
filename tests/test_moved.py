"""Release 0.1's module paths (orchestrator.run.*, orchestrator.runtimes.*) keep working for one
release: each is its new module itself, and importing it warns with the new path."""

import subprocess
import sys

import pytest

from certsel.orchestrator._moved import MOVED


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_path_is_the_new_module_and_warns(old, new):
    # a fresh interpreter: the warning is raised on the first import only
    code = f"""
import importlib, warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    old = importlib.import_module({old!r})
new = importlib.import_module({new!r})
assert old is new, (old, new)
assert [str(w.message) for w in seen if w.category is DeprecationWarning] == [
    "{old} moved to {new}; the old path goes in the next release"], [str(w.message) for w in seen]
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_plugin_written_against_the_old_paths_runs_a_job(tmp_path):
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
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("selected")
