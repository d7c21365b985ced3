"""An OpenAI-compatible server that answers at once: the client's own cost, measured alone.

``/v1/chat/completions`` answers the sum of the numbers in the last message (so a numeric
loss can be computed from it), ``GET /health`` answers 200. It is a bare asyncio protocol
(HTTP/1.1 with keep-alive, no framework), far faster than any client it serves, so a
benchmark against it measures what the client adds per request.

    python benchmarks/instant_server.py --port 8011
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re

_NUM = re.compile(rb"(\d+)\+(\d+)\+(\d+)")
_LEN = re.compile(rb"(?i)content-length:\s*(\d+)")


def _response(status: bytes, payload: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(payload)).encode() + b"\r\n\r\n" + payload)


class _Instant(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            m = _LEN.search(head)
            size = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + size:
                return
            body, self.buf = self.buf[end + 4:end + 4 + size], self.buf[end + 4 + size:]
            self.transport.write(self._answer(head.split(b"\r\n", 1)[0], body))

    @staticmethod
    def _answer(line: bytes, body: bytes) -> bytes:
        if line.startswith(b"GET /health"):
            return _response(b"200 OK", b"{}")
        if b"/v1/chat/completions" not in line:
            return _response(b"404 Not Found", b'{"error": "not found"}')
        m = _NUM.findall(body)
        text = str(sum(map(int, m[-1]))) if m else "0"
        return _response(b"200 OK", json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
                         .encode())


async def serve(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Instant, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
