"""The OpenAI-compatible client against a real local HTTP server with scripted faults."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from certsel.workers.openai_source import Endpoint, OpenAIClient, ResponseCache, SourceError

# tiers by test: the input checks need nothing running (the fast tier); the rest is integration (Ray, MLflow, HTTP servers or the CLI)


class _Handler(BaseHTTPRequestHandler):
    """Answers like vLLM's server. A message ``fault:K:N:tag`` fails its first N attempts with
    fault K (500, slow, garbage, nochoices) and then answers; ``bad400`` always gets a 400."""

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        if self.path == "/v1/embeddings":
            text = body["input"][0]
            return self._json({"data": [{"index": 0, "embedding": [float(len(text)), 1.0]}]})
        text = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        with server.lock:
            server.seen[text] = server.seen.get(text, 0) + 1
            attempt = server.seen[text]
            server.auth.append(self.headers.get("Authorization"))
        if text == "bad400":
            return self._raw(400, b'{"error": "bad request"}')
        if text.startswith("fault:"):
            _, kind, n, _tag = text.split(":")
            if attempt <= int(n):
                if kind == "500":
                    return self._raw(500, b"internal error")
                if kind == "slow":
                    time.sleep(1.0)
                    return self._json({"choices": [{"message": {"content": "late"}}]})
                if kind == "garbage":
                    return self._raw(200, b"{not json")
                if kind == "nochoices":
                    return self._json({"object": "chat.completion"})
        answer = f"echo {text}"
        if "messages" in body:
            return self._json({"choices": [{"message": {"role": "assistant", "content": answer}}]})
        return self._json({"choices": [{"text": answer}]})

    def _json(self, obj):
        self._raw(200, json.dumps(obj).encode(), "application/json")

    def _raw(self, status, data, ctype="text/plain"):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out first ("slow"): what the test asks
            pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.seen, srv.auth, srv.lock = {}, [], threading.Lock()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client(server, tmp_path, **kw):
    ep = Endpoint(f"http://127.0.0.1:{server.server_address[1]}", "smollm2", backoff=0.01, timeout=0.5,
                  max_retries=3, concurrency=8, **kw)
    return OpenAIClient(ep, ResponseCache(tmp_path / "cache.db"))


def msgs(*texts):
    return [[{"role": "user", "content": t}] for t in texts]


@pytest.mark.integration
def test_answers_in_order_with_concurrency_and_dedup(server, tmp_path):
    c = client(server, tmp_path)
    texts = [f"q{i}" for i in range(40)] + ["q3", "q3"]
    out = c.chat(msgs(*texts), temperature=0.0, max_tokens=8)
    assert out == [f"echo {t}" for t in texts]
    assert c.stats.sent == 40 and c.stats.cache_hits == 0  # the repeated q3 was sent once
    assert all(server.seen[f"q{i}"] == 1 for i in range(40))
    assert c.complete(["p1"]) == ["echo p1"]
    assert c.embed(["abc", "de"]) == [[3.0, 1.0], [2.0, 1.0]]


@pytest.mark.integration
def test_rerun_reads_the_cache_and_sends_nothing(server, tmp_path):
    c1 = client(server, tmp_path)
    c1.chat(msgs("a", "b", "c"), temperature=0.0)
    c2 = client(server, tmp_path)  # a restarted actor: same cache file, new client
    assert c2.chat(msgs("a", "b", "c"), temperature=0.0) == ["echo a", "echo b", "echo c"]
    assert (c2.stats.sent, c2.stats.cache_hits) == (0, 3)
    assert server.seen == {"a": 1, "b": 1, "c": 1}
    # different sampling parameters are a different request
    c2.chat(msgs("a"), temperature=0.7)
    assert c2.stats.sent == 1 and server.seen["a"] == 2


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["500", "slow", "garbage", "nochoices"])
def test_transient_faults_are_retried(server, tmp_path, kind):
    c = client(server, tmp_path)
    text = f"fault:{kind}:2:x"
    assert c.chat(msgs(text, "plain")) == [f"echo {text}", "echo plain"]
    assert server.seen[text] == 3 and c.stats.retries == 2 and c.stats.sent == 2 and c.stats.failed == 0


@pytest.mark.integration
@pytest.mark.parametrize("kind, words", [
    ("500", "HTTP 500 on all 4 attempts"),
    ("slow", "timed out after 0.5 s on all 4 attempts"),
    ("garbage", "malformed response body on all 4 attempts"),
])
def test_persistent_faults_end_in_a_clear_error(server, tmp_path, kind, words):
    c = client(server, tmp_path)
    with pytest.raises(SourceError, match=words):
        c.chat(msgs(f"fault:{kind}:99:y", "fine"))
    assert server.seen[f"fault:{kind}:99:y"] == 4
    # the request that succeeded was kept: asking again costs nothing
    c2 = client(server, tmp_path)
    assert c2.chat(msgs("fine")) == ["echo fine"] and c2.stats.sent == 0


@pytest.mark.integration
def test_client_errors_are_not_retried(server, tmp_path):
    c = client(server, tmp_path)
    with pytest.raises(SourceError, match="HTTP 400 \\(not retried\\)"):
        c.chat(msgs("bad400"))
    assert server.seen["bad400"] == 1


@pytest.mark.integration
def test_connection_refused_mid_run(server, tmp_path):
    c = client(server, tmp_path)
    assert c.chat(msgs("early1", "early2")) == ["echo early1", "echo early2"]
    server.shutdown()
    server.server_close()
    with pytest.raises(SourceError, match="connection failed \\(ConnectError\\) on all 4 attempts"):
        c.chat(msgs("early1", "late"))
    assert c.stats.sent == 2  # nothing counted for the failed request, nothing twice
    assert c.chat(msgs("early2")) == ["echo early2"]  # cached answers still serve


@pytest.mark.integration
def test_api_key_from_environment_is_sent_and_never_shown(server, tmp_path, monkeypatch):
    monkeypatch.setenv("CERTSEL_TEST_KEY", "sk-secret-123")
    c = client(server, tmp_path, api_key_env="CERTSEL_TEST_KEY")
    c.chat(msgs("k"))
    assert server.auth[-1] == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(c) and "sk-secret" not in repr(c.endpoint)
    with pytest.raises(SourceError) as err:
        c.chat(msgs("fault:500:99:z"))
    assert "sk-secret" not in str(err.value)
    monkeypatch.delenv("CERTSEL_TEST_KEY")
    with pytest.raises(SourceError, match="CERTSEL_TEST_KEY .* is not set"):
        client(server, tmp_path, api_key_env="CERTSEL_TEST_KEY").chat(msgs("k2"))


def test_bad_endpoints():
    with pytest.raises(ValueError, match="must start with http"):
        Endpoint("localhost:8000", "m")
    with pytest.raises(ValueError, match="non-empty served-model name"):
        Endpoint("http://x", "")
    with pytest.raises(ValueError, match="concurrency >= 1"):
        Endpoint("http://x", "m", concurrency=0)


@pytest.mark.integration
def test_answers_are_durable_when_the_batch_returns(server, tmp_path):
    """Answers are committed in groups (a writer task, one transaction per group), and every
    one of them is in the cache file, read through another connection, once chat returns."""
    import sqlite3

    c = client(server, tmp_path)
    groups = []
    put_many = c.cache.put_many
    c.cache.put_many = lambda pairs: (groups.append(len(pairs)), put_many(pairs))[1]
    out = c.chat(msgs(*[f"g{i}" for i in range(60)]))
    assert out == [f"echo g{i}" for i in range(60)] and sum(groups) == 60
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert db.execute("select count(*) from responses").fetchone()[0] == 60
