"""selection.json has a published, versioned schema: certificates of a selection, an
estimation and a ranking job (run in-process) validate against the pydantic models and,
independently, against the exported JSON Schema with the jsonschema library; a file with a
changed field does not."""

import json

import jsonschema
import pytest

from certsel.config import parse_config
from certsel.orchestrator.inputs.sources import load_job_data
from certsel.orchestrator.outputs import certificate as certificate_module
from certsel.orchestrator.outputs.selection_schema import SCHEMA_VERSION, Certificate, json_schema
from certsel.orchestrator.engine.driver import run_job
from certsel.orchestrator.engine.runtime import LocalRuntime
from certsel.workers.replay import DATA_DIR
from helpers.alpacaeval import ALPACAEVAL_PREFERENCES

TRIVIA = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
FRONTIER = ["mx_m6_r2_k64", "mx_m5_r8_k16", "mx_m5_r4_k16", "mx_m5_r2_k16"]

JOBS = {
    "selection": {"data": {"path": str(TRIVIA), "judge": "loss_judge_best", "order": "rank"}, "candidates": FRONTIER,
                  "objective": {"column": "avg_bitwidth"}, "budget": {"n": 150, "r": 3, "batch": 25},
                  "costs": {"human": 1.0, "judge": 0.01, "unit": "USD"}},
    "estimation": {"data": {"path": str(TRIVIA)}, "candidates": FRONTIER[:2],
                   "policy": {"kind": "seq"}, "procedure": "bonferroni", "objective": {"column": "avg_bitwidth"},
                   "budget": {"n": 150, "batch": 50}},
    "ranking": {"data": {"path": str(ALPACAEVAL_PREFERENCES), "candidate": "model", "human": "loss"},
                "policy": {"kind": "seq"}, "procedure": "pairwise", "budget": {"n": 200, "batch": 50}},
}


def _certificate(kind: str):
    cfg = parse_config(JOBS[kind])
    data = load_job_data(cfg)
    result = run_job(cfg, data, LocalRuntime(1))
    return certificate_module.certificate(result), certificate_module._fields(result)


@pytest.fixture(scope="module", params=list(JOBS))
def cert(request):
    try:
        return _certificate(request.param)
    except Exception as exc:  # a job this test file mis-specified must fail loudly, not skip
        raise AssertionError(f"{request.param} job: {exc}") from exc


def test_certificates_validate_against_the_models_and_the_json_schema(cert):
    typed, fields = cert
    assert isinstance(typed, Certificate) and typed.schema_version == SCHEMA_VERSION
    # the typed certificate writes back exactly the fields it was built from (absent stays absent)
    assert {**typed.as_json(), "created": None} == {**fields, "created": None}  # built a moment apart
    assert Certificate.model_validate(typed.as_json()) == typed
    jsonschema.validate(json.loads(json.dumps(typed.as_json(), allow_nan=False)), json_schema())


def test_the_certificate_is_read_by_attribute_only(cert):
    typed, fields = cert
    assert typed.certificate == fields["certificate"]
    with pytest.raises(TypeError):  # the by-key shim of release 0.2 is gone
        typed["certificate"]
    with pytest.raises(ValueError):  # frozen: one certificate per job, as built
        typed.selected = "someone else"


def test_a_changed_file_is_rejected(cert):
    cert = cert[0].as_json()
    schema = json_schema()
    for broken in ({**cert, "schema_version": SCHEMA_VERSION + 1}, {**cert, "surprise": 1},
                   {**cert, "candidates": [{**cert["candidates"][0], "status": "great"}]},
                   {k: v for k, v in cert.items() if k != "certificate"}):
        with pytest.raises(ValueError):
            Certificate.model_validate(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(json.dumps(broken)), schema)


def test_the_cli_prints_the_schema(capsys):
    from certsel.cli import main

    assert json_schema()["$id"].endswith(f"selection-{SCHEMA_VERSION}.json")
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()
    assert main(["schema", "--version-only"]) == 0
    assert capsys.readouterr().out.strip() == str(SCHEMA_VERSION)
