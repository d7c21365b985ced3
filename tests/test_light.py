"""Nothing imported before it is needed: ``certsel --help`` and bad input (a misspelt key, a bad value, a missing
file) exit after reading the job file, without Ray, MLflow, matplotlib, httpx, scipy or pyarrow, each in a fresh
interpreter (the product's first lines, as a user starts it)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("ray", "mlflow", "matplotlib", "httpx", "scipy", "pyarrow", "inspect_ai", "sklearn", "torch", "sqlalchemy")

PROBE = """
import json, sys
from certsel import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps([code, sorted({m.split(".")[0] for m in sys.modules})]))
"""


def _imports(args, cwd):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    code, modules = json.loads(out.stdout.strip().splitlines()[-1])
    return code, set(modules) & set(HEAVY), out.stderr


@pytest.mark.parametrize("command", ["run", "gate"])
@pytest.mark.parametrize("job, error", [
    ("data: {path: t.parquet, human: loss}\nalpah: 0.1\n", "unknown key 'alpah' (did you mean 'alpha'?)"),
    ("data: {path: t.parquet, human: loss}\nalpha: 2\n", "alpha"),
    ("data: {path: missing.parquet, human: loss}\npolicy: {kind: r-eval}\nprocedure: gate\n", "missing.parquet"),
])
def test_bad_input_exits_before_anything_heavy_is_imported(tmp_path, command, job, error):
    (tmp_path / "t.parquet").write_bytes(b"")
    (tmp_path / "job.yaml").write_text(job)
    code, heavy, err = _imports([command, "job.yaml"], tmp_path)
    assert code == 2 and error in err and err.count("\n") == 1, err
    assert heavy == set(), f"imported before the job file was checked: {sorted(heavy)}"


def test_help_imports_nothing_heavy(tmp_path):
    code, heavy, _ = _imports(["--help"], tmp_path)
    assert code == 0 and heavy == set()
