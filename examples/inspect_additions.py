"""certsel inside inspect-ai: certified early stopping of one task, a certified selection over
four "models" in one eval(), and a certified ranking of the four in one eval(task, model=[...]). Runs anywhere with inspect's mockllm provider; with
``--model vllm/smollm2 --base-url http://127.0.0.1:8000/v1`` the same task runs on the CPU vLLM
(``bash deploy/cpu/serve.sh``) through inspect's own generate().

    pip install -e ".[inspect]"
    python examples/inspect_additions.py [--model vllm/smollm2 --base-url URL] [--logs DIR]

The mock "models" add two numbers below 100 and slip on some of them (a deterministic rule per
model), so their accuracy is known: careful 1.00, hurried 0.90, tired 0.82, sloppy 0.55.
"""

from __future__ import annotations

import argparse
import asyncio

from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig, ModelOutput, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate, solver

from certsel.inspect import CertifiedRanking, CertifiedSelection, CertifiedStopping
from certsel.home import home

# each mock model's slip: the pairs (a, b) it gets wrong (by one)
SLIPS = {"careful": lambda a, b: False,
         "hurried": lambda a, b: (a * b) % 11 == 0,
         "tired": lambda a, b: (a + b) % 10 in (3, 7) and a > 20,
         "sloppy": lambda a, b: (a % 10) + (b % 10) >= 10}


def questions() -> MemoryDataset:
    """The 900 sums a + b with a in 10..99 and b in 1..10 (ids "a+b"), shuffled."""
    data = MemoryDataset([Sample(id=f"{a}+{b}", input=f"What is {a}+{b}? Reply with the number only.",
                                 target=str(a + b), metadata={"a": a, "b": b})
                          for a in range(10, 100) for b in range(1, 11)])
    data.shuffle()  # a fresh random order: the certificate's probability is over it
    return data


@solver
def mock_adder(name: str):
    """A stand-in model: the sum, off by one where its slip rule says so (no generate call)."""

    async def solve(state, generate):
        a, b = state.metadata["a"], state.metadata["b"]
        await asyncio.sleep(0.002)
        answer = a + b + (1 if SLIPS[name](a, b) else 0)
        state.output = ModelOutput.from_content(str(state.model), str(answer))
        return state

    return solve


@solver
def mock_adders():
    """The four stand-in models in one task: each answers by its own slip rule (the model's name)."""

    async def solve(state, generate):
        return await mock_adder(str(state.model).rsplit("/", 1)[-1])(state, generate)

    return solve


def one_task(args) -> None:
    """One task: is the hurried (or the served) model's accuracy at least 0.8?"""
    manager = CertifiedStopping(at_least=0.8, delta=0.05)
    if args.model == "mockllm/model":
        solver_, model = mock_adder("hurried"), "mockllm/model"
    else:
        solver_ = generate()
        model = get_model(args.model, base_url=args.base_url, api_key="none",
                          config=GenerateConfig(temperature=0.0, max_tokens=16))
    [log] = eval(Task(dataset=questions(), solver=solver_, scorer=match(numeric=True), early_stopping=manager),
                 model=model, max_samples=8, display="none", log_dir=args.logs)
    print(manager.certificate.words())
    if log.results is None:  # a rerun of a claim its ledger holds as decided runs no sample
        print(f"no sample ran: its claim's test was decided by an earlier run; log: {log.location}\n")
        return
    counts = manager.certificate.samples
    print(f"inspect's accuracy on the {counts.scored - counts.earlier} samples scored here: "
          f"{log.results.scores[0].metrics['accuracy'].value:.3f}; log: {log.location}\n")


def selection(args, procedure: str, store="home") -> None:
    """Four mock models in one eval(): which may ship with accuracy >= 0.85? ``store``: the ledger that keeps each
    claim's test (certsel's home's; None: this eval alone)."""
    names = list(SLIPS)
    cost = {"careful": 4.0, "hurried": 1.0, "tired": 0.5, "sloppy": 0.25}  # e.g. dollars per 1,000 questions
    sel = CertifiedSelection(names, at_least=0.85, delta=0.05, procedure=procedure, objective=cost,
                             out=f"{args.logs}/selection-{procedure}.json", store=store)
    data = questions()  # one shuffle, shared: the candidates answer the same questions first
    tasks = [Task(dataset=data, solver=mock_adder(n), scorer=match(numeric=True), model=f"mockllm/{n}",
                  early_stopping=sel.member(n), name=f"additions_{n}") for n in names]
    eval(tasks, max_samples=8, max_tasks=4, display="none", log_dir=args.logs)
    r = sel.result
    print(r.statement)
    for c in r.candidates:
        cert = c.certificate
        print(f"  {c.name:8s} {cert.status:14s} scored {cert.samples.scored:3d} of {cert.samples.total}"
              f", joint lower bound {'-' if c.joint_lower_bound is None else format(c.joint_lower_bound, '.3f')}")
    print(f"  samples run: {r.samples_run} of {r.samples_full} ({100 * (1 - r.samples_run / r.samples_full):.0f}% "
          f"saved); kept as a certsel job: certsel show {sel.job.job_id}\n")


def ranking(args) -> None:
    """The four mock models ranked in one eval(task, model=[...]), ties within 0.03 certified."""
    names = list(SLIPS)
    rk = CertifiedRanking(names, epsilon=0.03, delta=0.05)
    eval(Task(dataset=questions(), solver=mock_adders(), scorer=match(numeric=True), early_stopping=rk),
         model=[f"mockllm/{n}" for n in names], max_samples=8, max_tasks=4, display="none", log_dir=args.logs)
    r = rk.result
    print("certified groups, best first: " + " > ".join("{" + ", ".join(g) + "}" for g in r.ranking.rank_groups)
          + f" ({r.ranking.pairs_certified} of {r.ranking.pairs} pair orders, probability >= 0.95)")
    for n in names:
        print(f"  {n:8s} samples run {r.samples_run[n]:3d} of 900")
    print(f"  kept as a certsel job: certsel show {rk.job.job_id}\n")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mockllm/model", help="an inspect model (default: the mock adder)")
    ap.add_argument("--base-url", default=None, help="the server of a vllm/ or openai-api/ model")
    ap.add_argument("--logs", default=str(home() / "inspect-logs"),
                    help="inspect's log folder (default: inspect-logs in certsel's home, never the current folder)")
    return ap


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    one_task(args)
    if args.model == "mockllm/model":
        selection(args, "fst")  # its claims' tests kept in the ledger: a rerun of the example continues them
        # the same claims under another procedure would be a second test of each: the ledger refuses it, so this
        # comparison is an analysis of its own, for this eval alone
        selection(args, "bonferroni", store=None)
        ranking(args)


if __name__ == "__main__":
    main()
