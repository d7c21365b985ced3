"""A budget that cannot certify anything even with every loss at 0 is said before the job runs."""

import pathlib

from certsel.config import load_config
from certsel.orchestrator.inputs.feasibility import _estimation_reaches, _testing_reaches, feasibility_warning

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_a_hopeless_budget_is_named_with_the_smallest_one_that_could():
    cfg = load_config(EXAMPLES / "quantization.yaml", ["budget.n=5"])
    line = feasibility_warning(cfg, 48, 9960)
    assert line.startswith("warning: with budget.n = 5 no candidate can reach its level 0.1") and "\n" not in line
    need = int(line.split("budget.n = ")[-1].split()[0])
    assert _testing_reaches(cfg, 0.1, need) and not _testing_reaches(cfg, 0.1, need - 1)
    assert feasibility_warning(load_config(EXAMPLES / "quantization.yaml"), 48, 9960) is None
    # Bonferroni over 48 candidates needs more: the level is delta/K
    bon = load_config(EXAMPLES / "quantization.yaml", ["budget.n=" + str(need), "procedure=bonferroni"])
    assert "level 0.00208" in feasibility_warning(bon, 48, 9960)


def test_estimation_policies_and_the_test_set_size():
    cfg = load_config(EXAMPLES / "alpacaeval_ranking.yaml", ["procedure=fst", "order=[claude,claude-2]",
                                                             "candidates=[claude,claude-2]", "budget.n=5"])
    line = feasibility_warning(cfg, 2, 805)
    need = int(line.split("budget.n = ")[-1].split()[0])
    assert _estimation_reaches(cfg, 0.05, need, 805) and not _estimation_reaches(cfg, 0.05, need - 1, 805)
    # on a finite test set the whole set always decides: the interval is then the mean itself
    tiny = load_config(EXAMPLES / "alpacaeval_ranking.yaml", ["procedure=fst", "order=[claude,claude-2]",
                                                              "candidates=[claude,claude-2]", "alpha=0.001",
                                                              "budget.n=100"])
    need = int(feasibility_warning(tiny, 2, 805).split("budget.n = ")[-1].split()[0])
    assert 100 < need <= 805


def test_without_replacement_a_small_table_is_enough():
    """R-Eval at alpha = 0.01 needs more than 229 zero losses drawn i.i.d. (log 10 / -log 0.99
    for the best constant bet); from a 150-item table without replacement the items left soon
    cannot lift the mean to alpha, so the table itself is enough, and the smallest budget named
    fits in it."""
    sets = ["policy.kind=r-eval", "alpha=0.01", "budget.n=150"]
    iid = load_config(EXAMPLES / "quantization.yaml", sets)
    assert int(feasibility_warning(iid, 1, 150).split("budget.n = ")[-1].split()[0]) >= 229
    wor = load_config(EXAMPLES / "quantization.yaml", [*sets, "policy.sampling=without-replacement"])
    assert feasibility_warning(wor, 1, 150) is None
    short = load_config(EXAMPLES / "quantization.yaml", [*sets[:2], "budget.n=5", "policy.sampling=without-replacement"])
    need = int(feasibility_warning(short, 1, 150).split("budget.n = ")[-1].split()[0])
    assert 5 < need <= 150 and _testing_reaches(short, 0.1, need, 150) and not _testing_reaches(short, 0.1, need - 1, 150)
