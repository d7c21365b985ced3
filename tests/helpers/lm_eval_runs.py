"""Real lm-evaluation-harness runs for tests: a local task over a local data file, answered by
the stand-in OpenAI-compatible server (:func:`helpers.servers.adder_server`), with
``--log_samples``. No hub access: the task reads its JSON Lines file through the datasets
library's packaged ``json`` builder, offline."""

import json
import os
import random
import subprocess
import sys

ADDITIONS_TASK = """task: additions
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}} Answer with the number only."
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 16
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


CHOICE_TASK = """task: additions_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_choice_task(folder, n: int = 200, seed: int = 1):
    """A multiple-choice (log-likelihood) task: which of a + b - 1, a + b, a + b + 1 is the sum."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "additions_mc.jsonl"
    with data.open("w") as f:
        for _ in range(n):
            a, b = rng.randint(1, 60), rng.randint(1, 60)
            choices = [str(a + b + d) for d in (-1, 0, 1)]
            rng.shuffle(choices)
            f.write(json.dumps({"question": f"What is {a} + {b}?", "choices": choices,
                                "label": choices.index(str(a + b))}) + "\n")
    (folder / "additions_mc.yaml").write_text(CHOICE_TASK.format(data=data))
    return folder


def write_additions_task(folder, n: int = 200, seed: int = 0):
    """A generate_until task of ``n`` additions (its YAML and data file in ``folder``)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "additions.jsonl"
    with data.open("w") as f:
        for _ in range(n):
            a, b = rng.randint(1, 60), rng.randint(1, 60)
            f.write(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    (folder / "additions.yaml").write_text(ADDITIONS_TASK.format(data=data))
    return folder


def run_lm_eval(base_url: str, model: str, tasks_dir, out_dir, *, task: str = "additions", limit: int | None = None):
    """``lm_eval`` itself (a subprocess) on the stand-in server's chat endpoint, logging samples."""
    cmd = [sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args",
           f"base_url={base_url}/v1/chat/completions,model={model},tokenizer_backend=None,num_concurrent=8",
           "--tasks", task, "--include_path", str(tasks_dir), "--apply_chat_template", "--log_samples",
           "--output_path", str(out_dir)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"lm_eval failed: {out.stderr[-2000:]}")
    return out_dir
