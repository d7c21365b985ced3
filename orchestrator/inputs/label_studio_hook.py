"""The endpoint Label Studio's webhooks call while a job waits for people: each call wakes the driver's wait
(:class:`~certsel.orchestrator.inputs.source_kind.Poll`), so an answer is taken up at once instead of at the next poll.
The answers themselves are still read from the project (the webhook only says "look now"), so a lost or forged call can
cost a look, never a label.

A call counts only with the job's secret header; anything else gets 403. It listens on the address the job names (Label
Studio must be able to reach it; on one machine, 127.0.0.1 with Label Studio's SSRF protection off, as
deploy/label-studio/serve.sh starts it).
"""

from __future__ import annotations

import hmac
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .source_kind import Poll

HEADER = "X-Certsel-Hook"
HOOK_PATH = "/answers"


class AnswerHook:
    """A small HTTP server on ``host:port`` (0: a free port) that wakes ``poll``."""

    def __init__(self, poll: Poll, host: str = "127.0.0.1", port: int = 0):
        self.poll, self.secret, self.calls = poll, secrets.token_hex(16), 0
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802  (http.server's name)
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    size = 0
                self.rfile.read(max(0, min(size, 1 << 20)))
                if not hmac.compare_digest(self.headers.get(HEADER, ""), hook.secret):
                    self.send_response(403)
                    self.end_headers()
                    return
                hook.calls += 1
                hook.poll.wake()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):  # quiet: no line per call on the job's terminal
                pass

        self._server = ThreadingHTTPServer((host, int(port)), Handler)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="certsel-answer-hook", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{HOOK_PATH}"

    @property
    def headers(self) -> dict:
        return {HEADER: self.secret}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
