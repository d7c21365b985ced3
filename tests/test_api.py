"""The job-level Python API as the README documents it (certsel.run / certsel.audit), through a
real Ray and a real MLflow store: a DataFrame, a CSV file with string item ids, keyword
overrides, the Result's rows, frame, dict and files; bad input before any label."""

import json

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

import certsel
from certsel.errors import InputError
from certsel.orchestrator.outputs.selection_schema import Certificate
from certsel.workers.replay import DATA_DIR

pytestmark = pytest.mark.integration  # Ray, MLflow

TRIVIA = DATA_DIR / "triviaqa_llama31_8b_mx.parquet"
FRONTIER = ["mx_m6_r2_k64", "mx_m5_r8_k16", "mx_m5_r4_k16", "mx_m5_r2_k16", "mx_m5_r8_k64", "mx_m5_r4_k64"]


def _job(tmp_path):
    """A job as a notebook user writes it: a mapping, columns named, no data path."""
    return {"name": "api-test", "data": {"judge": "loss_judge_best", "order": "rank"}, "candidates": FRONTIER,
            "objective": {"column": "avg_bitwidth"}, "budget": {"n": 200, "r": 3, "batch": 25},
            "tracking": {"uri": f"sqlite:///{tmp_path}/store.db"}, "state": {"dir": str(tmp_path / "jobs")},
            "scheduling": {"start": "top"}}  # every config of FRONTIER tested (no pilot skips the first)


@pytest.fixture(scope="module")
def frame():
    return pq.read_table(TRIVIA).to_pandas()


def test_run_on_a_dataframe_matches_the_job_file_run(tmp_path, frame):
    res = certsel.run(_job(tmp_path), data=frame, alpha=0.1, budget={"batch": 20})
    ref = certsel.run(_job(tmp_path), data=TRIVIA, budget={"batch": 20}, track=False, output=tmp_path / "ref")
    # the same table in memory and on disk: the same job, the same answer and evidence
    assert res.selected == ref.selected is not None and res.certified == ref.certified
    assert [r["e_value"] for r in res.rows] == [r["e_value"] for r in ref.rows]
    assert res.certificate.startswith(f"R({res.selected}) <= ")
    # the override merged into budget (n and r kept)
    assert res.selection.labels.budget["n"] == 200 and res.selection.labels.budget["batch"] == 20
    # outputs where the Result says, the report among them; the in-memory table stored once
    assert res.output_dir == tmp_path / "jobs" / res.job_id and res.report.is_file()
    assert {p.name for p in res.files} >= {"report.html", "selection.json", "labels.parquet"}
    assert json.loads((res.output_dir / "selection.json").read_text())["selected"] == res.selected
    assert len(list((tmp_path / "jobs" / "tables").glob("*.parquet"))) == 1
    # the DataFrame of rows, indexed by candidate, the flagged selection among them
    df = res.to_frame()
    assert list(df.index) == FRONTIER and df.loc[res.selected, "selected"]
    assert set(df.columns) >= {"status", "certified", "e_value", "simultaneous_bound", "labels_human"}
    # the typed certificate and selection.json's dict (a fresh one each time)
    assert res.to_dict() == res.selection.as_json() == json.loads((res.output_dir / "selection.json").read_text())
    assert res.to_dict() is not res.to_dict() and res.selection.evidence.simultaneous_bound <= 0.1
    assert isinstance(res.selection, Certificate) and res.selection is res.job.certificate  # the job's one certificate
    assert res.certificate == res.selection.certificate and res.certified == res.selection.certified_set
    assert [r["candidate"] for r in res.rows] == [c.candidate for c in res.selection.candidates]
    assert [r["e_value"] for r in res.rows] == [c.e_value for c in res.selection.candidates]
    # tracked in MLflow under the run id it returns
    run = MlflowClient(f"sqlite:///{tmp_path}/store.db").get_run(res.run_id)
    assert run.data.tags["certsel.selected"] == res.selected
    assert ref.run_id is None and ref.output_dir == (tmp_path / "ref").resolve()
    # a notebook: one short line as text, the statement and a table of candidates as HTML (read back by a parser)
    text = repr(res)
    assert text.startswith(f"Result(selected={res.selected!r}, certified={len(res.certified)} of {len(FRONTIER)}, ")
    assert "\n" not in text and len(text) < 400
    from html.parser import HTMLParser

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.text = [], []

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])

        def handle_data(self, data):
            self.text.append(data)
            if self.lasttag in ("td", "th") and self.rows:
                self.rows[-1].append(data)

    page = Cells()
    page.feed(res._repr_html_())
    head, *body = page.rows
    assert head[:3] == ["candidate", "status", "certified"] and [r[0] for r in body] == FRONTIER
    assert f"selected: {res.selected}" in page.text and res.certificate in page.text


def test_csv_with_string_item_ids(tmp_path, frame):
    sub = frame[frame.candidate.isin(FRONTIER)].copy()
    sub["item"] = [f"q{i:05d}" for i in sub["item"]]
    path = tmp_path / "losses.csv"
    pacsv.write_csv(pa.Table.from_pandas(sub, preserve_index=False), path)
    res = certsel.run(_job(tmp_path), data=path, track=False)
    labels = pq.read_table(res.output_dir / "labels.parquet")
    ids = labels.column("item_id").to_pylist()
    assert ids and all(i.startswith("q") and len(i) == 6 for i in ids)  # the user's ids, as given
    # zero-padded ids sort like the integers: the same items, the same answer as the Parquet table
    ref = certsel.run(_job(tmp_path), data=TRIVIA, track=False, fresh=True)
    assert res.selected == ref.selected and [r["e_value"] for r in res.rows] == [r["e_value"] for r in ref.rows]


def test_audit_from_python(tmp_path, frame):
    out = certsel.audit(_job(tmp_path), data=frame, reps=20, seed=1, output=tmp_path / "audit")
    assert out.reps == 20 and len(out.rows) == len(FRONTIER)
    assert (tmp_path / "audit" / "audit.json").is_file()


def test_bad_input_fails_before_any_label(tmp_path, frame):
    jobs = tmp_path / "jobs"
    cases = [
        (dict(data=42), "data: expected a file path or a table"),
        (dict(data=tmp_path / "losses.xlsx"), "unknown table format '.xlsx'"),
        (dict(data=frame.drop(columns=["loss_judge_best"])), "missing column 'loss_judge_best'"),
        (dict(data=frame, budget={"n": "many"}), "budget.n"),
        (dict(data=frame, output=tmp_path / "taken.txt"), "is a file, not a folder"),
        (dict(data=frame, tracking={"uri": "http://127.0.0.1:9"}), "no MLflow server answers within 5 s"),
    ]
    (tmp_path / "taken.txt").write_text("x")
    (tmp_path / "losses.xlsx").write_bytes(b"PK")
    for kwargs, message in cases:
        with pytest.raises(InputError, match=message):
            certsel.run(_job(tmp_path), **kwargs)
    # nothing was started: no job folder, no MLflow store
    assert not any(p.name != "tables" for p in jobs.glob("*")) if jobs.exists() else True
    assert not (tmp_path / "store.db").exists()
    with pytest.raises(InputError, match="this job's labels come from source"):
        certsel.run({"source": {"python": "m:f", "items": 10, "candidates": ["a"]}}, data=frame)
    with pytest.raises(InputError, match="job: expected a job file, a mapping or a RunConfig"):
        certsel.run(3.5)
