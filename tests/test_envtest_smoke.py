"""Smoke tests of the real engines built by scripts/tools.sh: kube-apiserver + etcd
(through tests/envtest.py) and the Pulumi CLI (through the Automation API)."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

import pytest

from tests.envtest import (TOOLS_BIN, install_crds, kube_apiserver,  # noqa: F401
                           kube_apiserver_nocache, require_binaries, tools_env)

pytestmark = pytest.mark.live

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

GROUP = "smoke.hubwright.test"
SAMPLE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {
                            "size": {"type": "integer", "minimum": 1, "maximum": 10},
                            "color": {"type": "string", "enum": ["red", "blue"]},
                        },
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        }],
    },
}


def widget(name: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def namespace(kube_apiserver):
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def test_namespace_and_configmap(kube_apiserver, namespace):
    with kube_apiserver.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="cm"), data={"k": "v"}))
        assert core.read_namespaced_config_map("cm", namespace).data == {"k": "v"}
        assert namespace in [n.metadata.name for n in core.list_namespace().items]


def test_crd_schema_is_enforced(kube_apiserver, namespace):
    with kube_apiserver.api_client() as api:
        assert install_crds(api, [SAMPLE_CRD]) == [f"widgets.{GROUP}"]
        custom = client.CustomObjectsApi(api)
        created = custom.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets",
                                                         widget("ok", size=3, color="red"))
        assert created["spec"] == {"size": 3, "color": "red"}

        for bad in (widget("too-big", size=11), widget("no-size", color="red"),
                    widget("bad-color", size=2, color="green")):
            with pytest.raises(ApiException) as err:
                custom.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", bad)
            assert err.value.status == 422, err.value.body

        # status subresource: a status write does not touch spec
        custom.patch_namespaced_custom_object_status(
            GROUP, "v1", namespace, "widgets", "ok", {"status": {"phase": "Ready"}})
        got = custom.get_namespaced_custom_object(GROUP, "v1", namespace, "widgets", "ok")
        assert got["status"] == {"phase": "Ready"} and got["spec"]["size"] == 3


def test_compaction_gives_410_gone(kube_apiserver_nocache):
    env = kube_apiserver_nocache
    with env.api_client() as api:
        core = client.CoreV1Api(api)
        ns = f"gone-{uuid.uuid4().hex[:8]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        cm = core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a")))
        old_rv = cm.metadata.resource_version
        for i in range(3):
            core.patch_namespaced_config_map("a", ns, {"data": {"i": str(i)}})
        env.compact()
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, ns,
                                          resource_version=old_rv, timeout_seconds=5):
                pass
        assert err.value.status == 410


# --------------------------------------------------------------------------- pulumi

def _pulumi_version() -> str:
    pulumi = require_binaries("pulumi")["pulumi"]
    return subprocess.run([pulumi, "version"], check=True, capture_output=True, text=True).stdout.strip()


def _pinned_cli_version() -> str:
    gomod = (TOOLS_BIN.parent.parent / "tools" / "pulumi" / "go.mod").read_text()
    return re.search(r"github.com/pulumi/pulumi/pkg/v3 (v\S+)", gomod).group(1)


def test_cli_pin_matches_the_sdk_pin():
    """scripts/tools.sh builds the CLI at the version the Python SDK is pinned to."""
    pinned_sdk = re.search(r"^pulumi==(\S+)", (TOOLS_BIN.parent.parent / "requirements.txt").read_text(), re.M)
    assert _pinned_cli_version() == f"v{pinned_sdk.group(1)}"


def test_pulumi_cli_version():
    from importlib.metadata import version
    got = _pulumi_version()
    # The CLI tools.sh builds is the pinned one; a CLI on PATH at the SDK's version is fine too.
    assert got in (_pinned_cli_version(), f"v{version('pulumi')}"), got


@pytest.fixture
def workspace_opts(tmp_path, monkeypatch):
    """LocalWorkspaceOptions for a file:// backend, PULUMI_HOME and work dir in tmp_path."""
    _pulumi_version()
    auto = pytest.importorskip("pulumi.automation")
    backend, home, work = tmp_path / "state", tmp_path / "home", tmp_path / "work"
    for d in (backend, home, work):
        d.mkdir()
    monkeypatch.setenv("PATH", tools_env()["PATH"])
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "envtest")
    monkeypatch.setenv("PULUMI_HOME", str(home))
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
    monkeypatch.setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
    # pulumi-resource-pulumi-python (dynamic providers) runs $PULUMI_PYTHON_CMD, else python3 on PATH
    monkeypatch.setenv("PULUMI_PYTHON_CMD", sys.executable)
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work), pulumi_home=str(home),
        project_settings=auto.ProjectSettings(
            name="envtest-smoke", runtime="python",
            backend=auto.ProjectBackend(url=f"file://{backend}")),
        env_vars={"PULUMI_CONFIG_PASSPHRASE": "envtest"})
    return auto, opts, backend


def test_automation_api_inline_up(workspace_opts):
    auto, opts, backend = workspace_opts
    import pulumi

    def program():
        pulumi.export("greeting", "hello")

    stack = auto.create_stack(stack_name="dev", project_name="envtest-smoke", program=program, opts=opts)
    result = stack.up(on_output=lambda _: None)
    assert result.summary.result == "succeeded"
    assert result.outputs["greeting"].value == "hello"
    assert stack.outputs()["greeting"].value == "hello"
    assert any(backend.rglob("dev.json")), sorted(p.name for p in backend.rglob("*"))


def test_automation_api_dynamic_resource(workspace_opts):
    """A pulumi.dynamic resource runs through .tools/bin/pulumi-resource-pulumi-python."""
    auto, opts, _ = workspace_opts
    import pulumi
    from pulumi import dynamic

    class Echo(dynamic.ResourceProvider):
        def create(self, props):
            return dynamic.CreateResult(id_="echo-1", outs={"value": props["value"]})

    class EchoResource(dynamic.Resource):
        value: pulumi.Output[str]

        def __init__(self, name, value):
            super().__init__(Echo(), name, {"value": value})

    def program():
        pulumi.export("echo", EchoResource("e", "hi").value)

    stack = auto.create_stack(stack_name="dyn", project_name="envtest-smoke", program=program, opts=opts)
    result = stack.up(on_output=lambda _: None)
    assert result.outputs["echo"].value == "hi"
    assert result.summary.resource_changes.get("create") == 2  # the stack + the dynamic resource
    stack.destroy(on_output=lambda _: None)
