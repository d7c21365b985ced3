import os
import re
import sys
import tempfile

import numpy as np
import pytest

# certsel's home (the default jobs folder and MLflow store) is a fresh folder per test
# process: no test writes to ~/.certsel or sees another's jobs (subprocesses inherit it)
os.environ["CERTSEL_HOME"] = tempfile.mkdtemp(prefix="certsel-home-")

from certsel.workers.replay import DEFAULT_TABLE, load_loss_table


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory, monkeypatch):
    """Each test its own certsel home: the front ends keep claims in its ledger (labels.db) by default, so a test that
    reruns a bundled example would otherwise continue another test's claims."""
    monkeypatch.setenv("CERTSEL_HOME", str(tmp_path_factory.mktemp("certsel-home")))


TIERS = ("integration", "slow", "vllm", "multinode", "label_studio")
# a module whose every test is in a tier: its pytestmark names one (a list's first entry included)
_TIERED = re.compile(r"^pytestmark\s*=\s*\[?\s*pytest\.mark\.(" + "|".join(TIERS) + r")\b", re.M)


def pytest_ignore_collect(collection_path, config):
    """``pytest -m unit`` does not import a module it would deselect whole (a tier's pytestmark, no test marked unit
    in it): the fast tier's collection then skips their imports (inspect-ai, MLflow, Ray, servers), a few seconds a
    worker. Any other selection collects everything."""
    if config.getoption("markexpr") != "unit" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    source = collection_path.read_text()
    return True if _TIERED.search(source) and "mark.unit" not in source else None


def pytest_collection_modifyitems(config, items):
    """Tests with none of the tier marks form the fast unit tier: ``pytest -m unit``."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in TIERS):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def trivia_best():
    return load_loss_table(DEFAULT_TABLE, judge="loss_judge_best")


@pytest.fixture(scope="session")
def trivia_bad():
    return load_loss_table(DEFAULT_TABLE, judge="loss_judge_bad")


@pytest.fixture()
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def alpaca():
    from helpers.alpacaeval import load_preference_table

    return load_preference_table()


@pytest.fixture(scope="module")
def ray_session(_one_ray_per_process):
    """A real local Ray, one per test process (its own instance, never one already running on the machine): started by
    the first module that asks and kept for the next, since a start costs seconds. A module that needs a Ray of another
    shape (a cluster, logical GPUs) shuts it down and starts its own; the next module asking gets a new one."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield


@pytest.fixture(scope="session")
def _one_ray_per_process():
    yield
    ray = sys.modules.get("ray")  # a process that never started Ray does not import it to say so
    if ray is not None and ray.is_initialized():
        ray.shutdown()
