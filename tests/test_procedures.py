"""The procedures' registry objects (policies/procedures.py): their certified sets agree
with the classical procedures, their joint bounds agree with their decisions, and the
selected candidate's joint bound keeps the level it is stated at (simulation), where its own
bound alone does not."""

import numpy as np
import pytest
from certsel.orchestrator.audit.base import clopper_pearson
from certsel.policies.procedures import Procedure, get_procedure
from certsel.policies import bonferroni, fixed_sequence, holm
from helpers.simulate import selection_trial

ALPHA, DELTA = 0.1, 0.1
NAN = np.nan


@pytest.mark.parametrize("name, reference", [("fst", fixed_sequence), ("bonferroni", bonferroni), ("holm", holm)])
def test_certified_sets_agree_with_the_classical_procedures(name, reference):
    """On 2,000 random batches of 12 log e-values (away from exact ties with a threshold),
    each procedure's log-space decision is the classical one on E = exp(log E)."""
    rng = np.random.default_rng(0)
    log_e = rng.normal(2.5, 1.5, size=(2000, 12))
    np.testing.assert_array_equal(get_procedure(name).certified(log_e, DELTA), reference(np.exp(log_e), DELTA))


def test_fixed_sequence_joint_bounds():
    """The certified prefix gets alpha, the first failure its own bound at delta, the rest no
    statement; with the whole sequence certified the last one keeps its own bound."""
    fst = get_procedure("fst")
    cert = np.array([True, True, False, False])
    np.testing.assert_array_equal(fst.joint_levels(DELTA, cert), [NAN, NAN, DELTA, NAN])
    own = np.array([NAN, NAN, 0.15, NAN])
    np.testing.assert_array_equal(fst.simultaneous_bounds(DELTA, ALPHA, cert, own), [ALPHA, ALPHA, 0.15, NAN])
    every = np.ones(4, dtype=bool)
    np.testing.assert_array_equal(fst.joint_levels(DELTA, every), [NAN, NAN, NAN, DELTA])
    np.testing.assert_array_equal(fst.simultaneous_bounds(DELTA, ALPHA, every, np.array([NAN, NAN, NAN, 0.07])),
                                  [ALPHA, ALPHA, ALPHA, 0.07])


def test_bonferroni_joint_bounds_are_the_own_bounds():
    bon = get_procedure("bonferroni")
    cert = np.array([True, False, True])
    np.testing.assert_allclose(bon.joint_levels(DELTA, cert), DELTA / 3)
    own = np.array([0.08, 0.2, 0.095])
    np.testing.assert_array_equal(bon.simultaneous_bounds(DELTA, ALPHA, cert, own), own)


def test_holm_joint_bounds():
    """Not all certified: alpha for the certified, the others at delta/m (m of them); all
    certified: min(alpha, own bound at delta/K)."""
    holm_ = get_procedure("holm")
    cert = np.array([True, False, True, False])
    np.testing.assert_array_equal(holm_.joint_levels(DELTA, cert), [NAN, DELTA / 2, NAN, DELTA / 2])
    np.testing.assert_array_equal(holm_.simultaneous_bounds(DELTA, ALPHA, cert, np.array([NAN, 0.3, NAN, 0.12])),
                                  [ALPHA, 0.3, ALPHA, 0.12])
    every = np.ones(3, dtype=bool)
    np.testing.assert_allclose(holm_.joint_levels(DELTA, every), DELTA / 3)
    np.testing.assert_array_equal(holm_.simultaneous_bounds(DELTA, ALPHA, every, np.array([0.05, 0.13, NAN])),
                                  [0.05, ALPHA, ALPHA])


def test_the_default_is_the_family_wise_statement_and_disagreement_is_an_error():
    class Plain(Procedure):
        name = "plain-test"

    cert = np.array([True, False])
    np.testing.assert_array_equal(Plain().simultaneous_bounds(DELTA, ALPHA, cert, np.array([NAN, NAN])), [ALPHA, NAN])
    with pytest.raises(ValueError, match="disagree"):  # a certified candidate's own bound above alpha
        get_procedure("bonferroni").simultaneous_bounds(DELTA, ALPHA, cert, np.array([0.12, 0.3]))
    with pytest.raises(ValueError, match="disagree"):  # an uncertified one at or below alpha
        get_procedure("bonferroni").simultaneous_bounds(DELTA, ALPHA, cert, np.array([0.05, 0.1]))


@pytest.mark.slow
@pytest.mark.parametrize("procedure", ["bonferroni", "holm", "fst"])
def test_the_selected_candidates_joint_bound_keeps_its_level(procedure):
    """20 candidates all at R = alpha - 1e-6, a 90%-accurate judge, R-AutoEval+ (UP), rounds
    of 25, 300 repetitions (benchmarks/selection_bounds.py prints 2,000, table in
    docs/statistics.md): the selected candidate's joint bound misses R at most as often as its
    stated level delta allows (the 99% Clopper-Pearson lower bound over all runs is at most
    delta: 44 misses of 300 fail it); under Bonferroni its own bound, stated at delta/K,
    misses more often than delta/K: a per-candidate level does not survive the selection
    (11 of 300 with this seed, a 99% lower bound of 0.016 > 0.005)."""
    out = selection_trial(procedure, reps=300, seed=1)
    reps = out["reps"]
    assert out["selections"] > 10
    assert clopper_pearson(out["joint_misses"], reps)[0] <= DELTA, out
    if procedure == "bonferroni":
        assert out["joint_misses"] > 0  # real bounds, not alpha: the check above can fail
        assert clopper_pearson(out["own_misses"], reps)[0] > out["own_level"], out


def test_scheduling_hooks_decide_on_frozen_views_and_return_decisions():
    """FST's hooks see frozen views and return what to do: the frontier plus look-ahead, and a
    Stop for every unfinished candidate after the first failure; finished ones are left alone."""
    import dataclasses

    from certsel.policies.procedures import CandidateView, Stop

    fst = get_procedure("fst")
    seq = (CandidateView("a", True, False), CandidateView("b", True, True), CandidateView("c", False, False),
           CandidateView("d", True, False), CandidateView("e", False, False))
    with pytest.raises(dataclasses.FrozenInstanceError):
        seq[0].finished = False
    assert fst.after_settle(seq) == [Stop("c", "after b failed"), Stop("e", "after b failed")]
    assert fst.after_settle(seq[:1]) == [] and get_procedure("holm").after_settle(seq) == []
    open_ = [v for v in seq if not v.finished]
    assert [v.name for v in fst.active(open_, 0)] == ["c"] and fst.active(open_, 5) == open_


def test_procedures_import_nothing_that_can_change_a_record():
    """The procedures' module imports only the standard library's math and typing helpers,
    numpy and the registry mechanism: no record, scheduler or engine type reaches it."""
    import ast
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "policies" / "procedures.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or ".").split(".")[0])
    assert found <= {"__future__", "math", "dataclasses", "typing", "numpy", "registry"}, found


def test_get_procedure_is_called_only_where_a_config_is_built():
    """The job's procedure is resolved once, in the config (RunConfig.proc); the engine, the
    outputs and the audits read it from there. Outside the config only the registry itself looks a
    name up."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    allowed = {"certsel/config/schema.py", "policies/procedures.py"}
    calls = []
    for folder in ("certsel", "orchestrator", "workers", "policies"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "get_procedure":
                    calls.append(str(path.relative_to(root)))
    assert calls and set(calls) <= allowed, sorted(set(calls) - allowed)
