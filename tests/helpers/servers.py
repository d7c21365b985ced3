"""Real local HTTP servers that speak the OpenAI-compatible API, for tests.

The adder serves four models on ``/v1/chat/completions`` (and exact and weak on
``/v1/completions`` with echoed log-probabilities, next to vLLM's byte-level ``/tokenize``,
``/detokenize`` and ``/tokenizer_info``, for lm-eval's log-likelihood requests; ``hangup`` closes every
request's connection unanswered, as a server that died mid-job): ``exact`` adds the two numbers of
the last message correctly, ``weak`` is off by one when a*b is a multiple of 7 (and any
``offK`` when K divides a + b; any other name answers like ``exact``), ``chatty``
answers "The answer is N.", and ``grader`` grades "Answer: N" ("Score: 10" / "Score: 0"),
replying prose instead of a score for a = 7 unless the request carries a sampling seed, and
always for a = 9; asked to compare "Answer A: x" with "Answer B: y" it names the right one,
and "A" when both or neither are right (a position bias; with log-probabilities: P(A) 0.9
or 0.1 when one is right, 0.7 on ties). ``/v1/embeddings`` embeds a text with two numbers a, b as
``[a, b, a + b, 1]`` (any model), and ``GET /health`` answers 200, like vLLM's server.

Run as a program (``python -m helpers.servers --model M --served-model-name N --host H --port P``,
the arguments certsel gives ``vllm serve``) it is a stand-in server process for the tests
of :mod:`certsel.workers.serving`; ``--startup-delay S`` waits before listening and
``--exit-code C`` exits at once, as a server that cannot load its model does.
"""

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer as _Threading


class ThreadingHTTPServer(_Threading):
    """The standard threading server with a listen backlog like a real server's: the
    default (5) drops connections beyond five at once, and a client sending 16 requests
    in flight then waits a second for TCP to retry them."""

    request_queue_size = 256


