"""From a YAML file or a mapping to a :class:`~certsel.config.schema.RunConfig`: ``--set`` overrides, plugins
imported before validation, user modules and relative paths beside the job file, one-line errors."""

from __future__ import annotations

import importlib
import logging
import os
import pathlib
import sys
import typing

import yaml
from pydantic import BaseModel, ValidationError

from certsel.errors import first_line
from certsel.policies.registry import did_you_mean

from .base import ConfigError
from .schema import RunConfig
from .sources import LabelsConfig, ServeConfig


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of every key (and list item) of a YAML text by its path (``("budget", "r")``)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[tuple[str, ...], int] = {}
    stack = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                out[(*path, str(k.value))] = k.start_mark.line + 1
                stack.append((v, (*path, str(k.value))))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                out[(*path, str(i))] = v.start_mark.line + 1
                stack.append((v, (*path, str(i))))
    return out


def _line_of(loc: tuple, lines: dict | None) -> int | None:
    """The line of the longest prefix of a validation error's location found in the file."""
    parts = tuple(str(p) for p in loc)
    for n in range(len(parts), 0, -1):
        if lines and parts[:n] in lines:
            return lines[parts[:n]]
    return None


def _model_in(annotation):
    """The pydantic model an annotation holds (X, X | None, list[X], dict[str, X]), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_in, typing.get_args(annotation)) if m is not None), None)


def keys_at(loc: tuple) -> list[str]:
    """The keys a job file may hold where the last part of ``loc`` stands (for "did you mean")."""
    model = RunConfig
    for part in loc[:-1]:
        if isinstance(part, int) or str(part).isdigit():  # a list's element or a mapping's value
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        model = None if field is None else _model_in(field.annotation)
        if model is None:
            return []
    return [f.alias or n for n, f in model.model_fields.items()]


def _format(err: ValidationError, source: str, lines: dict | None = None, sets: dict | None = None) -> str:
    e = err.errors()[0]
    loc = tuple(map(str, e["loc"]))
    # the --set whose key holds the error's place, or lies under it (an unknown key: its first part)
    set_by = next((item for key, item in (sets or {}).items() if loc[: len(key)] == key or key[: len(loc)] == loc),
                  None)
    line = _line_of(e["loc"], lines)
    if set_by is not None:  # the value came from the command line, not the file
        source = f"--set {set_by}"
    elif line is not None:  # "job.yaml:9: budget.r: ..." as editors and compilers write it
        source = f"{source}:{line}"
    loc = ".".join(str(p) for p in e["loc"]) or "config"
    if e["type"] == "extra_forbidden":
        msg = f"unknown key {loc!r}{did_you_mean(e['loc'][-1], keys_at(e['loc']))}"
    else:
        text = e["msg"].replace("Value error, ", "")
        # a validator that already names its key ("policy.kind must be ...") is not prefixed twice
        msg = text if text.startswith(loc) else f"{loc}: {text}"
    more = len(err.errors()) - 1
    return f"{source}: {msg}" + (f" (and {more} more problem(s))" if more else "")


def _beside(p: pathlib.Path, base_dir: pathlib.Path) -> pathlib.Path:
    """A path the job file names: ``~`` expanded, a relative one beside the job file."""
    p = p.expanduser()
    return p if p.is_absolute() else (base_dir / p).resolve()


def _resolve_serve(s: ServeConfig, base_dir: pathlib.Path) -> ServeConfig:
    """A serve entry's relative paths beside the config file: the model when such a directory exists (else it is a
    model id), the interpreter when it names a path."""
    update = {}
    if not pathlib.Path(s.model).is_absolute() and (base_dir / s.model).exists():
        update["model"] = str((base_dir / s.model).resolve())
    if s.python is not None and "/" in s.python and not pathlib.Path(s.python).is_absolute():
        update["python"] = os.path.normpath(base_dir.absolute() / s.python)  # not resolve(): a venv's python is a symlink
    return s.model_copy(update=update) if update else s


def _user_modules_path(raw: dict, base_dir: pathlib.Path | None) -> None:
    """User code named by the job (plugins, a python source) is looked up beside the job file first."""
    if base_dir is None or not (raw.get("plugins") or isinstance(raw.get("source"), dict)):
        return
    where = str(base_dir.resolve())
    if where not in sys.path:
        sys.path.insert(0, where)


def load_plugins(names, source: str) -> None:
    """Import the job's plugin modules (their import registers their extensions)."""
    if names is None:
        return
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{source}: plugins: must be a list of module names")
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # whatever the plugin raises while importing
            raise ConfigError(f"{source}: plugins: cannot import {name!r} ({first_line(exc)})") from None


