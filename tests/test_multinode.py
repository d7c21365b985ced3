"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``: a head and two worker
raylets with their own node ids, object stores and worker processes). The candidate hosts
spread over the nodes; a worker node removed in the middle of a live job (its raylet and
every actor on it gone) costs the job nothing: the driver rebuilds the lost hosts on the
nodes that are left, from the durable label log in the job folder (shared by the nodes,
as ``state.dir`` on shared storage would be), and the job ends with the certificate, the
label counts and the label order of a run without the loss, no label bought twice."""

import threading

import pytest
import ray
from certsel.config import load_config
from certsel.orchestrator.driver import RayRuntime, run_job
from certsel.orchestrator.jobdata import load_job_data
from ray.cluster_utils import Cluster
from servers import adder_server
from test_live_job import write_job
from test_resume import assert_same_outcome, logged_labels, no_duplicates, wait_for


@pytest.fixture()
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c, workers
    ray.shutdown()
    c.shutdown()


def test_worker_node_removed_mid_run(cluster, tmp_path):
    c, workers = cluster
    assert len([n for n in ray.nodes() if n["Alive"]]) == 3
    with adder_server() as (url, srv):
        (tmp_path / "ref").mkdir()
        (tmp_path / "lost").mkdir()
        ref_cfg = load_config(write_job(tmp_path / "ref", url))
        rt = RayRuntime()
        rt.ensure_hosts(3)
        nodes = [rt.call(h, "node_id") for h in range(3)]
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
        thread.join(timeout=600)
        assert not thread.is_alive()
        res = out["res"]
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert victim.node_id not in alive
        assert all(rt.call(h, "node_id") in alive for h in range(3))  # every host now lives elsewhere
        rt.close()
    assert res.recovered["hosts"] >= 1
    assert_same_outcome(ref.records, res.records)
    assert res.certified == ref.certified and res.selected == ref.selected
    no_duplicates(res.labels)
    for name in ref.labels:
        assert list(res.labels[name]["item"]) == list(ref.labels[name]["item"])


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
    from certsel.orchestrator.state import CHECKPOINT

    c, _ = cluster
    env = {**os.environ, "RAY_ADDRESS": c.address}
    cmd = [sys.executable, "-m", "certsel.cli", "run", "job.yaml", "--no-progress", "--no-tracking"]
    with adder_server() as (url, srv):
        for d in ("ref", "kill"):
            (tmp_path / d).mkdir()
            path = write_job(tmp_path / d, url)
            job = yaml.safe_load(path.read_text())
            job["state"] = {"snapshot_every": 1}
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
