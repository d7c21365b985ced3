"""One decision core, one path: ``certsel.inspect`` feeds the engine's sessions
(``engine/session.py``: a selection; ``engine/ranking_session.py``: a ranking) and builds no
candidate record, selection, final set, joint bound or pair test of its own. The engine's rounds
feed the same sessions, so there is nothing left for a comparison of two paths to check (issue
50's differential test of inspect against a table job was retired with the second path).

The check is static, over every module of ``certsel/inspect``: what it imports from the engine
and the results, and what it calls."""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
INSPECT = sorted((ROOT / "certsel" / "inspect").glob("*.py"))
# what a front end may take from the engine: the sessions, and the decision core's types to read decisions with
ALLOWED = {"certsel.orchestrator.engine.session": {"SelectionSession", "new_records"},
           "certsel.orchestrator.engine.ranking_session": {"PairTests", "RankingSession"},
           "certsel.orchestrator.engine.decisions": {"Certify", "RankingRules"},
           "certsel.orchestrator.engine.derived": {"derive"},
           "certsel.orchestrator.results.records": {"Status"}}
# calls that build what only a session builds
FORBIDDEN_CALLS = {"CandidateRecord", "JobResult", "settle", "final_certified", "reconcile", "decision_levels_of",
                   "bound_levels", "joint_bounds", "open_pairs_of", "new_ties", "ranking_outcome", "pair_policies",
                   "simultaneous_bounds", "totals"}


def findings(source: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(("certsel.orchestrator.engine", "certsel.orchestrator.results.records")):
                allowed = ALLOWED.get(node.module, set())
                out += [f"imports {node.module}.{a.name}" for a in node.names if a.name not in allowed]
            if node.module == "certsel.orchestrator.engine":
                out += [f"imports certsel.orchestrator.engine.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            receiver = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else ""
            if name in FORBIDDEN_CALLS and "session" not in receiver:  # a session's own methods are the one path
                out.append(f"calls {name}")
            if name == "selection" and isinstance(node.func, ast.Attribute) and getattr(
                    node.func.value, "attr", getattr(node.func.value, "id", "")) in ("proc", "procedure"):
                out.append("calls a procedure's selection")
    return out


def test_inspect_builds_no_record_selection_or_bound_of_its_own():
    found = {p.name: f for p in INSPECT if (f := findings(p.read_text()))}
    assert INSPECT and not found, found


@pytest.mark.parametrize("planted", [
    "from certsel.orchestrator.results.records import CandidateRecord\n",
    "from certsel.orchestrator.engine import decisions\n",
    "from certsel.orchestrator.engine.decisions import joint_bounds\n",
    "r = CandidateRecord('a', 0)\n",
    "x = decisions.final_certified(ev, rules)\n",
    "k = self.proc.selection(mask, key)\n",
    "p = pair_policies(kind, settings, inputs, bet)\n",
])
def test_the_check_sees_each_kind_of_second_path(planted):
    assert findings(planted)