def parse_config(raw, *, source: str = "config", base_dir: pathlib.Path | None = None,
                 lines: dict | None = None, sets: dict | None = None) -> RunConfig:
    """Validate a mapping into a :class:`RunConfig`; ``plugins`` are imported first, so what they register is known."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, got {type(raw).__name__}")
    _user_modules_path(raw, base_dir)
    load_plugins(raw.get("plugins"), source)
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format(err, source, lines, sets)) from None
    if cfg.tasks is not None:  # each task's table and features beside the job file
        tasks = [t.model_copy(update={"data": _resolved_data(t.data, base_dir, f"{source}: tasks[{t.name}]")})
                 for t in cfg.tasks]
        cfg = cfg.model_copy(update={"tasks": tasks})
        section, keys = "tasks", ()
    elif cfg.labels is not None:  # a registered source
        # its path options, if any, beside the job file
        paths = {k: str(_beside(pathlib.Path(v), base_dir)) for k in ("path", "include_path", "cache_dir")
                 if base_dir is not None and isinstance(v := cfg.labels.options.get(k), str)
                 and str(_beside(pathlib.Path(v), base_dir)) != v}
        if paths:
            cfg = cfg.model_copy(update={"labels": LabelsConfig(**{**cfg.labels.model_dump(), **paths})})
        section, keys = "labels", ()
    else:
        section, keys = {"replay": ("data", ("path", "features")), "live": ("live", ("items", "cache_dir")),
                         "python": ("source", ("features",))}[cfg.source_kind]
    if base_dir is not None and keys:
        sub = getattr(cfg, section)
        updates = {}
        for key in keys:
            p = getattr(sub, key)
            if p is not None and _beside(p, base_dir) != p:
                updates[key] = _beside(p, base_dir)
        if section == "live" and sub.serve:
            updates["serve"] = [_resolve_serve(s, base_dir) for s in sub.serve]
        if updates:
            cfg = cfg.model_copy(update={section: sub.model_copy(update=updates)})
    if str(cfg.state.dir).startswith("~"):
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"dir": cfg.state.dir.expanduser()})})
    if base_dir is not None and not cfg.state.dir.is_absolute():  # like cache_dir: beside the job file
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"dir": (base_dir / cfg.state.dir).resolve()})})
    store = cfg.state.store
    if store is not None:  # the label store, like the jobs folder: ~ expanded, a relative path beside the job file
        store = store.expanduser()
        store = (base_dir / store).resolve() if base_dir is not None and not store.is_absolute() else store
        if not store.parent.is_dir():
            raise ConfigError(f"{source}: state.store: folder {store.parent} does not exist")
        cfg = cfg.model_copy(update={"state": cfg.state.model_copy(update={"store": store})})
    for key in keys:
        p = getattr(getattr(cfg, section), key)
        if key != "cache_dir" and p is not None and not p.is_file():
            where = next((f"--set {item}" for k, item in (sets or {}).items() if k == (section, key)), source)
            raise ConfigError(f"{where}: {section}.{key}: file not found: {p}{_near(p)}")
    return cfg


def _near(p: pathlib.Path) -> str:
    """" (did you mean 'NAME'?)" for a file beside ``p`` with a close name."""
    if not p.parent.is_dir():
        return f" (no folder {p.parent}; a relative path is read beside the job file)"
    return did_you_mean(p.name, [f.name for f in p.parent.iterdir() if f.is_file()])


def _resolved_data(d, base_dir, where: str):
    """A data section with its relative paths resolved against ``base_dir``, its files checked."""
    updates = {k: (base_dir / p).resolve() for k in ("path", "features")
               if (p := getattr(d, k)) is not None and base_dir is not None and not p.is_absolute()}
    d = d.model_copy(update=updates) if updates else d
    for key in ("path", "features"):
        p = getattr(d, key)
        if p is not None and not p.is_file():
            raise ConfigError(f"{where}: data.{key}: file not found: {p}{_near(p)}")
    return d


def apply_overrides(raw: dict, overrides, source: str) -> dict:
    """``["budget.n=100", "policy.kind=r-eval"]``: set dotted keys (values parsed as YAML)."""
    for item in overrides or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: override {item!r} is not KEY=VALUE")
        *parents, leaf = key.strip().split(".")
        node = raw
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: override {item!r}: {p!r} is not a mapping")
        try:
            node[leaf] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"{source}: override {item!r}: the value is not valid YAML") from None
    return raw


def bundled_examples() -> pathlib.Path:
    """The folder of the bundled examples: ``examples/`` of a source checkout, ``certsel/examples`` of an installed
    wheel."""
    here = pathlib.Path(__file__).resolve().parents[1]
    return here / "examples" if (here / "examples").is_dir() else here.parent / "examples"


def job_path(path) -> pathlib.Path:
    """``path``, or, where no such file exists and ``path`` is relative, the bundled example of that name
    (``examples/quantization.yaml``, ``quantization.yaml`` or ``quantization``), said on stderr: the README's commands
    then run from a wheel in any folder. Anything else is left to the caller's "not found"."""
    path = pathlib.Path(path)
    if path.is_file() or path.is_absolute():
        return path
    for name in (path.name, f"{path.name}.yaml"):
        bundled = bundled_examples() / name
        if bundled.is_file() and path.parent in (pathlib.Path("."), pathlib.Path("examples")):
            logging.getLogger("certsel").warning("%s is not here: running the bundled example %s", path, bundled)
            return bundled
    return path


def read_job_file(path) -> dict:
    """A YAML job file's mapping, not yet validated."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(raw).__name__}")
    return raw


def load_config(path, overrides=None, adjust=None) -> RunConfig:
    """Read and validate a YAML job file; ``overrides``: ``KEY=VALUE`` strings; ``adjust``: turns the mapping into
    the job to run before the overrides apply (e.g. into a gate)."""
    path = job_path(path)
    raw = read_job_file(path)
    raw.setdefault("name", path.stem)  # a job without a name is called after its file
    raw = apply_overrides(raw if adjust is None else adjust(raw), overrides, str(path))
    lines = key_lines(path.read_text())
    sets = {}  # a value given by --set is not the file's: an error about it names the --set
    for item in overrides or ():
        key = tuple(item.partition("=")[0].strip().split("."))
        lines = {k: v for k, v in lines.items() if k[: len(key)] != key and key[: len(k)] != k}
        sets[key] = item
    return parse_config(raw, source=str(path), base_dir=path.parent, lines=lines, sets=sets)
