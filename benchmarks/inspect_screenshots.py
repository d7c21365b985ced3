"""The MLflow results view with selections and a ranking made inside inspect-ai, as a person sees it.

Runs ``examples/inspect_additions.py`` (one task, a fixed-sequence and a Bonferroni selection,
a ranking: each kept as a certsel job) in a throw-away certsel home, prints ``certsel jobs``
there, starts ``mlflow server`` on the home's store and opens the ``certsel-inspect``
experiment at certsel's results view in headless Chromium (Debian's ``chromium``), writing
``docs/img/inspect_mlflow_results.png``.

    python benchmarks/inspect_screenshots.py [--chromium /usr/bin/chromium] [--out docs/img]
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from report_screenshots import ROOT, _shown, mlflow_server, screenshot, screenshot_args


def main(argv=None) -> int:
    args = screenshot_args(__doc__, argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CERTSEL_HOME": tmp}
        subprocess.run([sys.executable, str(ROOT / "examples" / "inspect_additions.py"), "--logs", f"{tmp}/logs"],
                       check=True, env=env, timeout=1200, cwd=tmp)
        certsel = shutil.which("certsel", path=str(pathlib.Path(sys.executable).parent)) or "certsel"
        subprocess.run([certsel, "jobs"], check=True, env=env)
        from mlflow.tracking import MlflowClient

        from certsel.orchestrator.outputs.mlflow_store import ui_link

        exp = MlflowClient(f"sqlite:///{tmp}/mlruns.db").get_experiment_by_name("certsel-inspect")
        with mlflow_server(pathlib.Path(tmp) / "mlruns.db") as base:
            url = ui_link(base, exp.experiment_id)
            png = screenshot(args.chromium, url, args.out / "inspect_mlflow_results.png", (1800, 600), wait_ms=25000)
            print(f"{_shown(png)}: {url.replace(base, 'MLFLOW_UI')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
