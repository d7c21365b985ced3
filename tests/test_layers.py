"""Dependencies one way: cli -> orchestrator -> {config, workers} -> policies, and inside
orchestrator: commands -> {outputs, audit, engine} -> results -> inputs.

Every import statement of the package (module level and inside functions) is read with
``ast`` and mapped to its layer. import-linter cannot see this package's layout (the
subpackages live in top-level folders mapped by ``package-dir``, which grimp does not
follow), so the same contracts are checked here: no layer imports one above it, the two
middle layers do not import each other, the statistics import no I/O, Ray, MLflow or
HTTP library, and no two modules import each other, directly or round a loop (imports
inside functions included).
"""

import ast
import pathlib

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = pathlib.Path(__file__).resolve().parents[1]
# package -> its folder, in layer order (top first); "certsel" holds cli.py, api.py, terminal.py, config/, errors.py
FOLDERS = {"certsel.orchestrator": "orchestrator", "certsel.workers": "workers", "certsel.policies": "policies"}
# the front ends (the command line, the Python API, inspect-ai managers, terminal output) sit on top
RANK = {"certsel.cli": 0, "certsel.api": 0, "certsel.inspect": 0, "certsel.terminal": 0, "certsel._version": 3, "certsel.orchestrator": 1, "certsel.config": 2, "certsel.workers": 2,
        "certsel.errors": 3, "certsel.home": 3, "certsel.policies": 3}
# orchestrator's sub-packages in layer order (top first); siblings of one rank do not import each other
SUB_RANK = {"commands": 0, "outputs": 1, "audit": 1, "engine": 1, "results": 2, "inputs": 3}
FORBIDDEN_IN_POLICIES = {"ray", "mlflow", "httpx", "pyarrow", "yaml", "certsel.errors"}


def modules():
    """(dotted name, path) of every module of the package, subpackages included."""
    for package, folder in [("certsel", ROOT / "certsel"), *((p, ROOT / f) for p, f in FOLDERS.items())]:
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join([package, *parts]), path


def imports(name: str, path: pathlib.Path):
    """The absolute names a module imports (relative imports resolved)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]  # what relative imports start from
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def layer(module: str) -> str | None:
    """The layer a certsel module belongs to (None for the package root and non-certsel modules)."""
    return next((lay for lay in sorted(RANK, key=len, reverse=True) if module == lay or module.startswith(lay + ".")),
                None)


EDGES = sorted({(layer(name), layer(target), name, target)
                for name, path in modules() for target in imports(name, path)
                if layer(name) and layer(target) and layer(name) != layer(target)})


def test_every_module_is_in_a_layer():
    assert {layer(name) for name, _ in modules()} - {None} == set(RANK)
    assert len(EDGES) > 20  # the scan sees the package's imports


@pytest.mark.parametrize("upper,lower", [(a, b) for a in RANK for b in RANK if RANK[a] < RANK[b]])
def test_no_layer_imports_one_above_it(upper, lower):
    wrong = [f"{n} imports {t}" for a, b, n, t in EDGES if a == lower and b == upper]
    assert not wrong, "; ".join(wrong)


def test_config_and_workers_are_independent():
    wrong = [f"{n} imports {t}" for a, b, n, t in EDGES if {a, b} == {"certsel.config", "certsel.workers"}]
    assert not wrong, "; ".join(wrong)


def test_the_statistics_import_no_io():
    wrong = [f"{name} imports {t}" for name, path in modules() if layer(name) == "certsel.policies"
             for t in imports(name, path) if t.split(".")[0] in FORBIDDEN_IN_POLICIES or t in FORBIDDEN_IN_POLICIES]
    assert not wrong, "; ".join(wrong)


def test_the_config_schema_reads_no_files():
    """YAML, overrides, plugins and sys.path live in config.loading; the schema only validates."""
    io = {"yaml", "sys", "importlib", "certsel.config.loading"}
    wrong = [f"{name} imports {t}" for name, path in modules() if name in ("certsel.config.schema",
             "certsel.config.sources", "certsel.config.base") for t in imports(name, path) if t in io]
    assert not wrong, "; ".join(wrong)
    assert {"certsel.config.schema", "certsel.config.sources", "certsel.config.loading"} <= {n for n, _ in modules()}


def test_no_import_cycle():
    names = [name for name, _ in modules()]
    where = {name: k for k, name in enumerate(names)}
    rows, cols = [], []
    for name, path in modules():
        for target in imports(name, path):
            while target and target not in where:  # "pkg.module.symbol" -> "pkg.module"
                target = target.rpartition(".")[0]
            if target and target != name:
                rows.append(where[name])
                cols.append(where[target])
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(graph, directed=True, connection="strong")
    cycles = [[names[k] for k in np.flatnonzero(label == c)] for c in np.unique(label) if (label == c).sum() > 1]
    assert not cycles, f"import cycles: {cycles}"


def sub_package(module: str) -> str | None:
    """The orchestrator sub-package a module belongs to (None outside them)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["certsel", "orchestrator"] and len(parts) > 3 else None


def upward_imports(sources) -> list[str]:
    """'a imports b' for every import, in (dotted name, path) pairs, from an orchestrator
    sub-package into one of the same rank or above it."""
    wrong = set()
    for name, path in sources:
        here = sub_package(name)
        if here is None:
            continue
        for target in imports(name, path):
            there = sub_package(target + ".")  # "certsel.orchestrator.outputs" is the package itself
            if there in SUB_RANK and there != here and SUB_RANK[there] <= SUB_RANK[here]:
                wrong.add(f"{name} ({here}) imports {there}")
    return sorted(wrong)


def test_orchestrator_sub_packages_are_declared():
    found = {sub_package(name) for name, _ in modules()} - {None}
    assert found == set(SUB_RANK)


def test_orchestrator_sub_packages_import_only_below():
    assert not upward_imports(modules()), "; ".join(upward_imports(modules()))


@pytest.mark.parametrize("importer,line", [
    ("inputs/planted.py", "from certsel.orchestrator.results.records import CandidateRecord"),
    ("results/planted.py", "import certsel.orchestrator.engine.driver"),
    ("engine/planted.py", "from certsel.orchestrator.outputs import report"),
    ("engine/planted.py", "from ..outputs.report import write_report"),
    ("outputs/planted.py", "from certsel.orchestrator.commands.job import execute"),
])
def test_a_planted_upward_import_is_found(tmp_path, importer, line):
    """The check is not blind: one planted import from below (or from a sibling) fails it."""
    path = tmp_path / importer
    path.parent.mkdir(parents=True)
    path.write_text(f"def f():\n    {line}\n")
    name = "certsel.orchestrator." + importer.removesuffix(".py").replace("/", ".")
    wrong = upward_imports([*modules(), (name, path)])
    assert len(wrong) == 1 and wrong[0].startswith(name)
