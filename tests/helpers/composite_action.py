"""Runs a composite GitHub Action's steps here, as a runner does: its inputs and their defaults, ``${{ }}``
expressions, each step's ``if:``, ``env:`` and own ``$GITHUB_OUTPUT``, the step summary, and ``bash --noprofile
--norc -eo pipefail`` for ``run:`` steps. The cache actions (``actions/cache/restore``, ``actions/cache/save``) act on
a folder standing for the repository's cache: an entry per key, written once, restored by exact key or else the
newest entry whose key starts with a restore key. Any other action, context or function is refused, so the
emulation never quietly differs from a runner on something the action uses."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import yaml

STEP_KEYS = {"id", "name", "if", "uses", "with", "run", "shell", "env", "working-directory", "continue-on-error"}
TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||!|\(|\)|,)"
                   r"|(?P<name>[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)*))")
STATUS = {"always", "success", "failure", "cancelled"}


@dataclass
class StepRun:
    name: str
    outcome: str  # success, failure or skipped
    returncode: int | None = None
    log: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    outputs: dict[str, str]
    steps: list[StepRun]
    summary: str
    success: bool

    def log(self) -> str:
        return "\n".join(f"--- {s.name}: {s.outcome} ({s.returncode})\n{s.log}" for s in self.steps)


class Expressions:
    """GitHub's expression language, the part an action's metadata uses: literals, context paths, ==, !=, !, &&,
    || (returning an operand, as GitHub's do) and the status functions."""

    def __init__(self, contexts: dict, failed: bool):
        self.contexts, self.failed = contexts, failed

    def value(self, text: str):
        self.tokens = [m for m in TOKEN.finditer(text)]
        if "".join(m.group(0) for m in self.tokens).strip() != text.strip():
            raise ValueError(f"expression not understood: {text!r}")
        self.tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in self.tokens]
        self.at = 0
        out = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"expression not understood: {text!r}")
        return out

    def _peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else (None, None)

    def _take(self, op=None):
        tok = self._peek()
        if op is not None and tok != ("op", op):
            raise ValueError(f"expected {op!r}")
        self.at += 1
        return tok

    def _or(self):
        left = self._and()
        while self._peek() == ("op", "||"):
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self):
        left = self._cmp()
        while self._peek() == ("op", "&&"):
            self._take()
            right = self._cmp()
            left = right if truthy(left) else left
        return left

    def _cmp(self):
        left = self._unary()
        while self._peek() in (("op", "=="), ("op", "!=")):
            op = self._take()[1]
            right = self._unary()
            same = equal(left, right)
            left = same if op == "==" else not same
        return left

    def _unary(self):
        if self._peek() == ("op", "!"):
            self._take()
            return not truthy(self._unary())
        if self._peek() == ("op", "("):
            self._take()
            out = self._or()
            self._take(")")
            return out
        kind, text = self._take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if kind != "name":
            raise ValueError(f"unexpected {text!r}")
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        if self._peek() == ("op", "("):
            if text not in STATUS:
                raise ValueError(f"function {text}() is not emulated")
            self._take()
            self._take(")")
            return {"always": True, "success": not self.failed, "failure": self.failed, "cancelled": False}[text]
        head, *rest = text.split(".")
        if head not in self.contexts:
            raise ValueError(f"context {head!r} is not emulated")
        node = self.contexts[head]
        for part in rest:
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def render(self, text: str) -> str:
        """A string with its ``${{ }}`` parts replaced by their values."""
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text_of(self.value(m.group(1))), str(text))

    def condition(self, text: str | None) -> bool:
        if text is None:
            return not self.failed
        text = str(text).strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]
        if not any(re.search(rf"\b{f}\s*\(", text) for f in STATUS):
            text = f"success() && ({text})"  # GitHub's implied status check
        return truthy(self.value(text))


def truthy(v) -> bool:
    return v not in (None, False, 0, 0.0, "")


def equal(a, b) -> bool:
    """GitHub's ==: strings compare ignoring case; values of different types compare as numbers (null and '' are
    0, a bool 0 or 1, other text its number or NaN)."""
    kind = lambda v: "null" if v is None else "bool" if isinstance(v, bool) else \
        "num" if isinstance(v, (int, float)) else "str"
    if kind(a) == kind(b):
        return a.lower() == b.lower() if isinstance(a, str) else a == b
    return number(a) == number(b)


def number(v) -> float:
    if v is None:
        return 0.0
    if isinstance(v, (bool, int, float)):
        return float(v)
    try:
        return float(v) if v.strip() else 0.0
    except ValueError:
        return float("nan")


def text_of(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def read_outputs(path: pathlib.Path) -> dict[str, str]:
    """A ``$GITHUB_OUTPUT`` file: NAME=VALUE lines and NAME<<DELIMITER blocks; a later value replaces an earlier."""
    out, lines = {}, path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name], i = "\n".join(lines[i + 1:j]), j + 1
            continue
        if line.strip():
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


