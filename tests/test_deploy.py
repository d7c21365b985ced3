"""deploy/: the cluster configuration is validated here (the GPU path differs only in it)."""

import json
import pathlib

import jsonschema
import pytest
import ray
import yaml

# the manifests and configs are read and checked here, nothing runs: the fast tier

DEPLOY = pathlib.Path(__file__).resolve().parents[1] / "deploy"


def docs(path):
    return [d for d in yaml.safe_load_all((DEPLOY / path).read_text()) if d is not None]


def test_ray_up_config_matches_rays_schema():
    cfg = yaml.safe_load((DEPLOY / "ray-up" / "cluster.yaml").read_text())
    schema = json.loads((pathlib.Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(cfg, schema)
    assert cfg["head_node_type"] in cfg["available_node_types"]
    gpu = cfg["available_node_types"]["gpu"]
    assert gpu["resources"]["GPU"] >= 1 and gpu["max_workers"] <= cfg["max_workers"]
    assert any("RAY_AUTH_MODE=token" in c for c in cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"])
    assert any("ray[default]==" + ray.__version__ in c for c in cfg["setup_commands"])


def _containers(pod_spec):
    return pod_spec["containers"]


def _env_names(container):
    return {e["name"] for e in container.get("env", [])}


def test_raycluster_and_rayjob():
    (cluster,) = docs("kuberay/raycluster.yaml")
    (job,) = docs("kuberay/rayjob.yaml")
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert cluster["spec"]["rayVersion"] == ray.__version__
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]]
    pods.append(job["spec"]["submitterPodTemplate"]["spec"])
    for pod in pods:
        for c in _containers(pod):
            assert c["image"].split("/")[-1].startswith("certsel:")  # the image of deploy/Dockerfile
            assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} <= _env_names(c)  # every node shares the token
    for g in cluster["spec"]["workerGroupSpecs"]:
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    assert job["spec"]["entrypoint"].startswith("certsel run /config/")
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    mount = job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["volumeMounts"][0]
    assert mount["mountPath"] == "/config"
    assert "MLFLOW_TRACKING_URI" in yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]


@pytest.mark.parametrize("path", ["k8s/vllm-candidates.yaml", "k8s/vllm-judge.yaml", "k8s/vllm-reference.yaml"])
def test_vllm_servers(path):
    objs = docs(path)
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert deployments
    for d in deployments:
        name = d["metadata"]["name"]
        assert name in services, f"{name} has no Service"
        assert services[name]["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]
        assert d["spec"]["template"]["metadata"]["labels"] == d["spec"]["selector"]["matchLabels"]
        (c,) = _containers(d["spec"]["template"]["spec"])
        args = c["args"]
        assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
        assert "--served-model-name" in args and args[args.index("--port") + 1] == "8000"
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
        assert "--enable-prefix-caching" in args  # a job's requests share their template
        tp = int(args[args.index("--tensor-parallel-size") + 1]) if "--tensor-parallel-size" in args else 1
        assert tp == int(c["resources"]["limits"]["nvidia.com/gpu"])
        if path.endswith("candidates.yaml"):
            assert args[args.index("--quantization") + 1] in {"fp8", "awq", "gptq", "bitsandbytes", "gguf"}
            assert args[args.index("--served-model-name") + 1] == d["metadata"]["labels"]["candidate"]


def test_mlflow_server():
    objs = docs("k8s/mlflow.yaml")
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (svc,) = [o for o in objs if o["kind"] == "Service"]
    (c,) = _containers(dep["spec"]["template"]["spec"])
    cmd = " ".join(c["args"])
    assert "mlflow server" in cmd and "--backend-store-uri" in cmd and "--serve-artifacts" in cmd
    assert "MLFLOW_DB_URL" in _env_names(c)  # the database URL (with its password) comes from a Secret
    assert svc["spec"]["ports"][0]["port"] == 5000
    (job,) = docs("kuberay/rayjob.yaml")
    uri = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]["MLFLOW_TRACKING_URI"]
    assert uri.startswith(f"http://{svc['metadata']['name']}.") and uri.endswith(":5000")


ADDITIONS = DEPLOY.parent / "examples" / "data" / "additions.jsonl"


def _job(name):
    from certsel.config import load_config

    # the items file is the user's (TriviaQA questions); any valid items file stands in
    return load_config(DEPLOY / "jobs" / name, [f"live.items={ADDITIONS}"])


