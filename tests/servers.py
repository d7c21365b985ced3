"""Real local HTTP servers that speak the OpenAI-compatible API, for tests.

The adder serves four models on ``/v1/chat/completions``: ``exact`` adds the two numbers of
the last message correctly, ``weak`` is off by one when a*b is a multiple of 7, ``chatty``
answers "The answer is N.", and ``grader`` grades "Answer: N" ("Score: 10" / "Score: 0"),
replying prose instead of a score for a = 7 unless the request carries a sampling seed, and
always for a = 9.
"""

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Adder(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][-1]["content"]
        a, b = map(int, re.search(r"(\d+)\s*\+\s*(\d+)", text).groups())
        model = body["model"]
        with self.server.lock:
            self.server.calls[model] = self.server.calls.get(model, 0) + 1
        if model == "grader":
            given = re.search(r"Answer:\s*(-?\d+)", text)
            if a == 9 or (a == 7 and "seed" not in body):
                reply = "Looks fine to me."
            else:
                reply = "Score: 10" if given and int(given.group(1)) == a + b else "Score: 0"
        elif model == "weak" and (a * b) % 7 == 0:
            reply = str(a + b + 1)
        else:
            reply = f"The answer is {a + b}." if model == "chatty" else str(a + b)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def adder_server():
    """A real HTTP server on a free local port: yields (base_url, server); ``server.calls``
    counts requests per served model."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Adder)
    srv.calls, srv.lock = {}, threading.Lock()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", srv
    finally:
        srv.shutdown()
        srv.server_close()
