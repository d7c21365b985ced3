"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``: a head and two worker
raylets with their own node ids, object stores and worker processes). The candidate hosts
spread over the nodes; a worker node removed in the middle of a live job (its raylet and
every actor on it gone) costs the job nothing: the driver rebuilds the lost hosts on the
nodes that are left, from the durable label log in the job folder (shared by the nodes,
as ``state.dir`` on shared storage would be), and the job ends with the certificate, the
label counts and the label order of a run without the loss, no label bought twice."""

import pathlib
import re
import threading

import pytest
import ray
from certsel.config import load_config
from certsel.orchestrator.engine.driver import RayRuntime, run_job
from certsel.workers.contracts import NodeId
from certsel.orchestrator.inputs.sources import load_job_data
from ray.cluster_utils import Cluster
from helpers.servers import adder_server
from helpers.jobs import assert_same_outcome, logged_labels, no_duplicates, wait_for, write_job

pytestmark = pytest.mark.multinode
# a small object store per node: four raylets on one machine must not reserve its memory
STORE = {"object_store_memory": 200 * 1024 * 1024}


_SHARED: dict = {}


def _drop_shared() -> None:
    """Shut the shared cluster down (before a test that builds a cluster of its own)."""
    if _SHARED:
        c, _ = _SHARED.pop("cluster")
        ray.shutdown()
        c.shutdown()


@pytest.fixture()
def cluster():
    """A head and two worker nodes, built once and shared by the tests that use it (a test
    that removes a worker node adds a fresh one in its place before it ends, so that each
    test finds three nodes, in any order); shut down at the module's end or before a test
    that builds its own."""
    if "cluster" not in _SHARED:
        if ray.is_initialized():  # the test process's local Ray (conftest.ray_session): a cluster is another shape
            ray.shutdown()
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **STORE})
        workers = [c.add_node(num_cpus=1, **STORE) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        _SHARED["cluster"] = (c, workers)
    yield _SHARED["cluster"]


@pytest.fixture(scope="module", autouse=True)
def _shared_cluster_down():
    yield
    _drop_shared()


def _replace_worker(c, workers, victim):
    """A fresh worker node in place of the removed ``victim``."""
    workers[workers.index(victim)] = c.add_node(num_cpus=1, **STORE)
    c.wait_for_nodes()
    wait_for(lambda: len([n for n in ray.nodes() if n["Alive"]]) == 3, timeout=120)


def test_worker_node_removed_mid_run(cluster, tmp_path):
    c, workers = cluster
    assert len([n for n in ray.nodes() if n["Alive"]]) == 3
    with adder_server() as (url, srv):
        (tmp_path / "ref").mkdir()
        (tmp_path / "lost").mkdir()
        ref_cfg = load_config(write_job(tmp_path / "ref", url))
        rt = RayRuntime()
        rt.ensure_hosts(3)
        nodes = [rt.call(h, NodeId()) for h in range(3)]
        for _ in range(8):  # SPREAD is best effort: under load Ray may place all three on one node
            if len(set(nodes)) >= 2:
                break
            rt.ensure_hosts(len(rt.hosts) + 1)  # one more host, put first: the job uses hosts 0..2
            rt.hosts.insert(0, rt.hosts.pop())
            nodes = [rt.call(h, NodeId()) for h in range(3)]
        assert len(set(nodes)) >= 2, "the hosts did not spread over the nodes"
        ref = run_job(ref_cfg, load_job_data(ref_cfg), rt, n_hosts=3, job_dir=tmp_path / "ref" / "job")

        srv.delay = 0.03  # slow answers, so that the node goes in the middle of the job
        cfg = load_config(write_job(tmp_path / "lost", url))
        job_dir = tmp_path / "lost" / "job"
        out = {}
        thread = threading.Thread(target=lambda: out.update(res=run_job(cfg, load_job_data(cfg), rt, n_hosts=3,
                                                                         job_dir=job_dir)))
        thread.start()
        wait_for(lambda: logged_labels(job_dir) >= 60, timeout=300)
        by_id = {w.node_id: w for w in workers}
        victim = next(by_id[n] for n in nodes if n in by_id)  # a worker node that hosts candidates
        c.remove_node(victim, allow_graceful=False)
        srv.delay = 0.0  # the node is gone mid-job: the rest of the job need not be slow
        thread.join(timeout=600)
        assert not thread.is_alive()
        res = out["res"]
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert victim.node_id not in alive
        assert all(rt.call(h, NodeId()) in alive for h in range(3))  # every host now lives elsewhere
        rt.close()
    _replace_worker(c, workers, victim)
    assert res.recovered.hosts >= 1
    assert_same_outcome(ref.records, res.records)
    assert res.certified == ref.certified and res.selected == ref.selected
    no_duplicates(res.labels)
    for name in ref.labels:
        assert list(res.labels[name].item) == list(ref.labels[name].item)


def test_driver_lost_then_resumed_on_the_cluster(cluster, tmp_path):
    """The driver joins the cluster (``RAY_ADDRESS``), is killed with SIGKILL in the middle
    of the job (as when its node goes), and a new driver process resumes the job from the
    job folder: the same selection and label counts as an uninterrupted run, no label
    bought twice."""
    import json
    import os
    import signal
    import subprocess
    import sys

    import yaml
    from certsel.orchestrator.engine.state import CHECKPOINT

    c, _ = cluster
    env = {**os.environ, "RAY_ADDRESS": c.address}
    cmd = [sys.executable, "-m", "certsel.cli", "run", "job.yaml", "--no-progress", "--no-tracking"]
    with adder_server() as (url, srv):
        for d in ("ref", "kill"):
            (tmp_path / d).mkdir()
            path = write_job(tmp_path / d, url)
            job = yaml.safe_load(path.read_text())
            job["state"] = {"snapshot_every": 1, "dir": ".certsel-jobs"}  # beside the job file
            path.write_text(yaml.safe_dump(job))
        ref = subprocess.run([*cmd, "--json", "sel.json"], cwd=tmp_path / "ref", env=env, capture_output=True,
                             text=True, timeout=600)
        assert ref.returncode == 0, ref.stderr
        srv.delay = 0.03
        kill_dir = tmp_path / "kill"
        proc = subprocess.Popen(cmd, cwd=kill_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        job_id = first.split()[1].rstrip(":")
        job_dir = kill_dir / ".certsel-jobs" / job_id
        wait_for(lambda: (job_dir / CHECKPOINT).exists(), timeout=300)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        srv.delay = 0.0
        res = subprocess.run([*cmd, "--json", "sel.json"], cwd=kill_dir, env=env, capture_output=True, text=True,
                             timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"resuming job {job_id}"), res.stdout
    a = json.loads((tmp_path / "ref" / "sel.json").read_text())
    b = json.loads((kill_dir / "sel.json").read_text())
    assert b["certified_set"] == a["certified_set"] and b["selected"] == a["selected"]
    for x, y in zip(a["candidates"], b["candidates"], strict=True):
        assert (x["status"], x["labels_human"], x["labels_judge"]) == (y["status"], y["labels_human"], y["labels_judge"])
    assert b["labels"]["spent"]["human"] == a["labels"]["spent"]["human"]


def _served_job(tmp_path, delay: float):
    """The live job of test_live_job.write_job, with the adder served by certsel itself
    (live.serve: tests/helpers/servers.py as the server program) on a node with the "serving"
    resource."""
    import sys

    import yaml

    path = write_job(tmp_path, "http://unused")
    job = yaml.safe_load(path.read_text())
    tests = str(pathlib.Path(__file__).resolve().parent)
    job["live"]["serve"] = [{"name": "adder", "model": "/models/adder", "python": sys.executable, "module": "helpers.servers",
                             "env": {"PYTHONPATH": tests}, "resources": {"serving": 1}, "startup_timeout": 60,
                             "args": ["--delay", str(delay)]}]
    for ep in [*job["live"]["candidates"], job["live"]["judge"]]:
        ep.pop("base_url")
        ep["server"] = "adder"
    job["state"] = {"snapshot_every": 2, "dir": ".certsel-jobs"}  # beside the job file
    path.write_text(yaml.safe_dump(job))
    return path


def test_node_with_a_served_model_removed_mid_run(tmp_path, caplog):
    """The model server certsel started (live.serve) runs on worker node A, which is removed
    in the middle of the job (after node C, which can also host servers, has joined). The
    candidates' requests fail, the driver finds the server lost, rebuilds the candidates from
    the label log and sends the failed steps again, and the server starts again on C on their
    first request (sources ask the job's fleet for its address): the job ends with the
    certificate and label counts of an uninterrupted run."""
    import logging

    from certsel.orchestrator.commands.job import execute

    caplog.set_level(logging.WARNING, logger="certsel.orchestrator.engine.hosts")
    _drop_shared()
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **STORE})
    a = c.add_node(num_cpus=1, resources={"serving": 1}, **STORE)
    c.add_node(num_cpus=1, **STORE)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        (tmp_path / "ref").mkdir()
        (tmp_path / "lost").mkdir()
        ref, _ = execute(load_config(_served_job(tmp_path / "ref", 0.0)))
        # slow enough (0.1 s a request) that the job is still running when node A goes, under load too
        cfg = load_config(_served_job(tmp_path / "lost", 0.1))
        out = {}
        thread = threading.Thread(target=lambda: out.update(res=execute(cfg)[0]))
        thread.start()
        jobs = tmp_path / "lost" / ".certsel-jobs"
        wait_for(lambda: jobs.is_dir() and any(logged_labels(d) >= 40 for d in jobs.iterdir()), timeout=300)
        c.add_node(num_cpus=1, resources={"serving": 1}, **STORE)
        c.remove_node(a, allow_graceful=False)
        thread.join(timeout=600)
        assert not thread.is_alive()
        res = out["res"]
    finally:
        ray.shutdown()
        c.shutdown()
    # the server did move. Candidate hosts take no CPU and spread over the nodes, so a host can
    # sit on node A too: then the driver finds the host lost first and its rebuild starts the
    # server on C; either way node A's loss was seen and the job finished without it
    assert ("model servers lost (their process, actor or node is gone)" in caplog.text
            or re.search(r"candidate host \d+ lost", caplog.text)), caplog.text
    assert [r.status for r in res.records] == [r.status for r in ref.records]
    assert res.certified == ref.certified and res.selected == ref.selected
    for x, y in zip(ref.records, res.records, strict=True):
        assert (x.n_human, x.n_judge, x.t) == (y.n_human, y.n_judge, y.t)
        assert x.max_log_e == pytest.approx(y.max_log_e, abs=1e-9)
    no_duplicates(res.labels)
