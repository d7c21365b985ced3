"""The engine's behaviour against the recorded baseline (benchmarks/behaviour.py).

A refactoring must leave selections, certificates, e-values, bounds and label orders as they
were. The full comparison (14 cases: every policy kind, strategy, observation, procedure, the
audit and the vectorised replications) is ``python benchmarks/behaviour.py --compare
benchmarks/behaviour_baseline.json.gz`` and expects a difference of exactly 0 on one machine;
here a few cases are compared on every run, numbers to 1e-9 (another numpy build may round the
last bits differently), everything discrete exactly.
"""

import copy
import importlib.util
import pathlib

import pytest


SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "behaviour.py"
spec = importlib.util.spec_from_file_location("behaviour", SCRIPT)
behaviour = importlib.util.module_from_spec(spec)
spec.loader.exec_module(behaviour)
BASELINE = behaviour.read(SCRIPT.with_name("behaviour_baseline.json.gz"))
CASES = dict(behaviour.cases())


# the fast tier guards the in-process engine on the two smallest cases (a Seq selection and a
# Seq ranking, about a second each); the larger ones are integration
@pytest.mark.parametrize("name", [
    "quantization-seq", "ranking-seq",
    *(pytest.param(n, marks=pytest.mark.integration)
      for n in ("quantization-default", "prompts-default", "ranking-best", "audit-r-autoeval+", "select-replicated")),
])
def test_behaviour_equals_the_baseline(name):
    bad, worst = behaviour.compare({name: BASELINE[name]}, {name: CASES[name]()}, tol=1e-9)
    assert not bad, f"{name} differs from the recorded baseline (largest numeric difference {worst:.3g})"


def test_the_comparison_sees_a_changed_label_and_a_changed_number():
    case = BASELINE["ranking-best"]
    changed = copy.deepcopy(case)
    changed["selected"] = "someone else"
    changed["records"][0]["max_log_e"] += 1e-6
    bad, worst = behaviour.compare({"x": case}, {"x": changed}, tol=1e-9)
    assert bad == ["x"] and worst == pytest.approx(1e-6, rel=1e-3)
    assert behaviour.compare({"x": case}, {"x": case}) == ([], 0.0)
