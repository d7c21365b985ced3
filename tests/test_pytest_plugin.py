"""certsel's pytest plugin as a user's suite meets it: found through the ``pytest11`` entry point of the installed
package (no ``-p``, no conftest), its marker listed by ``pytest --markers``, and a real gate inside a test that passes,
fails with the certified bound, and skips or xfails when undecided, with each candidate's line in the JUnit XML."""

import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points

import pytest
from junitparser import Failure, JUnitXml, Skipped

from test_gate import _table


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    found = [e for e in entry_points(group="pytest11") if e.name == "certsel"]
    assert [e.value for e in found] == ["certsel.pytest_plugin"]


def _suite(tmp_path) -> None:
    table = _table(tmp_path)
    (tmp_path / "gate.yaml").write_text(
        f"data: {{path: {table}}}\npolicy: {{kind: r-eval}}\nalpha: 0.2\ndelta: 0.1\nbudget: {{n: 60, batch: 20}}\n"
        f"seed: 3\nstate: {{dir: {tmp_path / 'jobs'}, store: {tmp_path / 'labels.db'}}}\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the user's own settings: none of this project's
    (tmp_path / "test_model.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.certsel_gate("gate.yaml", only=["good"])
        def test_good_passes():
            pass

        @pytest.mark.certsel_gate("gate.yaml", only=["bad"])
        def test_bad_fails():
            pass

        def test_borderline_is_undecided(certsel_gate):
            certsel_gate("gate.yaml", only=["borderline"])
        """))


def _run(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml",
                           str(tmp_path / "junit.xml"), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.integration
def test_a_users_suite_gates_a_job_without_any_setup(tmp_path):
    _suite(tmp_path)
    markers = subprocess.run([sys.executable, "-m", "pytest", "--markers"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert "@pytest.mark.certsel_gate(job" in markers.stdout
    done = _run(tmp_path, "-rs")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out  # one test failed
    assert "1 failed, 1 passed, 1 skipped" in out, out
    assert "FAIL      bad: " in out and "R >= 0.2 certified" in out, out
    cases = {c.name: c for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for c in suite}
    assert cases["test_good_passes"].is_passed
    assert isinstance(cases["test_bad_fails"].result[0], Failure)
    assert isinstance(cases["test_borderline_is_undecided"].result[0], Skipped)
    xml = ET.parse(tmp_path / "junit.xml")
    good = xml.find(".//testcase[@name='test_good_passes']/properties/property[@name='certsel']")
    assert good.get("value").startswith("PASS      good: ") and "R <= " in good.get("value")
    # undecided as xfail: the option, the answering finished jobs (nothing bought again)
    again = _run(tmp_path, "--certsel-undecided", "xfail", "-k", "borderline")
    assert "1 xfailed" in again.stdout, again.stdout + again.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_the_plugin_works_in_a_fresh_virtual_environment(tmp_path):
    """``pip install certsel`` is all it takes: a new virtual environment gets this checkout as a wheel (its
    dependencies resolved by pip, as a user's install resolves them) and pytest, nothing of this environment; the
    user's suite then finds the plugin through the entry point the wheel declares and passes, fails and skips."""
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
                            str(root)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("certsel-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # --no-compile: pip would byte-compile every module of every dependency (about 18 s of its 60 on two cores); the
    # commands below compile only what they import
    got = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", str(wheel), "pytest", "-c",
                          str(root / "constraints.txt")], capture_output=True, text=True, timeout=1200)
    assert got.returncode == 0, got.stderr[-2000:]
    user = tmp_path / "user"
    user.mkdir()
    _suite(user)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", CERTSEL_HOME=str(tmp_path / "home"))
    where = subprocess.run([str(python), "-c", "import certsel; print(certsel.__file__)"], capture_output=True,
                           text=True, env=env, cwd=user, timeout=120)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr  # the wheel, not this checkout
    markers = subprocess.run([str(python), "-m", "pytest", "--markers"], capture_output=True, text=True, env=env,
                             cwd=user, timeout=300)
    assert "@pytest.mark.certsel_gate(job" in markers.stdout, markers.stdout[-2000:] + markers.stderr[-2000:]
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"], capture_output=True,
                          text=True, env=env, cwd=user, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "1 failed, 1 passed, 1 skipped" in out, out[-3000:]
    assert "FAIL      bad: " in out and "R >= 0.2 certified" in out, out[-3000:]
    # the README's quickstart from the wheel, in a folder with no checkout: the bundled example and its data are in it
    job = subprocess.run([str(venv / "bin" / "certsel"), "run", "examples/quantization.yaml", "--no-tracking",
                          "--no-progress"], capture_output=True, text=True, env=env, cwd=user, timeout=600)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-2000:]
    assert "running the bundled example" in job.stderr and str(venv) in job.stderr, job.stderr[-2000:]
    assert "selected: mx_m5_r2_k64" in job.stdout, job.stdout[-2000:]