def _comparable(cfg):
    """A job without its addresses: what must be the same on every platform."""
    live = cfg.live
    cands = [c.model_dump(exclude={"base_url", "server", "model", "cache_key"}) for c in live.candidates]
    judge = live.judge.model_dump(exclude={"base_url", "server", "model", "cache_key"})
    judge["reference"] = live.reference.model_dump(exclude={"base_url", "server", "model", "cache_key"})
    rest = cfg.model_dump(exclude={"live", "tracking", "ray"})
    return rest, cands, judge, live.loss


def test_k8s_job_points_at_the_vllm_services():
    cfg = _job("quantization_k8s.yaml")
    services = {}
    for path in ("k8s/vllm-candidates.yaml", "k8s/vllm-judge.yaml", "k8s/vllm-reference.yaml"):
        objs = docs(path)
        served = {}
        for d in (o for o in objs if o["kind"] == "Deployment"):
            (c,) = _containers(d["spec"]["template"]["spec"])
            served[d["metadata"]["name"]] = c["args"][c["args"].index("--served-model-name") + 1]
        for s in (o for o in objs if o["kind"] == "Service"):
            url = f"http://{s['metadata']['name']}.certsel.svc:{s['spec']['ports'][0]['port']}"
            services[url] = served[s["metadata"]["name"]]
    assert cfg.live.reference is not None and cfg.alpha == 0.1  # the drop against BF16
    for ep in [*cfg.live.candidates, cfg.live.judge, cfg.live.reference]:
        assert ep.base_url in services, f"{ep.base_url} is not a Service of deploy/k8s"
        assert ep.model == services[ep.base_url], f"{ep.base_url} serves {services[ep.base_url]}, not {ep.model}"
    (job,) = docs("kuberay/rayjob.yaml")
    assert job["spec"]["entrypoint"].split()[2] == "/config/job.yaml"  # the ConfigMap the job file goes into


def test_ray_up_job_serves_its_models_on_the_gpu_workers():
    cfg = _job("quantization_ray_up.yaml")
    cluster = yaml.safe_load((DEPLOY / "ray-up" / "cluster.yaml").read_text())
    gpu_types = [t for t in cluster["available_node_types"].values() if t["resources"].get("GPU", 0) > 0]
    per_node = max(t["resources"]["GPU"] for t in gpu_types)
    capacity = sum(t["resources"]["GPU"] * t["max_workers"] for t in gpu_types)
    assert all(0 < s.num_gpus <= per_node for s in cfg.live.serve)  # each server fits on one GPU worker
    assert sum(s.num_gpus for s in cfg.live.serve) <= capacity  # and they all run at once
    assert cfg.live.reference.server in {s.name for s in cfg.live.serve}
    for s in cfg.live.serve:
        assert "--port" not in s.args and "--host" not in s.args  # certsel picks them
        assert "--enable-prefix-caching" in s.args
        if "--quantization" in s.args:
            assert s.args[s.args.index("--quantization") + 1] in {"fp8", "awq", "gptq", "bitsandbytes", "gguf"}
    # the two GPU jobs are the same job: only where the models are served differs
    assert _comparable(cfg) == _comparable(_job("quantization_k8s.yaml"))


def test_sweep_job_has_more_servers_than_gpus_and_every_candidate_can_run():
    """deploy/jobs/quantization_sweep_4gpu.yaml: 8 checkpoints (pre-quantized and quantized on
    the fly by vLLM), a reference and a judge, 10 servers asking for 12 GPUs on a 4-GPU node:
    each server fits on the node, each candidate's servers fit together (its own: the judge
    answers the questions itself and the reference's answers come first, so neither is needed
    alongside it), and the certificate is the drop against BF16."""
    from certsel.workers.serving import demand, pack

    cfg = _job("quantization_sweep_4gpu.yaml")
    node = [{"GPU": 4.0, "CPU": 48.0}]
    serve = {s.name: s for s in cfg.live.serve}
    assert len(cfg.live.candidates) >= 6 and sum(s.num_gpus for s in serve.values()) > 4
    assert all(pack([demand(s.model_dump())], node) for s in serve.values())
    assert cfg.live.judge.mode == "answer" and cfg.live.reference.server == "bf16" and cfg.alpha == 0.1
    for c in cfg.live.candidates:
        assert pack([demand(serve[c.server].model_dump())], node)
    on_the_fly = {s.name for s in serve.values() if "--quantization" in s.args and "meta-llama/" in s.model}
    assert len(on_the_fly) >= 2 and len([s for s in serve.values() if "quantized" in s.model or "INT4" in s.model
                                         or "FP8" in s.model]) >= 3
    assert cfg.order == [c.id for c in cfg.live.candidates] and cfg.costs.gpu_hour > 0
