"""The deploy path as deployed: deploy/'s objects on a real kube-apiserver, and the service run from its rendered
Deployment as uid 65532 on a read-only root filesystem (tests/deployed.py), with the real pulumi CLI.

A Cluster that uses only the shared ingress needs no cloud account (its stack has outputs and no resources), so
the whole loop runs here: the Cluster becomes Ready, the central proxy's ConfigMap gets its route, and deleting
the Cluster destroys its stack and removes it from the file backend on the state volume. Every AWS call would
hit a tripwire: there must be none. Skips, naming what is missing, without bwrap or the engines.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client

from stacks.times import rfc3339_seconds
from stacks.haproxy import MAP_FILE
from stacks.names import FINALIZER, GROUP, MESH_ENABLED_ANNOTATION, MESH_LABEL, SHARED_INGRESS_CONFIGMAP, VERSION
from tests import deployed
from tests.dockerfile import Image, image
from tests.envtest import free_port, start_envtest, tools_env
from doubles.factories import hub_doc
from doubles.service_env import ServiceEnv, wait_until

MISSING = deployed.missing()
pytestmark = [pytest.mark.live, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]

NAMESPACE = "hubwright-system"
HUB = {"endpointVPCInventory": [], "associatedVPCs": [],  # nothing that would make the service count endpoints
       "sharedIngress": {"address": "lb.example.com:6443", "allowedBackends": ["10.0.0.0/8"]}}
INGRESS_ONLY = {"privateLink": {"enabled": False}, "sharedIngress": {"enabled": True, "backend": "10.0.1.10:6443"}}


@dataclasses.dataclass
class Live:
    port: int  # the apiserver's
    ca_file: str
    admin: client.ApiClient
    objs: list[dict]  # what deploy/ renders, applied
    aws: deployed.AwsTripwire
    kube: ServiceEnv  # the tenant namespace "acme" and the HubConfig "default" exist

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.admin)


def rendered(where: Path, **config: Any) -> list[dict]:
    """Every object deploy/ renders for a HubConfig with a shared ingress (so the central proxy's too)."""
    hub_file = where / "hub.yaml"
    hub_file.write_text(yaml.safe_dump(hub_doc(**HUB)))
    values = {"image": "hubwright:live", "namespace": NAMESPACE, "service": {"metricsPort": free_port()}, **config}
    return deployed.objects(deployed.render({"values": values, "hub": str(hub_file)}))


@pytest.fixture(scope="module")
def objs(tmp_path_factory) -> list[dict]:
    return rendered(tmp_path_factory.mktemp("deploy"))


@pytest.fixture(scope="module")
def live(objs) -> Iterator[Live]:
    """A kube-apiserver of this module's own (without CRDs: the rendered ones are applied) with deploy/'s objects
    and the Secret the administrator creates."""
    with start_envtest() as api, deployed.AwsTripwire().running() as aws, api.api_client() as admin:
        deployed.apply(admin, objs)  # CRDs, Namespaces, RBAC, ServiceAccount, both Deployments, the proxy's ConfigMap
        pod = deployed.pod_of(deployed.one(objs, "Deployment", "hubwright"))
        [source] = pod.container["envFrom"]
        client.CoreV1Api(admin).create_namespaced_secret(NAMESPACE, {  # IRSA would give the AWS credentials
            "metadata": {"name": source["secretRef"]["name"]},
            "stringData": {"PULUMI_CONFIG_PASSPHRASE": "live-test", "AWS_ACCESS_KEY_ID": "AKIDLIVETEST",
                           "AWS_SECRET_ACCESS_KEY": "live-test", "AWS_ENDPOINT_URL": aws.url,
                           "HUBWRIGHT_AWS_ENDPOINT_URL": aws.url}})
        kube = ServiceEnv(admin, namespace="acme", system_namespace=NAMESPACE)
        kube.namespace("acme")
        kube.hub(**HUB)
        yield Live(int(api.host.rsplit(":", 1)[1]), api.ca_file, admin, objs, aws, kube)


@contextlib.contextmanager
def running(live: Live, pod: deployed.Pod, img: Image, where: Path) -> Iterator[tuple[deployed.Container, dict]]:
    """The pod's container, started as the kubelet would and ready; stopped (SIGTERM, then the grace period) after.
    Yields it and the host directories of its volumes; `container.stopped` is (exit status, seconds) afterwards."""
    with deployed.running(pod, img, live.core, live.port, live.ca_file, where) as started:
        yield started


def backend_stacks(state: Path, home: Path) -> list[str]:
    """`pulumi stack ls --all` on the file backend of the state volume, as an administrator would run it."""
    env = {**tools_env(), "PULUMI_BACKEND_URL": f"file://{state}", "PULUMI_HOME": str(home),
           "PULUMI_SKIP_UPDATE_CHECK": "true"}
    out = subprocess.run(["pulumi", "stack", "ls", "--all", "--json"], env=env, cwd=home, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [s["name"] for s in json.loads(out)]


def settled(kube: ServiceEnv, name: str) -> Any:
    """The Ready condition once the service has an answer (anything but the first run still going)."""
    cond = kube.condition(name)
    return cond if cond and cond["reason"] not in ("Progressing", "UpdateStarted") else None


SELF_CHECK = """import os, socket, sys
for path in sys.argv[1:]:
    try:
        open(os.path.join(path, ".probe"), "w").close()
        print(path, "writable", sep="\t")
    except OSError as err:
        print(path, err.strerror, sep="\t")
import automation
print("whoami", os.getuid(), os.getgid(), socket.gethostname(), os.getcwd(), automation.__file__, sep="\t")
print("repository", sorted(os.listdir(sys.argv[-1])) if os.path.isdir(sys.argv[-1]) else [], sep="\t")
"""


@pytest.mark.parametrize("backend", ["", "s3://state-bucket/hubwright"])
def test_the_sandbox_lets_the_container_write_only_its_volumes(backend, tmp_path):
    """Only the declared volumes are writable; with a remote backend too, --state-dir (the workspaces) is one."""
    values = {"backend": {"url": backend}} if backend else {}
    pod = deployed.pod_of(deployed.one(rendered(tmp_path, **values), "Deployment", "hubwright"))
    volumes = deployed.volume_dirs(pod, tmp_path / "volumes")
    tokens = tmp_path / "serviceaccount"
    tokens.mkdir()
    mounts = [m["mountPath"] for m in pod.container["volumeMounts"]]
    others = ["/", "/app", "/app/automation", deployed.SA_DIR, "/opt", "/var/lib", "/var/cache", "/usr/local/bin",
              "/etc", "/root", str(deployed.ROOT)]
    argv = deployed.sandbox(pod, image(), volumes, tokens, str(shutil.which("bwrap")))
    state = pod.container["args"][pod.container["args"].index("--state-dir") + 1]
    out = subprocess.run([*argv, "python", "-c", SELF_CHECK, *mounts, state, *others],
                         env={"PATH": deployed.IMAGE_PATH}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split("\t", 1) for line in out.stdout.splitlines())
    assert {path for path in mounts + others if lines[path] == "writable"} == set(mounts)
    assert lines[state] == "writable"
    not_read_only = {path: lines[path] for path in others if lines[path] != "Read-only file system"}
    # A clone under /tmp (CI's) is hidden by the pod's /tmp volume: not there at all is fine too.
    assert not_read_only in ({}, {str(deployed.ROOT): "No such file or directory"}), lines
    assert lines["whoami"].split("\t") == ["65532", "65532", pod.name, "/app", "/app/automation/__init__.py"]
    assert lines["repository"] == "[]"  # the repository is hidden: only what the Dockerfile COPYs is importable


def test_the_deployed_service_brings_a_cluster_up_and_destroys_its_stack(live, tmp_path):
    pod = deployed.pod_of(deployed.one(live.objs, "Deployment", "hubwright"))
    kube = live.kube
    with running(live, pod, image(), tmp_path) as (box, volumes):
        kube.create("prod-1", **INGRESS_ONLY)
        ready = wait_until(lambda: settled(kube, "prod-1"), 300, what="prod-1 Ready", diagnose=box.tail)
        assert ready["status"] == "True", (ready, kube.events(name="prod-1"), box.tail())
        assert FINALIZER in kube.get("prod-1")["metadata"]["finalizers"]
        assert backend_stacks(volumes["state"], tmp_path) == ["organization/hubwright/acme.prod-1"]  # on the PVC
        central = live.core.read_namespaced_config_map(SHARED_INGRESS_CONFIGMAP, "hubwright-ingress")
        assert "prod-1" in central.data[MAP_FILE]  # written through the central proxy's route-writer Role

        kube.delete("prod-1")
        wait_until(lambda: kube.get("prod-1") is None, 300, what="prod-1 destroyed and released",
                   diagnose=box.tail)
        assert backend_stacks(volumes["state"], tmp_path) == []
        assert not (volumes["state"] / "workspaces" / "acme.prod-1").exists()
        assert "prod-1" not in live.core.read_namespaced_config_map(
            SHARED_INGRESS_CONFIGMAP, "hubwright-ingress").data[MAP_FILE]
    status, took = box.stopped
    log = box.log.read_text(errors="replace")
    assert status == 0, (took, box.tail())  # SIGTERM: a clean exit within terminationGracePeriodSeconds
    assert live.aws.requests == [], "the service called AWS for a cluster without AWS resources"
    assert "Traceback" not in log and "Forbidden" not in log and " ERROR " not in log, log[-8000:]
    reasons = [reason for _, reason, _ in kube.events(name="prod-1")]
    assert {"UpdateSucceeded", "DestroySucceeded"} <= set(reasons), reasons


def test_the_sandbox_shows_the_reported_bug_a_read_only_pulumi_home(live, tmp_path):
    """The image and Deployment as the issue found them: PULUMI_HOME in the image's read-only /opt/pulumi."""
    pod = deployed.pod_of(deployed.one(live.objs, "Deployment", "hubwright"))
    [container] = pod.spec["containers"]
    container["env"] = [e for e in container["env"] if e["name"] != "PULUMI_HOME"]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "pulumi-home"]
    img = dataclasses.replace(image(), env={**image().env, "PULUMI_HOME": "/opt/pulumi"})
    with running(live, pod, img, tmp_path) as (box, _):
        live.kube.create("prod-2", **INGRESS_ONLY)
        failed = wait_until(lambda: settled(live.kube, "prod-2"), 300, what="prod-2's first run to fail",
                            diagnose=box.tail)
    live.kube.patch("prod-2", {"metadata": {"finalizers": None}})  # no stack was made: nothing to destroy
    live.kube.delete("prod-2")
    assert failed["status"] == "False" and "read-only file system" in failed["message"], failed


def test_the_deployed_service_records_each_mesh_groups_state_in_the_hubconfig_status(live, tmp_path):
    """deploy/'s ClusterRole lets the service patch hubconfigs/status (status.mesh), and nothing more is needed."""
    pod = deployed.pod_of(deployed.one(live.objs, "Deployment", "hubwright"))
    kube = live.kube
    mesh = {"labels": {MESH_LABEL: "core"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"},
            "privateLink": {"enabled": False}}

    def group() -> Any:
        hub = kube.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", kube.hub_name)
        return ((hub.get("status") or {}).get("mesh") or {}).get("groups", {}).get("acme/core")

    with running(live, pod, image(), tmp_path) as (box, _):
        for i in range(2):
            kube.create(f"mesh-{i}", network={"vpcID": f"vpc-0m{i}", "cidr": f"10.{i}.0.0/16",
                                               "routeTableIDs": [f"rtb-0m{i}"], "nodeSecurityGroupIDs": [f"sg-0m{i}"]},
                        **mesh)
            # The network as discovery read it a moment ago (the service reads it again only an interval later:
            # every AWS call here would hit the tripwire).
            kube.patch_status(f"mesh-{i}", {"network": {
                "accountID": "222222222222", "region": "us-east-1", "vpcID": f"vpc-0m{i}", "cidrs": [f"10.{i}.0.0/16"],
                "routeTableIDs": [f"rtb-0m{i}"], "securityGroupIDs": [f"sg-0m{i}"],
                "nodeSecurityGroupIDs": [f"sg-0m{i}"], "observedAt": rfc3339_seconds(time.time())}})
        # The group is recorded as soon as a member is seen, with the members admitted so far (0 before one is
        # admitted): the wait is for the state once both are in.
        expected = {"topology": "peering", "members": 2}
        wait_until(lambda: group() == expected, 300, what=f"the group's state in the hub's status: {expected}",
                   diagnose=box.tail)
        for i in range(2):
            kube.delete(f"mesh-{i}")
        wait_until(lambda: group() is None, 300, what="the group's state gone with its last member",
                   diagnose=box.tail)
    log = box.log.read_text(errors="replace")  # (the members' pre-flight meets the AWS tripwire: not this test's)
    assert "Forbidden" not in log, log[-8000:]
