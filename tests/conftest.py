import os
import pathlib
import tempfile

import numpy as np
import pytest
import ray

# certsel's home (the default jobs folder and MLflow store) is a fresh folder per test
# process: no test writes to ~/.certsel or sees another's jobs (subprocesses inherit it)
os.environ["CERTSEL_HOME"] = tempfile.mkdtemp(prefix="certsel-home-")

from certsel.workers.replay import DEFAULT_TABLE, load_loss_table


TIERS = ("integration", "slow", "vllm", "multinode")


# The slowest test files (measured with --durations, slowest first) start first: the two test
# processes take files in collection order (--no-loadscope-reorder), and a long file left to
# the end would run alone on one core while the other sits idle.
SLOW_FIRST = ("test_gpu_schedule.py", "test_multinode.py", "test_cli_outputs.py", "test_resume.py",
              "test_run_cli.py", "test_stratified.py", "test_serving.py", "test_tracking.py",
              "test_extensions.py", "test_lm_eval_source.py", "test_cli.py", "test_lm_eval_logs.py",
              "test_api.py", "test_audit.py")


def pytest_collection_modifyitems(config, items):
    """Tests with none of the tier marks form the fast unit tier: ``pytest -m unit``; the
    slowest files first (a stable sort: each file's tests keep their order)."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in TIERS):
            item.add_marker(pytest.mark.unit)
    missing = [name for name in SLOW_FIRST if not (pathlib.Path(__file__).parent / name).is_file()]
    if missing:  # a renamed file would silently lose its place
        raise pytest.UsageError(f"conftest.SLOW_FIRST names test files that do not exist: {', '.join(missing)}")
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


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
def ray_session():
    """A real local Ray for one test module (its own instance, never one already running)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
