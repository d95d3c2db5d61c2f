"""The install as a platform team runs it: `python -m automation install --render DIR` (docs/install.md), the
rendered directory applied with the real `kubectl apply -k` to a real kube-apiserver, and the service run from
the Deployment as the API server stores it, the way a kubelet would (tests/deployed.py), without the backend
Secret. The values reach the objects; a bad value exits 2 naming its key and writes nothing; docs/install.md's
table names every key with its default, and its overlay builds.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from automation.adapters.files import install
from components.ingress import CentralProxy, CentralProxyArgs
from doubles.envtest import find_binary
from stacks.deployment import BACKEND_SECRET_KEYS, IRSA_ANNOTATION, InstallValues, load_values, value_keys
from stacks.errors import InvalidSpec
from stacks.install import CONSOLE_RULES
from stacks.model.loading import parse
from stacks.names import FINALIZER, SHARED_INGRESS_CONFIGMAP
from stacks.release import default_image
from tests import deployed
from tests.dockerfile import image
from tests.envtest import TOOLS_BIN, free_port, start_envtest
from doubles.factories import hub_doc
from doubles.kubectl import against
from doubles.service_env import ServiceEnv, wait_until
from tests.test_deploy_live import HUB, INGRESS_ONLY, backend_stacks, settled

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "install.md"
KUBECTL = find_binary("kubectl")
NEEDS_KUBECTL = pytest.mark.skipif(KUBECTL is None, reason="kubectl not found: scripts/tools.sh builds it into "
                                                           f"{TOOLS_BIN}")
ROLE = "arn:aws:iam::123456789012:role/hubwright-controller"


def block(marker: str, lang: str) -> str:
    """docs/install.md's ```<lang> block after the line `<!-- marker -->`."""
    found = re.search(rf"<!-- {marker} -->\s*```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert found, f"docs/install.md lost its {marker} block"
    return found[1]


def shell_env(**extra: str) -> dict[str, str]:
    """What the doc assumes: the project's venv active, kubectl on PATH, the project importable."""
    path = f"{Path(sys.executable).parent}:{TOOLS_BIN}:/usr/bin:/bin"
    return {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8", **extra}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "automation", "install", *args], cwd=cwd, env=shell_env(),
                          capture_output=True, text=True, timeout=120)


def rendered(where: Path) -> dict[tuple[str, str], dict]:
    """The objects of a rendered directory, by (kind, name), read through its kustomization.yaml."""
    kustomization = yaml.safe_load((where / install.KUSTOMIZATION).read_text())
    objs = [yaml.safe_load((where / name).read_text()) for name in kustomization["resources"]]
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def container(deployment: dict) -> dict:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return only


def volumes(deployment: dict) -> dict[str, dict]:
    return {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}


# --------------------------------------------------------------------------- the render, no server

@pytest.mark.live
def test_the_render_is_deterministic_plain_and_namespaced(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        done = cli("--render", str(out), "--set", f"serviceAccount.roleArn={ROLE}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    files = sorted(os.listdir(first))
    assert files == sorted(os.listdir(second))
    assert all((first / f).read_bytes() == (second / f).read_bytes() for f in files)
    objs = rendered(first)
    assert sorted(install.KUSTOMIZATION if f == install.KUSTOMIZATION else f for f in files) == sorted(
        [install.KUSTOMIZATION, *(install.file_name(o) for o in objs.values())])
    # What the docs' registry walkthrough needs, which only the test harness installed before.
    assert {("ClusterRole", "hubwright-tenant-admin"), ("ValidatingAdmissionPolicy", "hubwright-tenant-ownership"),
            ("ValidatingAdmissionPolicyBinding", "hubwright-tenant-deletion"),
            ("CustomResourceDefinition", "hubclusters.hubwright.io"), ("Deployment", "hubwright-registry"),
            ("Namespace", "hubwright-system")} <= set(objs)
    text = "".join((first / f).read_text() for f in files)
    assert "pulumi.com" not in text and "managed-by: pulumi" not in text and "urn:pulumi" not in text
    for (kind, name), obj in objs.items():
        if kind not in install.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "hubwright-system", (kind, name)
    # A re-render with the registry off removes its files, and only files the render wrote.
    (first / "mine.yaml").write_text("kind: ConfigMap\n")
    assert cli("--render", str(first), "--set", "registry.enabled=false", cwd=tmp_path).returncode == 0
    assert not any(name.endswith("hubwright-registry.yaml") for name in os.listdir(first))
    assert (first / "mine.yaml").exists()


@pytest.mark.live
def test_the_values_reach_the_objects(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "image": "registry.example.com/hubwright@sha256:" + "ab" * 32, "namespace": "platform-hw",
        "serviceAccount": {"roleArn": ROLE, "annotations": {"team": "platform"}},
        "volumes": {"state": "50Gi", "pulumiHome": "3Gi", "tmp": "512Mi", "facts": "5Gi"},
        "service": {"workers": 12, "metricsPort": 9090,
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}},
        "registry": {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}},
    }))
    done = cli("--render", "out", "--values", str(values), "--set", "service.workers=16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    objs = rendered(tmp_path / "out")
    account = objs[("ServiceAccount", "hubwright")]
    assert account["metadata"]["annotations"] == {IRSA_ANNOTATION: ROLE, "team": "platform"}
    assert account["metadata"]["namespace"] == "platform-hw"
    service = objs[("Deployment", "hubwright")]
    args = container(service)["args"]
    assert args[args.index("--workers") + 1] == "16"  # --set after --values
    assert args[args.index("--metrics-port") + 1] == "9090"
    assert container(service)["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    assert container(service)["image"] == "registry.example.com/hubwright@sha256:" + "ab" * 32
    assert objs[("PersistentVolumeClaim", "hubwright-state")]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert volumes(service)["pulumi-home"]["emptyDir"] == {"sizeLimit": "3Gi"}
    assert volumes(service)["tmp"]["emptyDir"] == {"sizeLimit": "512Mi"}
    registry = objs[("Deployment", "hubwright-registry")]
    assert container(registry)["resources"]["limits"] == {"memory": "256Mi"}
    assert objs[("PersistentVolumeClaim", "hubwright-registry-facts")]["spec"]["resources"]["requests"] == {
        "storage": "5Gi"}
    reg_args = container(registry)["args"]
    assert reg_args[reg_args.index("--agent-image") + 1] == container(service)["image"]
    binding = objs[("ClusterRoleBinding", "hubwright")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hubwright", "namespace": "platform-hw"}]


@pytest.mark.live
def test_without_values_the_image_is_the_release_and_the_backend_secret_is_optional(tmp_path):
    assert cli("--render", "out", cwd=tmp_path).returncode == 0
    service = rendered(tmp_path / "out")[("Deployment", "hubwright")]
    assert container(service)["image"] == default_image() and not default_image().endswith(":latest")
    assert container(service)["envFrom"] == [{"secretRef": {"name": "hubwright-pulumi", "optional": True}}]
    [init] = service["spec"]["template"]["spec"]["initContainers"]
    env = {e["name"]: e.get("value") for e in container(service)["env"]}
    assert env["PULUMI_CONFIG_PASSPHRASE_FILE"] == f"{init['args'][-1]}"
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert ("Secret", "hubwright-pulumi") not in rendered(tmp_path / "out")


@pytest.mark.live
def test_monitoring_is_opt_in_and_its_service_monitor_selects_the_rendered_metrics_service(tmp_path):
    assert cli("--render", "plain", cwd=tmp_path).returncode == 0
    assert not {kind for kind, _ in rendered(tmp_path / "plain")} & {"ServiceMonitor", "PrometheusRule"}  # no CRDs needed
    assert cli("--render", "out", "--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kps",
               cwd=tmp_path).returncode == 0
    objs = rendered(tmp_path / "out")
    [monitor] = [o for (kind, _), o in objs.items() if kind == "ServiceMonitor"]
    [rule] = [o for (kind, _), o in objs.items() if kind == "PrometheusRule"]
    services = [o for (kind, _), o in objs.items() if kind == "Service"
                if monitor["spec"]["selector"]["matchLabels"].items() <= (o["metadata"].get("labels") or {}).items()]
    assert [s["metadata"]["name"] for s in services] == ["hubwright-metrics"]
    ports = {p["name"] for p in services[0]["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert monitor["metadata"]["labels"]["release"] == rule["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["namespace"] == rule["metadata"]["namespace"] == "hubwright-system"


CONSOLE_OBJECTS = {("ServiceAccount", "hubwright-console"), ("ClusterRole", "hubwright-console"),
                   ("ClusterRoleBinding", "hubwright-console"), ("Deployment", "hubwright-console"),
                   ("Service", "hubwright-console"), ("Role", "hubwright-console"),
                   ("RoleBinding", "hubwright-console")}


@pytest.mark.live
def test_the_console_is_opt_in_with_its_own_rights_and_a_hardened_pod(tmp_path):
    """console.enabled (docs/install.md): off by default; on, its ServiceAccount bound to exactly CONSOLE_RULES, one
    hardened pod of the release image serving on 8082 behind a Service on 80, the run history as the registry reads
    it; deploy/ (`pulumi up`) builds the same objects from the same values."""
    assert cli("--render", "plain", cwd=tmp_path).returncode == 0
    assert not [name for _, name in rendered(tmp_path / "plain") if "console" in name]
    done = cli("--render", "out", "--set", "console.enabled=true", "--set", "console.secureCookies=true",
               "--set", "backend.url=s3://state/hw", "--set", "volumes.tmp=256Mi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    objs = rendered(tmp_path / "out")
    assert {(kind, name) for kind, name in objs if name == "hubwright-console"} == CONSOLE_OBJECTS
    assert objs[("ClusterRole", "hubwright-console")]["rules"] == [dict(rule) for rule in CONSOLE_RULES]
    assert objs[("ClusterRoleBinding", "hubwright-console")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "hubwright-console", "namespace": "hubwright-system"}]
    console = objs[("Deployment", "hubwright-console")]
    assert console["spec"]["replicas"] == 1 and console["metadata"]["namespace"] == "hubwright-system"
    pod = console["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hubwright-console" and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert volumes(console)["tmp"]["emptyDir"] == {"sizeLimit": "256Mi"}
    box = container(console)
    assert box["image"] == container(objs[("Deployment", "hubwright")])["image"] == default_image()
    assert box["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                      "capabilities": {"drop": ["ALL"]}}
    args = box["args"]
    assert args[:4] == ["python", "-m", "automation", "console"] and "--secure-cookies" in args
    assert args[args.index("--console-bind") + 1] == "0.0.0.0:8082"
    assert args[args.index("--backend") + 1] == "s3://state/hw" and "--history-store" not in args
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in box["env"]} == {"hubwright-pulumi"}
    assert box["readinessProbe"]["httpGet"] == box["livenessProbe"]["httpGet"] == {"path": "/healthz",
                                                                                   "port": "http"}
    assert box["ports"] == [{"name": "http", "containerPort": 8082}]
    service = objs[("Service", "hubwright-console")]
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert service["spec"]["selector"] == console["spec"]["template"]["metadata"]["labels"]
    values = {"console": {"enabled": True}}
    by_key = lambda objs: sorted(json.dumps(o, sort_keys=True) for o in objs)  # noqa: E731
    assert by_key(deployed.objects(deployed.render({"values": values}))) == by_key(install.render(load_values(values)))


@pytest.mark.live
def test_cluster_wide_only_renders_what_a_service_run_outside_the_cluster_needs(tmp_path):
    assert cli("--render", "out", "--cluster-wide-only", cwd=tmp_path).returncode == 0
    objs = rendered(tmp_path / "out")
    assert {kind for kind, _ in objs} <= install.CLUSTER_SCOPED
    assert ("ClusterRole", "hubwright-tenant-admin") in objs and ("Namespace", "hubwright-system") in objs
    assert {kind for kind, _ in objs} >= {"CustomResourceDefinition", "ValidatingAdmissionPolicy",
                                          "ValidatingAdmissionPolicyBinding"}
    assert not [name for kind, name in objs if kind in ("Deployment", "Service", "ServiceAccount")]


@pytest.mark.live
def test_a_remote_backend_needs_its_secret_which_the_values_may_create(tmp_path):
    done = cli("--render", "out", "--set", "backend.url=s3://state-bucket/hubwright",
               "--set", "backend.secret.data.PULUMI_CONFIG_PASSPHRASE=correct-horse", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    objs = rendered(tmp_path / "out")
    service = objs[("Deployment", "hubwright")]
    assert container(service)["envFrom"] == [{"secretRef": {"name": "hubwright-pulumi", "optional": False}}]
    assert "initContainers" not in service["spec"]["template"]["spec"]
    assert service["spec"]["replicas"] == 2 and volumes(service)["state"]["emptyDir"] == {"sizeLimit": "10Gi"}
    assert objs[("Secret", "hubwright-pulumi")]["stringData"] == {"PULUMI_CONFIG_PASSPHRASE": "correct-horse"}
    assert objs[("Secret", "hubwright-pulumi")]["metadata"]["namespace"] == "hubwright-system"


@pytest.mark.live
def test_the_runners_executor_renders_the_runner_pool_and_its_rights(tmp_path):
    """service.executor runners (docs/install.md): the runner Deployment, its ServiceAccount and roles, the
    service told to await runs; the HubStackRun CRD and its admission policy are rendered whatever the executor."""
    assert cli("--render", "local", cwd=tmp_path).returncode == 0
    local = rendered(tmp_path / "local")
    assert {("CustomResourceDefinition", "hubstackruns.hubwright.io"),
            ("ValidatingAdmissionPolicy", "hubwright-stackrun-author"),
            ("ValidatingAdmissionPolicyBinding", "hubwright-stackrun-author")} <= set(local)
    assert not [name for _, name in local if name.startswith("hubwright-runner")]
    done = cli("--render", "out", "--set", "service.executor=runners", "--set", "backend.url=s3://state/hw",
               "--set", "runners.replicas=6", "--set", "runners.claimTtl=20", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    objs = rendered(tmp_path / "out")
    assert {(kind, name) for kind, name in objs if name == "hubwright-runner"} == {
        ("ServiceAccount", "hubwright-runner"), ("ClusterRole", "hubwright-runner"),
        ("ClusterRoleBinding", "hubwright-runner"), ("Role", "hubwright-runner"), ("RoleBinding", "hubwright-runner"),
        ("Deployment", "hubwright-runner")}
    runners = objs[("Deployment", "hubwright-runner")]
    assert runners["spec"]["replicas"] == 6 and runners["metadata"]["namespace"] == "hubwright-system"
    args = container(runners)["args"]
    assert args[:4] == ["python", "-m", "automation", "runner"] and args[args.index("--claim-ttl") + 1] == "20"
    assert args[args.index("--backend") + 1] == "s3://state/hw"
    serve = container(objs[("Deployment", "hubwright")])["args"]
    assert serve[serve.index("--executor") + 1] == "runners" and serve[serve.index("--claim-ttl") + 1] == "20"
    assert objs[("RoleBinding", "hubwright-runner")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "hubwright-runner", "namespace": "hubwright-system"}]
    # deploy/ (`pulumi up`) builds the same objects from the same values.
    values = {"service": {"executor": "runners"}, "backend": {"url": "s3://state/hw"}, "runners": {"replicas": 6}}
    by_key = lambda objs: sorted(json.dumps(o, sort_keys=True) for o in objs)  # noqa: E731
    assert by_key(deployed.objects(deployed.render({"values": values}))) == by_key(install.render(load_values(values)))


@pytest.mark.parametrize("assignment, key, reason", [
    ("serviceAccount.roleArn=arn:aws:iam::123456789012:user/alice", "serviceAccount.roleArn", "not an IAM role ARN"),
    ("image=ghcr.io/hubwright/hubwright:latest", "image", "moving tag"),
    ("service.workers=0", "service.workers", "greater than or equal to 1"),
    ("volumes.state=lots", "volumes.state", "not a Kubernetes quantity"),
    ("backend.url=ftp://x", "backend.url", "expected s3://"),
    ("backend.secret.data.AWS_SECERT_ACCESS_KEY=x", "backend.secret.data", "unknown key(s) AWS_SECERT_ACCESS_KEY"),
    ("servce.workers=2", "servce", "unknown key"),
    ("namespace=Hubwright_System", "namespace", "not a namespace name"),
    ("service.executor=runners", "service", "executor runners needs a shared backend (backend.url"),
    ("service.executor=remote", "service.executor", "should match pattern"),
    ("runners.replicas=0", "runners.replicas", "greater than or equal to 1"),
])
@pytest.mark.live
def test_a_bad_value_exits_2_naming_its_key_and_writes_nothing(assignment, key, reason, tmp_path):
    done = cli("--render", "out", "--set", assignment, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"install values (--set): {key}: " in done.stderr and reason in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.live
def test_a_values_file_that_is_not_a_map_is_refused(tmp_path):
    (tmp_path / "values.yaml").write_text("- image: x\n")
    done = cli("--render", "out", "--values", "values.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "install values (values.yaml): values: expected a map of keys" in done.stderr


def test_the_docs_table_names_every_key_with_its_default():
    text = DOC.read_text(encoding="utf-8")
    defaults = InstallValues().model_dump(by_alias=True)
    rows = dict(re.findall(r"^\| `([A-Za-z.]+)` \| (.*?) \|", text, re.M))
    for key in value_keys():
        assert key in rows, f"docs/install.md's table lacks {key}"
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        shown = json.dumps(value) if isinstance(value, (dict, bool, list)) else value
        want = "unset" if value is None else f"`{shown}`"
        if key == "image":
            want = "`ghcr.io/hubwright/hubwright:<version>`"
            assert default_image().startswith("ghcr.io/hubwright/hubwright:")
        assert rows[key] == want, (key, rows[key], want)
    for secret_key in BACKEND_SECRET_KEYS:
        assert f"`{secret_key}`" in text


def test_the_pulumi_door_reads_the_same_values():
    """deploy/ with a bad value stops before anything is registered, naming the key as the CLI does."""
    with pytest.raises(Exception, match=r"stack config hubwright-deploy:values\): serviceAccount.roleArn"):
        deployed.render({"values": {"serviceAccount": {"roleArn": "nope"}}})
    objs = deployed.objects(deployed.render({"values": {"serviceAccount": {"roleArn": ROLE},
                                                        "service": {"workers": 6}}}))
    from_cli = install.render(load_values({"serviceAccount": {"roleArn": ROLE}, "service": {"workers": 6}}))
    by_key = lambda objs: sorted(json.dumps(o, sort_keys=True) for o in objs)  # noqa: E731
    assert by_key(objs) == by_key(from_cli)


def test_load_values_names_every_bad_key_at_once():
    with pytest.raises(InvalidSpec) as err:
        load_values({"service": {"workers": 100, "policy": "sometimes"}, "volumes": {"tmp": "1 GB"}}, source="x")
    assert sorted(e.field for e in err.value.errors) == ["service.policy", "service.workers", "volumes.tmp"]


@pytest.mark.live
@NEEDS_KUBECTL
def test_the_docs_overlay_builds_on_the_render(tmp_path):
    assert cli("--render", "hubwright-install", cwd=tmp_path).returncode == 0
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(block("overlay", "yaml"))
    built = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    objs = list(yaml.safe_load_all(built.stdout))
    assert len(objs) == len(rendered(tmp_path / "hubwright-install"))
    assert all(o["metadata"]["labels"]["team"] == "platform" for o in objs)


# --------------------------------------------------------------------------- applied and run, as deployed

MISSING = deployed.missing() or (None if KUBECTL else "kubectl not found (scripts/tools.sh)")


@pytest.mark.live
@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_the_documented_install_applies_and_runs_the_service_without_the_backend_secret(tmp_path):
    with start_envtest() as api, api.api_client() as admin:
        kubeconfig = str(api.kubeconfig())
        # The docs' block, as written.
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block("render", "sh")], cwd=tmp_path,
                              env=shell_env(KUBECONFIG=kubeconfig), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "hubwright-registry" in done.stdout and "hubwright " in done.stdout
        apps = client.AppsV1Api(admin)
        stored = admin.sanitize_for_serialization(apps.read_namespaced_deployment("hubwright", "hubwright-system"))
        args = container(stored)["args"]
        assert args[args.index("--workers") + 1] == "8"
        assert client.CoreV1Api(admin).read_namespaced_service_account("hubwright", "hubwright-system") \
            .metadata.annotations[IRSA_ANNOTATION] == ROLE

        # The same render on a free metrics port (this machine is shared), applied over it: an upgrade.
        port = free_port()
        again = subprocess.run(
            [sys.executable, "-m", "automation", "install", "--render", "hubwright-install",
             "--set", f"serviceAccount.roleArn={ROLE}", "--set", "service.workers=8",
             "--set", f"service.metricsPort={port}"], cwd=tmp_path, env=shell_env(), capture_output=True, text=True,
            timeout=120)
        assert again.returncode == 0, again.stderr
        applied = against(api)("apply", "-k", "hubwright-install", cwd=tmp_path)
        assert "deployment.apps/hubwright configured" in applied.stdout, applied.stdout

        # The rest of this hub: its HubConfig with a shared ingress, and deploy/'s central proxy for it.
        hub = parse(hub_doc(**HUB))
        deployed.apply(admin, deployed.objects(deployed.render_component(lambda provider: CentralProxy(
            SHARED_INGRESS_CONFIGMAP, CentralProxyArgs.from_hub(
                hub.spec.shared_ingress, [], reloader_image="hubwright:live", routes_from_service=True,
                route_writer=("hubwright-system", "hubwright")), provider))))
        kube = ServiceEnv(admin, namespace="acme", system_namespace="hubwright-system")
        kube.namespace("acme")
        kube.hub(**HUB)

        # The pod as the API server stores it; no Secret hubwright-pulumi exists.
        stored = admin.sanitize_for_serialization(apps.read_namespaced_deployment("hubwright", "hubwright-system"))
        assert not [s for s in client.CoreV1Api(admin).list_namespaced_secret("hubwright-system").items
                    if s.metadata.name == "hubwright-pulumi"]
        pod = deployed.pod_of(stored)
        with deployed.running(pod, image(), client.CoreV1Api(admin), int(api.host.rsplit(":", 1)[1]), api.ca_file,
                              tmp_path / "pod") as (box, vols):
            passphrase = vols["state"] / ".pulumi-passphrase"
            assert len(passphrase.read_text()) >= 40
            assert stat.S_IMODE(passphrase.stat().st_mode) == 0o600
            kube.create("prod-1", **INGRESS_ONLY)
            ready = wait_until(lambda: settled(kube, "prod-1"), 300, what="prod-1 Ready", diagnose=box.tail)
            assert ready["status"] == "True", (ready, kube.events(name="prod-1"), box.tail())
            assert FINALIZER in kube.get("prod-1")["metadata"]["finalizers"]
            assert backend_stacks(vols["state"], tmp_path) == ["organization/hubwright/acme.prod-1"]
            kube.delete("prod-1")
            wait_until(lambda: kube.get("prod-1") is None, 300, what="prod-1 destroyed and released",
                       diagnose=box.tail)
            assert backend_stacks(vols["state"], tmp_path) == []
        status, took = box.stopped
        log = box.log.read_text(errors="replace")
        assert status == 0, (took, box.tail())
        assert "Traceback" not in log and "Forbidden" not in log, log[-8000:]
