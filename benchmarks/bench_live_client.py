"""Throughput of certsel's live label source against a plain concurrent client.

Both send the same kind of chat requests to one running OpenAI-compatible server (the CPU
vLLM server of ``deploy/cpu/``) with the same number in flight:

* ``plain``: an ``httpx.AsyncClient`` and an ``asyncio.Semaphore``, nothing else: the
  fastest a client can ask;
* ``client``: :class:`certsel.workers.openai_source.OpenAIClient` with its SQLite response
  cache (every answer written as it arrives), retries and key handling;
* ``source``: :class:`certsel.workers.live.LiveSource.human`, what a candidate actor
  calls: template formatting, the client, and the loss against the references.

Each request generates exactly ``--max-tokens`` tokens (``ignore_eos``, greedy), so every
request is the same work whichever client sends it, and every measurement uses prompts
never sent before (fresh additions: no response cache and no vLLM prefix cache helps).
The three are measured in rotating order, ``--reps`` times; the figure is the median
ratio to the plain client within a repetition (the machine is noisy, the server shared).

    python benchmarks/bench_live_client.py --url http://127.0.0.1:8000 --model smollm2

``--instant`` starts :mod:`instant_server` (next to this file: an OpenAI-compatible server
that answers at once) and measures against it, with 2,000 requests and 64 in flight unless
given: what each client costs per request when the server is never the bottleneck, as
with vLLM on GPUs answering short prompts. The goal is a ratio >= 0.9 for both.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time

import contextlib
import pathlib
import socket
import subprocess

import httpx
from certsel.workers.live import Item, LiveSource
from certsel.workers.openai_source import Endpoint, OpenAIClient, ResponseCache

TEMPLATE = "What is {question}? Reply with the number only."


def fresh_questions(counter, n):
    """``n`` additions never used before in this process (distinct prompts)."""
    out = []
    for k in itertools.islice(counter, n):
        a, b = 10 + k % 90, 10 + (k // 90) % 90
        out.append((f"{a}+{b}+{k // 8100}", str(a + b + k // 8100)))
    return out


async def _plain(url, model, prompts, params, concurrency, timeout):
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        async def one(p):
            async with sem:
                r = await client.post(f"{url}/v1/chat/completions", timeout=timeout,
                                      json={"model": model, "messages": [{"role": "user", "content": p}], **params})
                r.raise_for_status()
                return r.json()["choices"][0]["message"]["content"]

        return await asyncio.gather(*(one(p) for p in prompts))


def run_plain(url, model, questions, params, concurrency, timeout):
    prompts = [TEMPLATE.format(question=q) for q, _ in questions]
    t = time.perf_counter()
    out = asyncio.run(_plain(url, model, prompts, params, concurrency, timeout))
    assert len(out) == len(prompts)
    return time.perf_counter() - t


def run_client(url, model, questions, params, concurrency, timeout, cache_dir):
    cache = ResponseCache(f"{cache_dir}/client.db")
    client = OpenAIClient(Endpoint(url, model, timeout=timeout, concurrency=concurrency), cache)
    convs = [[{"role": "user", "content": TEMPLATE.format(question=q)}] for q, _ in questions]
    t = time.perf_counter()
    out = client.chat(convs, **params)
    elapsed = time.perf_counter() - t
    assert len(out) == len(convs) and client.stats.sent == len(convs) and client.stats.retries == 0
    return elapsed


def run_source(url, model, questions, params, concurrency, timeout, cache_dir):
    items = [Item(f"q{k}", q, (a,)) for k, (q, a) in enumerate(questions)]
    cache = ResponseCache(f"{cache_dir}/source.db")
    client = OpenAIClient(Endpoint(url, model, timeout=timeout, concurrency=concurrency), cache)
    source = LiveSource(items, client, TEMPLATE, loss="numeric", sampling=params)
    t = time.perf_counter()
    losses = source.human(range(len(items)))
    elapsed = time.perf_counter() - t
    assert len(losses) == len(items) and source.requests == len(items)
    return elapsed


@contextlib.contextmanager
def instant_server():
    """The instant server in a subprocess on a free port; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(pathlib.Path(__file__).with_name("instant_server.py")),
                             "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the instant server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--instant", action="store_true", help="measure against the built-in instant server")
    ap.add_argument("--requests", type=int, default=None, help="requests per measurement (64; 2,000 with --instant)")
    ap.add_argument("--concurrency", type=int, default=None, help="requests in flight (16; 64 with --instant)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    args.requests = args.requests or (2000 if args.instant else 64)
    args.concurrency = args.concurrency or (64 if args.instant else 16)
    if args.instant:
        with instant_server() as url:
            args.url = url
            return measure(args)
    return measure(args)


def measure(args) -> int:
    params = {"temperature": 0, "max_tokens": args.max_tokens, "ignore_eos": True}
    counter = itertools.count()
    url = args.url.rstrip("/")

    # warm-up: the first requests after a start pay for compilation and allocation
    run_plain(url, args.model, fresh_questions(counter, args.concurrency), params, args.concurrency, args.timeout)

    runners = {"plain": run_plain, "client": run_client, "source": run_source}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            order = list(runners)[rep % 3:] + list(runners)[:rep % 3]
            rep_rate = {}
            for name in order:
                qs = fresh_questions(counter, args.requests)
                extra = () if name == "plain" else (tmp,)
                elapsed = runners[name](url, args.model, qs, params, args.concurrency, args.timeout, *extra)
                rep_rate[name] = args.requests / elapsed
                print(f"rep {rep} {name:6s} {args.requests} requests in {elapsed:6.1f} s: "
                      f"{rep_rate[name]:.2f} requests/s", flush=True)
            rows.append(rep_rate)

    summary = {name: statistics.median(r[name] for r in rows) for name in runners}
    ratios = {name: statistics.median(r[name] / r["plain"] for r in rows) for name in ("client", "source")}
    print(f"\n{args.requests} requests x {args.reps} reps, {args.concurrency} in flight, "
          f"{args.max_tokens} tokens each, server {url} ({args.model})")
    print("| sender | requests/s (median) | ratio to plain (median of per-rep ratios) |")
    print("|---|---|---|")
    print(f"| plain httpx | {summary['plain']:.2f} | 1.00 |")
    print(f"| certsel OpenAIClient (cache on) | {summary['client']:.2f} | {ratios['client']:.3f} |")
    print(f"| certsel LiveSource.human | {summary['source']:.2f} | {ratios['source']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "reps": rows, "median_rate": summary, "median_ratio": ratios}, f, indent=1)
    return 0 if min(ratios.values()) >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