class _Adder(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/tokenizer_info":  # vLLM's tokenizer endpoints, on a byte-level tokenizer
            self._send(200, {"eos_token": "\n", "bos_token": None, "pad_token": None, "chat_template": None})
        else:
            self._send(404, {"error": "not found"})

    def _completions(self, body: dict) -> None:
        """``/v1/completions`` with ``echo`` and ``logprobs`` (lm-eval's loglikelihood requests):
        every prompt token costs -0.5 nats, except the answer after the last "Answer:", which
        costs 0 when it is the model's sum (exact: a + b; weak: a + b + 1 when 7 divides a*b)
        and -5 per token otherwise."""
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for k, p in enumerate(prompts):
            tokens = list(p.encode()) if isinstance(p, str) else list(p)
            text = bytes(tokens).decode("utf-8", errors="replace")
            a, b = map(int, re.search(r"(\d+)\s*\+\s*(\d+)", text).groups())
            believed = a + b + (1 if body["model"] == "weak" and (a * b) % 7 == 0 else 0)
            head, _, answer = text.rpartition("Answer:")
            start = len((head + "Answer:").encode())
            cost = 0.0 if answer.strip() == str(believed) else -5.0
            logprobs = [None] + [cost if i >= start else -0.5 for i in range(1, len(tokens))] + [-1.0]
            tops = [None] + [{chr(t) if t < 128 else "?": lp} for t, lp in zip(tokens[1:] + [10], logprobs[1:])]
            choices.append({"index": k, "text": "\n", "logprobs": {"token_logprobs": logprobs, "top_logprobs": tops,
                                                                 "tokens": [chr(t) for t in tokens] + ["\n"]}})
        with self.server.lock:
            self.server.calls[body["model"]] = self.server.calls.get(body["model"], 0) + len(prompts)
        self._send(200, {"choices": choices})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if getattr(self.server, "announce", False):  # a launched stand-in says once that it serves (tests wait on it)
            self.server.announce = False
            print("serving requests", flush=True)
        if body.get("model") == "hangup":  # a server that died after the job checked it: no answer at all
            self.close_connection = True
            return
        if getattr(self.server, "delay", 0):
            import time

            time.sleep(self.server.delay)
        if self.path == "/tokenize":
            self._send(200, {"tokens": list(body["prompt"].encode())})
            return
        if self.path == "/detokenize":
            self._send(200, {"prompt": bytes(t for t in body["tokens"] if t < 256).decode("utf-8", errors="replace")})
            return
        if self.path.endswith("/v1/completions"):
            self._completions(body)
            return
        if self.path.endswith("/v1/embeddings"):
            with self.server.lock:
                self.server.calls["embeddings"] = self.server.calls.get("embeddings", 0) + 1
            vecs = []
            for k, t in enumerate(body["input"]):
                a, b = map(int, re.search(r"(\d+)\s*\+\s*(\d+)", t).groups())
                vecs.append({"index": k, "embedding": [float(a), float(b), float(a + b), 1.0]})
            self._send(200, {"data": vecs})
            return
        text = body["messages"][-1]["content"]
        a, b = map(int, re.search(r"(\d+)\s*\+\s*(\d+)", text).groups())
        model = body["model"]
        with self.server.lock:
            self.server.calls[model] = self.server.calls.get(model, 0) + 1
        logprobs = None
        if model == "grader" and "Answer A:" in text:  # a pairwise verdict, biased towards A on ties
            def right(label):
                m = re.search(rf"Answer {label}:[^\d-]*(-?\d+)", text)
                return bool(m and int(m.group(1)) == a + b)

            ra, rb = right("A"), right("B")
            reply = "A" if ra and not rb else "B" if rb and not ra else "A"
            p_a = 0.9 if reply == "A" and ra != rb else 0.1 if ra != rb else 0.7
            if body.get("logprobs"):
                import math

                top = [{"token": "A", "logprob": math.log(p_a)}, {"token": " B", "logprob": math.log(1 - p_a)},
                       {"token": "maybe", "logprob": -9.0}]
                logprobs = {"content": [{"token": reply, "logprob": 0.0, "top_logprobs": top}]}
        elif model == "grader":
            given = re.search(r"Answer:\s*(-?\d+)", text)
            right = bool(given and int(given.group(1)) == a + b)
            choice = (body.get("structured_outputs") or {}).get("choice")
            if choice is not None and getattr(self.server, "no_structured", False):
                self._send(400, {"error": "structured outputs are not supported"})
                return
            if "yes or no" in text:  # a yes/no verdict, with token probabilities when asked
                reply = "yes" if right else "no"
                p_yes = 0.8 if right else 0.1
                if body.get("logprobs"):
                    import math

                    top = [{"token": "yes", "logprob": math.log(p_yes)}, {"token": " No", "logprob": math.log(1 - p_yes)},
                           {"token": "maybe", "logprob": -9.0}]
                    logprobs = {"content": [{"token": reply, "logprob": 0.0, "top_logprobs": top}]}
            elif choice is not None:  # constrained to the scale: always one of the choices
                reply = "Score: 10" if right else "Score: 0"
                assert reply in choice
            elif a == 9 or (a == 7 and "seed" not in body):
                reply = "Looks fine to me."
            else:
                reply = "Score: 10" if right else "Score: 0"
        elif model == "weak" and (a * b) % 7 == 0:
            reply = str(a + b + 1)
        elif re.fullmatch(r"off\d+", model) and (a + b) % int(model[3:]) == 0:
            reply = str(a + b + 1)  # offK: off by one when K divides a + b
        else:
            reply = f"The answer is {a + b}." if model == "chatty" else str(a + b)
        self._send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "logprobs": logprobs}]})


@contextlib.contextmanager
def adder_server():
    """A real HTTP server on a free local port: yields (base_url, server); ``server.calls``
    counts requests per served model; setting ``server.delay`` (seconds) slows every answer."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Adder)
    srv.calls, srv.lock = {}, threading.Lock()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", srv
    finally:
        srv.shutdown()
        srv.server_close()


def main(argv=None):
    import argparse
    import sys
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--startup-delay", type=float, default=0.0)
    ap.add_argument("--exit-code", type=int)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before every answer")
    args = ap.parse_args(argv)
    print(f"loading {args.model} as {args.served_model_name}", flush=True)
    if args.exit_code is not None:
        print(f"ValueError: cannot load model {args.model}", flush=True)
        sys.exit(args.exit_code)
    time.sleep(args.startup_delay)
    srv = ThreadingHTTPServer((args.host, args.port), _Adder)
    srv.calls, srv.lock, srv.delay, srv.announce = {}, threading.Lock(), args.delay, True
    print(f"listening on {args.host}:{args.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
