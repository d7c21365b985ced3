"""The certificate is read by attribute everywhere but where it is built: no module that
formats or ships it (outputs/, the terminal, the command line, the Python API) reads one of
its fields by string key (``x["evidence"]``, ``x.get("e_value")``, ``"claim" in x``).

The certificate's parts have no key access (a read by key raises TypeError); this static
check also covers the paths no test reaches. It flags a string key that names a certificate field; a few such keys are also keys of plain
dicts these modules build (listed with the reason), and are flagged everywhere else."""

import ast
import dataclasses
import pathlib

import pytest
from pydantic import BaseModel

from certsel.orchestrator.outputs import selection_schema
from certsel.orchestrator.results.ranking import Ranking, TopK

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[1]
# where the certificate is built (its fields are dict keys there) and its schema
OWN = {"orchestrator/outputs/certificate.py", "orchestrator/outputs/selection_schema.py",
       "orchestrator/outputs/tasks_schema.py"}
READERS = sorted({*(p.relative_to(ROOT).as_posix() for p in (ROOT / "orchestrator" / "outputs").rglob("*.py")),
                  *(p.relative_to(ROOT).as_posix() for p in (ROOT / "certsel" / "cli").glob("*.py")),
                  "certsel/terminal.py", "certsel/api.py"} - OWN)


def certificate_fields() -> set[str]:
    names = set()
    for obj in vars(selection_schema).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            names |= set(obj.model_fields)
    for cls in (Ranking, TopK):
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


# plain dicts these modules read whose keys happen to be certificate field names
NOT_CERTIFICATES = {
    "raw": "a job file's mapping (api.job_config)",
    "info": "an lm-eval task's description (certsel lm-eval-table)",
    "line": "the progress line's parts (cli.progress.progress_bar)",
    "cols": "labels.parquet's columns (report._write_labels)",
    "result.spent": "the engine's label counts (JobResult.spent)",
    "result.full": "the engine's full-budget label counts (JobResult.full)",
    "csv_row": "Result.rows' flat dicts, the --format csv columns (api.Result._repr_html_)",
}
# `"name" in X` where X is a set of names, not a certificate: a policy kind's parameters, the
# fields a model was given
NAME_SETS = (".takes", ".model_fields_set")


def key_reads(source: str, fields: set[str]) -> list[tuple[int, str]]:
    """(line, key) of every read of a certificate field by string key in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        key = base = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key, base = node.slice, ast.unparse(node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args):
            key, base = node.args[0], ast.unparse(node.func.value)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            key, base = node.left, ast.unparse(node.comparators[0])
            if base.endswith(NAME_SETS):
                continue
        if base in NOT_CERTIFICATES:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in fields:
            out.append((node.lineno, key.value))
    return out


def test_the_checker_finds_planted_reads():
    fields = certificate_fields()
    planted = ('a = cert["evidence"]\nb = row.get("e_value")\nc = "claim" in cert\nd = x["not_a_field"]\n'
               'e = raw["data"]\nf = "partition" in kind.takes\ng = ev["recovery"]["lower_bound"]\n')
    assert sorted(key_reads(planted, fields)) == [(1, "evidence"), (2, "e_value"), (3, "claim"), (7, "lower_bound"),
                                                  (7, "recovery")]
    assert {"evidence", "e_value", "simultaneous_bound", "possible_winners", "certified_in"} <= fields


@pytest.mark.parametrize("path", READERS)
def test_no_certificate_field_is_read_by_key(path):
    found = key_reads((ROOT / path).read_text(), certificate_fields())
    assert not found, f"{path} reads the certificate by key: " + ", ".join(f"line {n} [{k!r}]" for n, k in found)
