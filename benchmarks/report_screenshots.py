"""Screenshots of what a person opens: the reports of the quantization and the ranking
examples (and with ``--live`` of the CPU live job), and the MLflow UI on the link certsel prints.

Runs the bundled examples (local Ray, a throw-away MLflow store), opens each
``report.html`` in headless Chromium (Debian's ``chromium`` package) at 1,280 px, a laptop's
width, then starts
``mlflow server`` on that store (with two more quantization jobs in it) and opens the
runs table at certsel's results view and the quantization job's run at the link
``certsel run`` prints, and writes PNGs into ``docs/img/``. Each PNG is checked to
be a real rendering (not blank) before it is kept.

    python benchmarks/report_screenshots.py [--chromium /usr/bin/chromium] [--out docs/img] [--live]

``--live`` also runs ``examples/live_templates.yaml``, which needs ``bash deploy/cpu/setup.sh``
(the CPU vLLM and the model in ``.venv-vllm`` and ``.models/smollm2`` at the repository root).
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(chromium: str, page, png: pathlib.Path, size=(1200, 1500), wait_ms: int = 0) -> pathlib.Path:
    """``page`` (a file or a URL) rendered by headless Chromium into ``png`` (the top ``size``
    of it); ``wait_ms`` of virtual time lets a single-page app render first."""
    url = page.resolve().as_uri() if isinstance(page, pathlib.Path) else page
    wait = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, *wait, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                        f"--screenshot={png}", url], check=True, capture_output=True, timeout=180)
    from PIL import Image

    with Image.open(png) as im:
        colors = im.convert("L").getextrema()
        if im.size != size or colors[1] - colors[0] < 100:
            raise RuntimeError(f"{png}: not a rendering of {page} (size {im.size}, grey range {colors})")
    return png


def _shown(png: pathlib.Path) -> str:
    """The path as printed: relative to the repository where it lies inside it (--out may be anywhere)."""
    return str(png.relative_to(ROOT)) if png.resolve().is_relative_to(ROOT) else str(png)


def screenshot_args(doc: str, argv=None, live: bool = False) -> argparse.Namespace:
    """--chromium and --out (created) of a screenshot script whose docstring is ``doc``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img")
    if live:
        ap.add_argument("--live", action="store_true", help="also the CPU live job (examples/live_templates.yaml)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def main(argv=None) -> int:
    args = screenshot_args(__doc__, argv, live=True)
    certsel = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        links = {}
        reports = [("quantization", 1500), ("alpacaeval_ranking", 1900)] + ([("live_templates", 1100)] if args.live else [])
        for example, height in reports:
            report = tmp / example
            fresh = ["--set", f"live.cache_dir={tmp}/cache"] if example.startswith("live") else []  # a real run
            p = subprocess.run([certsel, "run", str(ROOT / "examples" / f"{example}.yaml"), "--no-progress",
                                "--output", str(report), "--set", f"tracking.uri=sqlite:///{tmp}/store.db",
                                "--set", f"state.dir={tmp}/jobs", *fresh], check=True, timeout=1200,
                               capture_output=True, text=True)
            links[example] = next(line.split(", then ")[1].split(" (every")[0] for line in p.stdout.splitlines()
                                  if line.startswith("MLflow UI: "))
            png = screenshot(args.chromium, report / "report.html", args.out / f"report_{example}_1280.png",
                             (1280, height))
            print(f"{_shown(png)}: {example} report as headless Chromium renders it")
        for alpha in ("0.05", "0.2"):  # more jobs in the store: the runs table shows one row per job
            subprocess.run([certsel, "run", str(ROOT / "examples" / "quantization.yaml"), "--no-progress", "--set",
                            f"alpha={alpha}", "--set", f"tracking.uri=sqlite:///{tmp}/store.db", "--set",
                            f"state.dir={tmp}/jobs"], check=True, timeout=1200, capture_output=True)
        mlflow_pages(args, tmp / "store.db", links["quantization"])
    return 0


@contextlib.contextmanager
def mlflow_server(store: pathlib.Path):
    """``mlflow server`` on the SQLite ``store`` at a free local port; yields its base URL."""
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow = shutil.which("mlflow", path=str(pathlib.Path(sys.executable).parent)) or "mlflow"
    server = subprocess.Popen([mlflow, "server", "--backend-store-uri", f"sqlite:///{store}", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def mlflow_pages(args, store: pathlib.Path, run_link: str) -> None:
    """The MLflow UI at the link certsel printed (the run) and at its experiment (the runs table)."""
    from certsel.orchestrator.outputs.mlflow_store import ui_link

    with mlflow_server(store) as base:
        run_url = run_link.replace("http://127.0.0.1:5000", base)
        experiment_url = ui_link(base, run_url.split("#/experiments/")[1].split("/")[0])  # as certsel links it
        for name, url, size in (("mlflow_experiment", experiment_url, (1800, 700)), ("mlflow_run", run_url, (1400, 900))):
            png = screenshot(args.chromium, url, args.out / f"{name}.png", size, wait_ms=25000)
            print(f"{_shown(png)}: {url.replace(base, 'MLFLOW_UI')}")


if __name__ == "__main__":
    sys.exit(main())
