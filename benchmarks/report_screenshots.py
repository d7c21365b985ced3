"""Screenshots of the report a person opens: the quantization and the ranking examples.

Runs both bundled examples (local Ray, a throw-away MLflow store), opens each
``report.html`` in headless Chromium (Debian's ``chromium`` package) and writes PNGs into
``docs/img/``. Each PNG is checked to be a real rendering (not blank) before it is kept.

    python benchmarks/report_screenshots.py [--chromium /usr/bin/chromium] [--out docs/img]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(chromium: str, page: pathlib.Path, png: pathlib.Path, size=(1200, 1500)) -> pathlib.Path:
    """``page`` rendered by headless Chromium into ``png`` (the top ``size`` of it)."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                        f"--screenshot={png}", page.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    from PIL import Image

    with Image.open(png) as im:
        colors = im.convert("L").getextrema()
        if im.size != size or colors[1] - colors[0] < 100:
            raise RuntimeError(f"{png}: not a rendering of {page} (size {im.size}, grey range {colors})")
    return png


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    certsel = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for example, height in (("quantization", 1500), ("alpacaeval_ranking", 1900)):
            report = tmp / example
            subprocess.run([certsel, "run", str(ROOT / "examples" / f"{example}.yaml"), "--no-progress", "--quiet",
                            "--report-dir", str(report), "--set", f"tracking.uri=sqlite:///{tmp}/store.db",
                            "--set", f"state.dir={tmp}/jobs"], check=True, timeout=1200)
            png = screenshot(args.chromium, report / "report.html", args.out / f"report_{example}.png",
                             (1200, height))
            print(f"{png.relative_to(ROOT)}: {example} report as headless Chromium renders it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
