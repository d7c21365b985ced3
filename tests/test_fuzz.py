"""Hostile input, generated: configs, loss tables, items files and server responses.

Each generated input is bad by construction. Run through ``certsel run`` (in process, so
hundreds are cheap), every one must end with exit status 2 and exactly one line on stderr
that starts ``certsel: error:``, before any Ray instance, job state or MLflow run exists:
no traceback and nothing that looks finished. Server responses go through the real client
against a real HTTP server and must end in retries, then one clear SourceError.
"""

import json
import pathlib
import string
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from certsel.cli import main
from certsel.policies import BETS
from certsel.workers.openai_source import Endpoint, OpenAIClient, SourceError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.integration  # Ray, MLflow, HTTP servers or the CLI



def fuzz(n: int):
    """Settings of a fuzz test: ``n`` generated inputs, reproducible, no per-example deadline."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def valid_job(root: pathlib.Path) -> dict:
    """A small valid replay job (R-AutoEval+, FST) over a 3-candidate x 40-item table."""
    rng = np.random.default_rng(0)
    K, I = 3, 40
    pq.write_table(pa.table({
        "candidate": np.repeat([f"c{k}" for k in range(K)], I), "item": np.tile(np.arange(I), K),
        "loss_human": (rng.random(K * I) < 0.1).astype(float), "loss_judge": (rng.random(K * I) < 0.1).astype(float),
        "rank": np.repeat(np.arange(K), I).astype(float), "size": np.repeat([3.0, 2.0, 1.0], I),
    }), root / "table.parquet")
    return {"name": "fuzz", "data": {"path": "table.parquet", "judge": "loss_judge", "order": "rank"},
            "policy": {"kind": "r-autoeval+"}, "alpha": 0.2, "delta": 0.1, "procedure": "fst",
            "objective": {"column": "size"}, "budget": {"n": 10, "r": 3, "batch": 5},
            "tracking": {"uri": f"sqlite:///{root}/store.db"}, "state": {"dir": str(root / "jobs")}}


def assert_rejected(root: pathlib.Path, capsys, config: pathlib.Path, *extra):
    code = main(["run", str(config), "--no-progress", *extra])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("certsel: error: "), err
    assert "Traceback" not in err and "selected:" not in out
    assert not (root / "store.db").exists() or _runs(root / "store.db") == 0
    assert not (root / "jobs").exists() or not any((root / "jobs").iterdir())


def _runs(db: pathlib.Path) -> int:
    import sqlite3

    with sqlite3.connect(db) as con:
        try:
            return con.execute("select count(*) from runs").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


# -- configs --------------------------------------------------------------------------------

JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(string.printable, max_size=12), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=5), st.integers(), max_size=2),
)
WORD = st.text(string.ascii_letters, min_size=1, max_size=6)  # never parses as a number
# (dotted key, a value that is always wrong for it)
WRONG = st.one_of(
    st.tuples(st.sampled_from(["alpha", "delta"]), st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0),
                                                           WORD, st.none())),
    st.tuples(st.sampled_from(["budget.n", "budget.batch"]), st.one_of(st.integers(max_value=0), WORD)),
    st.tuples(st.just("budget.r"), st.integers(max_value=-1)),
    st.tuples(st.just("budget.n"), st.integers(min_value=11, max_value=10**6)),  # n (1 + r) > 40 items
    st.tuples(st.just("policy.kind"), st.text(string.ascii_lowercase, max_size=8).filter(
        lambda s: s not in ("seq", "r-eval"))),
    st.tuples(st.just("policy.betting"), st.text(max_size=6).filter(lambda s: s not in BETS)),
    st.tuples(st.just("procedure"), st.text(max_size=6).filter(
        lambda s: s not in ("fst", "bonferroni", "holm", "pairwise"))),
    st.tuples(st.sampled_from(["data.path", "data.judge", "data.order", "objective.column", "data.human"]),
              st.text(string.ascii_letters, min_size=1, max_size=8).map(lambda s: f"no_{s}")),
    st.tuples(st.sampled_from(["candidates", "order"]), st.one_of(
        st.just([]), st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=4).map(lambda s: f"x{s}"),
                              min_size=1, max_size=3), st.just(["c0", "c0"]))),
    st.tuples(st.text(string.ascii_lowercase, min_size=1, max_size=8).filter(
        lambda k: k not in {"name", "data", "live", "candidates", "order", "policy", "alpha", "delta", "procedure",
                            "objective", "budget", "scheduling", "seed", "tracking", "ray", "state"}), JUNK),
    st.tuples(st.sampled_from(["policy.extra", "budget.extra", "data.extra", "tracking.extra"]), JUNK),
    st.tuples(st.sampled_from(["policy", "budget", "data", "objective", "scheduling"]),
              st.one_of(st.integers(), WORD, st.lists(st.integers(), max_size=2))),
    st.tuples(st.just("scheduling.lookahead"), st.integers(max_value=-1)),
    st.tuples(st.just("tracking.intervals"), st.text(max_size=5).filter(
        lambda s: s not in ("every_round", "final", "none"))),
    st.tuples(st.just("seed"), st.one_of(WORD, st.floats(allow_nan=True).filter(lambda x: x != x or x % 1 != 0))),
)


def set_key(raw: dict, key: str, value):
    *parents, leaf = key.split(".")
    node = raw
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[leaf] = value


@fuzz(300)
@given(mutations=st.lists(WRONG, min_size=1, max_size=3))
def test_bad_configs(tmp_path_factory, capsys, mutations):
    root = tmp_path_factory.mktemp("cfg")
    raw = valid_job(root)
    for key, value in mutations:
        set_key(raw, key, value)
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    assert_rejected(root, capsys, path)


@fuzz(40)
@given(text=st.text(max_size=200))
def test_config_files_that_are_not_jobs(tmp_path_factory, capsys, text):
    root = tmp_path_factory.mktemp("txt")
    valid_job(root)
    path = root / "job.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass") if text else b"\xff\xfe\x00garbage")
    assert_rejected(root, capsys, path)


# -- loss tables ----------------------------------------------------------------------------

CORRUPTIONS = ["nan", "inf", "above", "below", "string_losses", "dup_row", "drop_row", "drop_column",
               "float_items", "varying_rank", "empty", "null", "not_parquet", "truncated"]


def corrupt(path: pathlib.Path, how: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = pq.read_table(path).to_pydict()
    n = len(next(iter(t.values())))
    i = int(rng.integers(n))
    col = str(rng.choice(["loss_human", "loss_judge"]))
    if how == "nan":
        t[col][i] = float("nan")
    elif how == "inf":
        t[col][i] = float(rng.choice([np.inf, -np.inf]))
    elif how == "above":
        t[col][i] = 1.0 + float(rng.random()) + 1e-9
    elif how == "below":
        t[col][i] = -1e-9 - float(rng.random())
    elif how == "string_losses":
        t[col] = [str(x) for x in t[col]]
    elif how == "dup_row":
        for k in t:
            t[k].append(t[k][i])
    elif how == "drop_row":
        for k in t:
            del t[k][i]
    elif how == "drop_column":
        del t[str(rng.choice(["candidate", "item", "loss_human", "loss_judge", "rank", "size"]))]
    elif how == "float_items":
        t["item"] = [x + 0.5 for x in t["item"]]
    elif how == "varying_rank":
        t["rank"][i] = t["rank"][i] + 0.25
    elif how == "empty":
        t = {k: [] for k in t}
    elif how == "null":
        t[col][i] = None
    if how == "not_parquet":
        path.write_bytes(rng.bytes(int(rng.integers(0, 200))))
    elif how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: int(rng.integers(0, len(data) - 1))])
    elif not next(iter(t.values())):
        pq.write_table(pa.table({k: pa.array([], pa.float64()) for k in t}), path)
    else:
        try:
            table = pa.table(t)
        except (pa.ArrowTypeError, pa.ArrowInvalid):  # e.g. NaN put into a column made of strings
            table = pa.table({k: [str(x) for x in v] if k == col else v for k, v in t.items()})
        pq.write_table(table, path)


@fuzz(150)
@given(hows=st.lists(st.sampled_from(CORRUPTIONS), min_size=1, max_size=2, unique=True), seed=st.integers(0, 10**6))
def test_bad_loss_tables(tmp_path_factory, capsys, hows, seed):
    root = tmp_path_factory.mktemp("tab")
    raw = valid_job(root)
    whole = {"empty", "not_parquet", "truncated"}  # these end the file's usefulness: applied last, alone
    late = whole | {"drop_column"}
    hows = [h for h in hows if h not in late] + [h for h in hows if h == "drop_column"] + [h for h in hows if h in whole][:1]
    for k, how in enumerate(hows):
        corrupt(root / "table.parquet", how, seed + k)
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert_rejected(root, capsys, path)


# -- live items files ----------------------------------------------------------------------

ITEM_CORRUPTIONS = st.sampled_from(["no_id", "no_question", "question_not_str", "no_answer", "answers_empty",
                                    "answers_not_strings", "answers_is_str", "dup_id", "not_json", "not_object",
                                    "empty_file", "binary"])


@fuzz(60)
@given(how=ITEM_CORRUPTIONS, line=st.integers(0, 19))
def test_bad_items_files(tmp_path_factory, capsys, how, line):
    root = tmp_path_factory.mktemp("items")
    rows = [{"id": f"q{i}", "question": f"{i}+1", "answer": str(i + 1)} for i in range(20)]
    r = rows[line]
    if how == "no_id":
        del r["id"]
    elif how == "no_question":
        del r["question"]
    elif how == "question_not_str":
        r["question"] = 7
    elif how == "no_answer":
        del r["answer"]
    elif how == "answers_empty":
        del r["answer"]
        r["answers"] = []
    elif how == "answers_not_strings":
        del r["answer"]
        r["answers"] = [1, 2]
    elif how == "answers_is_str":
        del r["answer"]
        r["answers"] = "3"
    elif how == "dup_id":
        r["id"] = rows[(line + 1) % 20]["id"]
    text = "\n".join(json.dumps(x) for x in rows)
    if how == "not_json":
        lines = text.splitlines()
        lines[line] = lines[line][:-3]
        text = "\n".join(lines)
    elif how == "not_object":
        lines = text.splitlines()
        lines[line] = "[1, 2, 3]"
        text = "\n".join(lines)
    elif how == "empty_file":
        text = ""
    data = text.encode() if how != "binary" else b"\xff\xfe\xfa" * 10
    (root / "items.jsonl").write_bytes(data)
    job = {"live": {"items": "items.jsonl", "candidates": [
        {"id": "a", "base_url": "http://127.0.0.1:9", "model": "m", "objective": 1}]},
        "policy": {"kind": "r-eval"}, "procedure": "fst", "budget": {"n": 5, "batch": 5},
        "tracking": {"uri": f"sqlite:///{root}/store.db"}, "state": {"dir": str(root / "jobs")}}
    (root / "job.yaml").write_text(yaml.safe_dump(job))
    assert_rejected(root, capsys, root / "job.yaml")


# -- server responses ----------------------------------------------------------------------


class _Hostile(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = self.server.body
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def hostile():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    srv.body = b""
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


BODIES = st.one_of(
    st.binary(max_size=64),  # not JSON (incl. non-UTF-8)
    st.just(b'{"choices": []}'), st.just(b'{"choices": [{"message": {}}]}'), st.just(b'{"choices": null}'),
    st.just(b'{"choices": [{"message": {"content": null}}]}'), st.just(b"[1, 2]"), st.just(b'"text"'),
    st.just(b'{"choices": [{"message": {"content": 42}}]}'),
    st.just(b'{"choices": [{"message": {"content": "' + b"x" * (9 << 20) + b'"}}]}'),  # a 9 MB answer
    st.just(b'{"choices": [{"message": {"content": "\\ud800"}}]}'),  # a lone surrogate
)


@fuzz(40)
@given(body=BODIES)
def test_hostile_responses_end_in_a_clear_error(hostile, body):
    hostile.body = body
    url = f"http://127.0.0.1:{hostile.server_address[1]}"
    client = OpenAIClient(Endpoint(url, "m", max_retries=1, backoff=0.0, timeout=10))
    with pytest.raises(SourceError) as err:
        client.chat([[{"role": "user", "content": "1+1"}]])
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 600 and url in msg
    assert client.stats.sent == 0 and client.stats.failed == 1
