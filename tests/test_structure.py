"""The code's shape, as issue 50 asked for it and as docs/architecture.md describes it.

* The outputs tell job goals apart in one place (``outputs/goals.py``, :func:`goal_of`): the
  modules that format or ship a certificate hold at most a handful of ``if``/``elif`` lines that
  name a goal (ranking, recovery, aggregate, top-k, multi-task), where there were 43 before the
  goals were objects (counted with this test's own pattern).
* docs/architecture.md names every product module, so the map stays true to the code.
"""

import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOAL_BRANCH = re.compile(r"^\s*(if|elif)\b.*(ranking|recovery|aggregate|topk|TasksCertificate|claim is|\.claim\b|"
                         r"multi-task|per_task|pairwise)")
OUTPUTS = [*sorted((ROOT / "orchestrator" / "outputs").glob("*.py")), ROOT / "certsel" / "terminal.py"]
PRODUCT = ("certsel", "orchestrator", "workers", "policies")


def goal_branches(path: pathlib.Path) -> list[int]:
    return [k for k, line in enumerate(path.read_text().splitlines(), 1) if GOAL_BRANCH.search(line)]


def test_the_outputs_branch_on_job_goals_in_at_most_twelve_lines():
    found = {p.relative_to(ROOT).as_posix(): goal_branches(p) for p in OUTPUTS}
    found = {p: lines for p, lines in found.items() if lines}
    assert sum(map(len, found.values())) <= 12, found


def test_the_pattern_sees_a_goal_branch():
    assert GOAL_BRANCH.search("    if cert.ranking is not None:") and GOAL_BRANCH.search("elif cfg.recovery:")
    assert not GOAL_BRANCH.search("    if cert.selected is None:")


def test_the_architecture_names_every_product_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "__init__.py" or path.parent.name in ("run", "runtimes"):  # release 0.1's aliases
                continue
            if path.name not in text:
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"