class CompositeAction:
    """An ``action.yml`` with ``runs.using: composite``, run against a cache folder."""

    def __init__(self, action_dir: pathlib.Path, cache_dir: pathlib.Path):
        self.dir, self.cache = pathlib.Path(action_dir), pathlib.Path(cache_dir)
        self.meta = yaml.safe_load((self.dir / "action.yml").read_text())
        assert self.meta["runs"]["using"] == "composite"
        for step in self.meta["runs"]["steps"]:
            extra = set(step) - STEP_KEYS
            assert not extra, f"step keys a runner does not take: {extra}"
            assert ("run" in step) != ("uses" in step), f"a step runs a script or uses an action: {step}"
            if "run" in step:
                assert step.get("shell") == "bash", "a composite action's run step names its shell"

    def run(self, inputs: dict[str, str], workspace: pathlib.Path, *, run_id: str = "1", env: dict | None = None,
            temp_root: pathlib.Path | None = None, timeout: float = 900) -> ActionRun:
        """The steps, in ``workspace`` (the checkout), with a new ``RUNNER_TEMP`` under ``temp_root`` (default: the
        workspace's parent folder)."""
        unknown = set(inputs) - set(self.meta.get("inputs", {}))
        assert not unknown, f"inputs the action does not declare: {unknown}"
        given = {}
        for name, spec in self.meta.get("inputs", {}).items():
            if name in inputs:
                given[name] = str(inputs[name])
            elif spec.get("required"):
                raise ValueError(f"Input required and not supplied: {name}")
            else:
                given[name] = str(spec.get("default", ""))
        temp = (temp_root or workspace.parent) / f"runner-temp-{uuid.uuid4().hex[:8]}"
        temp.mkdir()
        summary = temp / "summary.md"
        base_env = {**os.environ, **(env or {}), "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": run_id,
                    "GITHUB_RUN_ATTEMPT": "1", "GITHUB_WORKSPACE": str(workspace), "GITHUB_ACTION_PATH": str(self.dir),
                    "RUNNER_TEMP": str(temp), "RUNNER_OS": "Linux"}
        steps_ctx: dict[str, dict] = {}
        contexts = {"inputs": given, "steps": steps_ctx, "runner": {"temp": str(temp), "os": "Linux"},
                    "github": {"run_id": run_id, "run_attempt": "1", "action_path": str(self.dir),
                               "workspace": str(workspace)}, "env": base_env}
        failed, runs = False, []
        for k, step in enumerate(self.meta["runs"]["steps"]):
            ex = Expressions(contexts, failed)
            name = step.get("name") or step.get("id") or f"step {k}"
            if not ex.condition(step.get("if")):
                runs.append(StepRun(name, "skipped"))
                if "id" in step:
                    steps_ctx[step["id"]] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            if "uses" in step:
                result = self._use(step["uses"], {k: ex.render(v) for k, v in (step.get("with") or {}).items()})
                result.name = name
            else:
                result = self._script(name, step, ex, base_env, temp, summary, workspace, timeout)
            runs.append(result)
            if "id" in step:
                steps_ctx[step["id"]] = {"outputs": result.outputs, "outcome": result.outcome,
                                         "conclusion": result.outcome}
            failed = failed or result.outcome == "failure"
        ex = Expressions(contexts, failed)
        outputs = {name: ex.render(spec["value"]) for name, spec in self.meta.get("outputs", {}).items()}
        return ActionRun(outputs, runs, summary.read_text() if summary.exists() else "", not failed)

    def _script(self, name, step, ex, base_env, temp, summary, workspace, timeout) -> StepRun:
        out_file = temp / f"output-{uuid.uuid4().hex[:8]}"
        out_file.touch()
        script = temp / f"step-{uuid.uuid4().hex[:8]}.sh"
        script.write_text(ex.render(step["run"]))
        env = {**base_env, **{k: ex.render(v) for k, v in (step.get("env") or {}).items()},
               "GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary)}
        cwd = workspace / ex.render(step.get("working-directory", "."))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
        return StepRun(name, "success" if done.returncode == 0 else "failure", done.returncode,
                       done.stdout + done.stderr, read_outputs(out_file))

    def _use(self, uses: str, args: dict) -> StepRun:
        action = uses.split("@")[0]
        if action == "actions/cache/restore":
            return self._restore(args)
        if action == "actions/cache/save":
            return self._save(args)
        raise ValueError(f"action {uses} is not emulated")

    def _entry(self, key: str) -> pathlib.Path:
        return self.cache / re.sub(r"[^A-Za-z0-9._-]", "_", key)

    def _restore(self, args) -> StepRun:
        path, key = pathlib.Path(args["path"]), args["key"]
        prefixes = [p.strip() for p in args.get("restore-keys", "").splitlines() if p.strip()]
        hit = self._entry(key) if self._entry(key).exists() else None
        if hit is None:
            for prefix in prefixes:  # the newest entry whose key starts with it
                found = sorted((p for p in self.cache.glob("*") if p.name.startswith(self._entry(prefix).name)),
                               key=lambda p: p.stat().st_mtime_ns)
                if found:
                    hit = found[-1]
                    break
        if hit is None:
            return StepRun("restore", "success", 0, f"Cache not found for input keys: {key}",
                           {"cache-hit": "false", "cache-primary-key": key})
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(hit / "content", path)
        return StepRun("restore", "success", 0, f"Cache restored from key: {hit.name}",
                       {"cache-hit": str(hit.name == self._entry(key).name).lower(), "cache-primary-key": key,
                        "cache-matched-key": hit.name})

    def _save(self, args) -> StepRun:
        path, entry = pathlib.Path(args["path"]), self._entry(args["key"])
        if not path.exists():  # actions/cache/save warns and goes on
            return StepRun("save", "success", 0, "Warning: Path Validation Error: no cache is being saved")
        if entry.exists():  # an entry is written once
            return StepRun("save", "success", 0, f"Warning: Cache already exists for key {args['key']}")
        entry.mkdir(parents=True)
        shutil.copy2(path, entry / "content")
        os.utime(entry, ns=(time.time_ns(), time.time_ns()))
        return StepRun("save", "success", 0, f"Cache saved with key: {args['key']}")
