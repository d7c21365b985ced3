"""certsel's pytest plugin, registered through the ``pytest11`` entry point: ``pip install certsel`` is all it takes.

    import pytest

    @pytest.mark.certsel_gate("gates/recovery.yaml", only=["w4a16"])
    def test_the_quantized_model_keeps_95_percent():
        pass                                  # the gate runs first; the body may check more

    def test_no_regression(certsel_gate):     # or the fixture, inside the test
        res = certsel_gate("gates/regression.yaml", baseline="v1.3", margin=0.02)

A gated test passes on pass, fails with each failed candidate's certified bound on fail, and on undecided skips
(default) or xfails (``--certsel-undecided xfail``, or ``certsel_undecided = xfail`` in the ini file). Each candidate's
line (outcome, labels, bound, e-value) goes to the JUnit XML as a property and to the terminal's report section.
The marker's and fixture's keywords are :func:`certsel.gate`'s, plus ``baseline``, ``margin`` and ``superiority`` for a
regression gate; tracking is off unless ``track=True``.
"""

from __future__ import annotations

import pytest

UNDECIDED = ("skip", "xfail")


def pytest_addoption(parser):
    group = parser.getgroup("certsel")
    group.addoption("--certsel-undecided", choices=UNDECIDED, default=None,
                    help="what an undecided certsel gate does to its test: skip (default) or xfail")
    parser.addini("certsel_undecided", "what an undecided certsel gate does to its test: skip or xfail", default="skip")


def pytest_configure(config):
    config.addinivalue_line("markers", "certsel_gate(job, only=None, **kw): gate a certsel job before the test runs: "
                                       "pass on pass, fail with the bound on fail, skip or xfail on undecided")
    mode = config.getoption("--certsel-undecided") or config.getini("certsel_undecided")
    if mode not in UNDECIDED:
        raise pytest.UsageError(f"certsel_undecided: {mode!r} is not one of {', '.join(UNDECIDED)}")


def _undecided_mode(config) -> str:
    return config.getoption("--certsel-undecided") or config.getini("certsel_undecided")


def run_gate(item, job, *, baseline=None, margin=None, superiority=False, track=False, **kw):
    """Gate ``job`` for the test ``item`` and turn the outcome into the test's; the lines go to its report."""
    from certsel.gates import RegressionAsk, gate

    res = gate(job, track=track, regression=RegressionAsk.of(baseline, margin, superiority), **kw)
    lines = [r.line() for r in res.rows]
    for line in lines:
        item.user_properties.append(("certsel", line))
    item.add_report_section("call", "certsel gate", "\n".join(lines))
    bad = "\n".join(r.line() for r in res.rows if r.outcome != "pass")
    if res.exit_code == 1:
        pytest.fail(f"certsel gate: {len(res.selection.gate.failed)} candidate(s) failed\n{bad}", pytrace=False)
    if res.exit_code == 3:
        message = f"certsel gate: undecided within the budget\n{bad}"
        if _undecided_mode(item.config) == "xfail":
            pytest.xfail(message)
        pytest.skip(message)
    return res


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("certsel_gate")
    if marker is None:
        return
    if not marker.args:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.certsel_gate needs the job file as its first argument")
    run_gate(item, *marker.args, **marker.kwargs)


@pytest.fixture
def certsel_gate(request):
    """Gate a job inside the test: ``certsel_gate(job, only=..., baseline=..., margin=...)`` returns the
    :class:`~certsel.gates.GateResult` on pass, and fails, skips or xfails the test otherwise."""
    return lambda job, **kw: run_gate(request.node, job, **kw)
