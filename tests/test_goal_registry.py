"""Goals are objects in a registry (orchestrator/outputs/goals/): each job is served by exactly one
registered goal, and a new goal kind is one registered class. Here a goal added in this file alone
(a release gate: a gate whose table also shows each candidate's margin to alpha) is taken up by
every output of a real job: the terminal, ``--format markdown``, the report, ``certsel show`` and
the MLflow run. A goal kind of the product is its module plus one import in goals/__init__.py
(and, when the job file asks for it by a key of its own, that key in certsel/config): at most
three files."""

import itertools
import sqlite3

import pytest

from certsel import cli
from certsel.orchestrator.outputs.goals import GOALS, Ask, Field, choose, register, unregister
from certsel.orchestrator.outputs.goals.all_tasks import MultiTaskGoal
from certsel.orchestrator.outputs.goals.gate import GateRecovery, GateRisk
from certsel.orchestrator.outputs.goals.ranking import RankingGoal
from certsel.orchestrator.outputs.goals.recovery import RecoverySelection
from certsel.orchestrator.outputs.goals.risk import RiskSelection
from certsel.orchestrator.outputs.goals.stacked import StackedRecovery, StackedRisk
from helpers.cli import job_file


EXPECTED = {Ask(): RiskSelection, Ask(recovery=True): RecoverySelection, Ask(ranking=True): RankingGoal,
            Ask(stacked=True): StackedRisk, Ask(stacked=True, recovery=True): StackedRecovery,
            Ask(gates=True): GateRisk, Ask(gates=True, recovery=True): GateRecovery, Ask(tasks=True): MultiTaskGoal}


@pytest.mark.unit
def test_every_job_is_served_by_its_goal_and_a_clash_is_one_line():
    for ask, goal in EXPECTED.items():
        assert type(choose(ask)) is goal, ask
    for flags in itertools.product([False, True], repeat=5):  # the rest: none a job file can ask for (the
        try:  # schema refuses them first); a goal, or the one-line refusal, never another error
            choose(Ask(*flags))
        except ValueError as err:
            assert str(err).startswith("no single goal for this job") and "\n" not in str(err)
    with pytest.raises(ValueError, match="goals that serve it: ranking, stacked risk"):
        choose(Ask(ranking=True, stacked=True))


class ReleaseGate(GateRisk):
    """A gate of releases: the gate's table and words, and each candidate's margin between alpha and its bound."""

    name = "release gate (test)"

    @classmethod
    def asked(cls, ask: Ask) -> bool:
        return ask.gates and not ask.recovery and ask.job.startswith("release-")

    def headline(self, cert) -> str:
        return "release " + super().headline(cert)

    def fields(self, cert):
        alpha = cert.procedure.alpha
        margin = Field("margin to alpha", lambda c: "" if c.upper_bound is None else f"{alpha - c.upper_bound:+.3f}")
        return [*super().fields(cert), margin]

    def params(self, cfg, data) -> dict:
        return {**super().params(cfg, data), "release_gate": True}


@pytest.fixture()
def release_goal():
    register(ReleaseGate)
    try:
        yield
    finally:
        unregister(ReleaseGate.name)


@pytest.mark.integration
def test_a_goal_added_in_one_file_reaches_every_output(release_goal, tmp_path, capsys):
    assert type(choose(Ask(gates=True, job="release-7"))) is ReleaseGate
    assert type(choose(Ask(gates=True, job="nightly"))) is GateRisk  # other gates keep their goal
    job = job_file(tmp_path, name="release-7", procedure="gate", objective=None,
                   scheduling={"start": "top"})
    home = tmp_path / "home"
    assert cli.main(["run", str(job), "--no-progress", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "margin to alpha" in out and "release gate:" in out
    [folder] = [p for p in (home / "jobs").iterdir() if p.is_dir()]
    assert "margin to alpha" in (folder / "report.html").read_text()
    assert cli.main(["show", folder.name, "--home", str(home), "--format", "markdown"]) == 0
    shown = capsys.readouterr().out
    assert "margin to alpha" in shown and "release gate:" in shown
    with sqlite3.connect(tmp_path / "store.db") as con:
        assert con.execute("select value from params where key = 'release_gate'").fetchone() == ("True",)
    assert ReleaseGate.name in GOALS
