"""The Helm chart (deploy/helm/hubwright), generated from the one renderer: never stale, the same objects as
`install --render` for every values case, refused values refused by helm too, installed and upgraded into a real
kube-apiserver with the real helm (scripts/tools.sh builds it from helm.sh/helm/v3)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from automation.adapters.files import chart as chart_files
from automation.adapters.files import install
from doubles.envtest import ROOT, TOOLS_BIN, EnvTest, require_binaries, start_envtest
from doubles.kubectl import against
from stacks import chart
from stacks.deployment import load_values, set_value
from stacks.errors import InvalidSpec
from stacks.install import CONSOLE_RULES
from stacks.release import version
from tests.test_install_render import block

pytestmark = pytest.mark.live  # helm and a kube-apiserver are processes

CHART = ROOT / "deploy" / "helm" / "hubwright"
RELEASE_NS = "helm-release"  # not the values' namespace: the chart's Namespace object is rendered then


def helm(*args: str, check: bool = True, kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
    binary = require_binaries("helm")["helm"]
    extra = [f"--kubeconfig={kubeconfig}"] if kubeconfig else []
    done = subprocess.run([binary, *args, *extra], capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart as the renderer writes it now (once for the module: about 40 s)."""
    out = tmp_path_factory.mktemp("chart") / "hubwright"
    chart_files.write(out)
    return out


def test_the_committed_chart_is_what_the_renderer_generates(generated: Path) -> None:
    """CI fails on a stale chart: a change to the components, the values' model or the version regenerates it."""
    stale = chart_files.stale(CHART, generated)
    assert not stale, (f"deploy/helm/hubwright is stale ({', '.join(stale)}): "
                       "python -m automation install --chart deploy/helm/hubwright")


def test_the_check_sees_a_changed_a_missing_and_an_extra_file(generated: Path, tmp_path: Path) -> None:
    """The check is not vacuous: a chart one edit away from the committed one is stale, naming each file."""
    copy = tmp_path / "hubwright"
    shutil.copytree(CHART, copy)
    (copy / "values.yaml").write_text((copy / "values.yaml").read_text() + "# an edit\n")
    (copy / "templates" / "service-hubwright-metrics.yaml").unlink()
    (copy / "templates" / "extra.yaml").write_text("kind: ConfigMap\n")
    assert chart_files.stale(copy, generated) == ["templates/extra.yaml", "templates/service-hubwright-metrics.yaml",
                                       "values.yaml"]


def test_helm_lint_passes() -> None:
    done = helm("lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in done.stdout


CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "monitoring": {"monitoring": {"enabled": True, "labels": {"release": "kube-prometheus"}}},
    "monitoring-unlabelled": {"monitoring": {"enabled": True}},
    "runners": {"backend": {"url": "s3://state-bucket/hub?region=eu-west-1",
                            "secret": {"name": "pulumi-creds", "data": {"PULUMI_CONFIG_PASSPHRASE": "p"}}},
                "service": {"executor": "runners", "workers": 8},
                "runners": {"replicas": 5, "workers": 2, "claimTtl": 45, "keepRuns": 20}},
    "irsa": {"serviceAccount": {"roleArn": "arn:aws:iam::123456789012:role/hubwright",
                                "annotations": {"example.com/team": "platform"}}},
    "registry-off": {"registry": {"enabled": False}},
    "console": {"console": {"enabled": True}},
    "console-s3": {"console": {"enabled": True, "secureCookies": True,
                               "resources": {"requests": {"cpu": "20m", "memory": "96Mi"},
                                             "limits": {"cpu": "1", "memory": "384Mi"}}},
                   "backend": {"url": "s3://state-bucket/hub", "secret": {"name": "pulumi-creds"}},
                   "registry": {"enabled": False}, "volumes": {"tmp": "300Mi"}},
    # Whole maps: helm merges a values file into the chart's defaults key by key, install --render replaces a map
    # (docs/install.md says so); a resources map given whole is the same in both.
    "resources": {"service": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}},
                  "registry": {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                             "limits": {"cpu": "2", "memory": "512Mi"}}},
                  "volumes": {"state": "50Gi", "tmp": "2Gi"}},
    "everything": {"image": "registry.example.com/mirror/hubwright@sha256:" + "a" * 64,
                   "namespace": "platform-hub", "backend": {"url": "https://api.pulumi.com"},
                   "service": {"policy": "advisory", "metricsPort": 9090, "executor": "runners"},
                   "serviceAccount": {"roleArn": "arn:aws:iam::123456789012:role/hub"},
                   "registry": {"publicUrl": "https://registry.example.com", "factsDbSecret": "facts-db",
                                "tokenAudiences": ["https://oidc.eks.eu-west-1.amazonaws.com/id/X", "sts", "hub"]},
                   "monitoring": {"enabled": True}},
}


def _by_name(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def _from_helm(values: dict[str, Any], tmp_path: Path, namespace: str = RELEASE_NS) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = helm("template", "hw", str(CHART), "--namespace", namespace, "--values", str(path))
    objs = [o for o in yaml.safe_load_all(done.stdout) if o]
    for obj in objs:  # what the chart adds, and only that (chart.CRD_KEEP)
        if obj["kind"] == "CustomResourceDefinition":
            assert obj["metadata"]["annotations"] == chart.CRD_KEEP
            del obj["metadata"]["annotations"]
    return objs


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_template_is_install_render(case: str, tmp_path: Path) -> None:
    """The chart and `install --render` give the same objects, field for field, for each values case."""
    values = CASES[case]
    rendered = _by_name(json.loads(json.dumps(install.render(load_values(values)))))
    templated = _by_name(_from_helm(values, tmp_path))
    assert sorted(templated) == sorted(rendered)
    for key in sorted(rendered):
        assert templated[key] == rendered[key], f"{case}: {key[0]} {key[1]} differs"


def test_the_console_is_off_unless_set_on(tmp_path: Path) -> None:
    """`helm template --set console.enabled=true` (docs/install.md) adds the console, with its own rights, and
    nothing else; without it the chart renders no console object."""
    def objects(*args: str) -> dict[tuple[str, str], dict[str, Any]]:
        done = helm("template", "hw", str(CHART), "--namespace", RELEASE_NS, *args)
        return _by_name([o for o in yaml.safe_load_all(done.stdout) if o])

    off, on = objects(), objects("--set", "console.enabled=true")
    assert not [name for _, name in off if "console" in name]
    assert set(on) - set(off) == {("ServiceAccount", "hubwright-console"), ("ClusterRole", "hubwright-console"),
                                  ("ClusterRoleBinding", "hubwright-console"), ("Deployment", "hubwright-console"),
                                  ("Service", "hubwright-console"), ("Role", "hubwright-console"),
                                  ("RoleBinding", "hubwright-console")}
    assert on[("ClusterRole", "hubwright-console")]["rules"] == [dict(rule) for rule in CONSOLE_RULES]
    [box] = on[("Deployment", "hubwright-console")]["spec"]["template"]["spec"]["containers"]
    assert box["args"][:6] == ["python", "-m", "automation", "console", "--console-bind", "0.0.0.0:8082"]
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    cookies = objects("--set", "console.enabled=true", "--set", "console.secureCookies=true")
    [box] = cookies[("Deployment", "hubwright-console")]["spec"]["template"]["spec"]["containers"]
    assert "--secure-cookies" in box["args"]


def test_the_release_namespace_is_not_rendered_again(tmp_path: Path) -> None:
    """`helm install --namespace hubwright-system --create-namespace`: helm makes the namespace, the chart does not
    render a second Namespace object that would fail the install."""
    kinds = [o["kind"] for o in _from_helm({}, tmp_path, namespace="hubwright-system")]
    assert "Namespace" not in kinds and "Deployment" in kinds


@pytest.mark.parametrize("assignment, words", [
    ("service.wrokers=3", "wrokers"),  # a typo: an unknown key, as --set refuses it for install --render
    ("service.workers=0", "minimum"),
    ("service.executor=lambda", "executor"),
    ("console.enabeld=true", "enabeld"),
])
def test_helm_refuses_what_the_values_model_refuses(assignment: str, words: str) -> None:
    done = helm("template", "hw", str(CHART), "--set", assignment, check=False)
    assert done.returncode != 0 and words in done.stderr, done.stderr
    doc: dict[str, Any] = {}
    set_value(doc, assignment)
    with pytest.raises(InvalidSpec):
        load_values(doc)


# --- into a real API server ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bare_apiserver() -> Iterator[EnvTest]:
    """A server of the module's own with no CRDs: the chart brings them."""
    with start_envtest() as env:
        yield env


def _older_chart(tmp_path: Path, dropped: str) -> Path:
    """The previous chart: this one at an older version, its HubCluster CRD without the field `dropped`."""
    old = tmp_path / "previous" / "hubwright"
    shutil.copytree(CHART, old)
    meta = yaml.safe_load((old / "Chart.yaml").read_text())
    meta["version"] = "0.0.1"
    (old / "Chart.yaml").write_text(yaml.safe_dump(meta))
    crd = old / "templates" / "customresourcedefinition-hubclusters.hubwright.io.yaml"
    text = crd.read_text()
    head, _, body = text.partition("\n")
    doc = yaml.safe_load(body)
    for version in doc["spec"]["versions"]:
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][dropped]
    crd.write_text(head + "\n" + yaml.safe_dump(doc, width=float("inf")))  # type: ignore[arg-type]
    return old


def _spec_fields(kubectl, crd: str) -> set[str]:
    got = json.loads(kubectl("get", "crd", crd, "-o", "json").stdout)
    return set(got["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def test_the_chart_installs_and_upgrades_its_crds(bare_apiserver: EnvTest, tmp_path: Path) -> None:
    """Installed without --wait (no pods run here): every object is accepted, the CRDs are Established and the
    policies bound. Then an upgrade from the previous chart keeps every object and brings the CRD's new field,
    which a chart with its CRDs in crds/ would not (helm never upgrades those)."""
    kubeconfig = bare_apiserver.kubeconfig()
    kubectl = against(bare_apiserver)
    crd = "hubclusters.hubwright.io"
    example = ROOT / "examples" / "clusters" / "prod-1.yaml"
    cluster = yaml.safe_load(example.read_text())
    dropped = "privateLink"  # a field the previous chart's CRD did not have
    old = _older_chart(tmp_path, dropped)

    helm("install", "hubwright", str(old), "--namespace", "hubwright-system", "--create-namespace",
         kubeconfig=kubeconfig)
    kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    assert dropped not in _spec_fields(kubectl, crd)
    kubectl("apply", "-f", str(ROOT / "examples" / "clusters" / "namespaces.yaml"))
    before = {**cluster, "spec": {k: v for k, v in cluster["spec"].items() if k != dropped}}
    kubectl("apply", "-f", "-", stdin=json.dumps(before))

    # The upgrade is docs/install.md's Helm block, run as written beside the packaged chart.
    command = block("helm", "sh")
    packaged = f"hubwright-{version()}.tgz"
    assert packaged in command, f"docs/install.md's helm block installs another version than {packaged}"
    helm("package", str(CHART), "--destination", str(tmp_path))
    env = {"PATH": f"{TOOLS_BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig),
           "HELM_CACHE_HOME": str(tmp_path / "helm-cache"), "HELM_CONFIG_HOME": str(tmp_path / "helm-config")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    assert dropped in _spec_fields(kubectl, crd), f"helm upgrade left the old CRD: spec.{dropped} is missing"
    kubectl("apply", "-f", str(example))  # the new field is kept, not pruned by the old schema
    got = json.loads(kubectl("get", "hubcluster", "prod-1", "-n", "acme", "-o", "json").stdout)
    assert got["spec"][dropped] == cluster["spec"][dropped]

    expected = _by_name(json.loads(json.dumps(install.render(load_values({})))))
    for kind, name in sorted(expected):
        if kind == "Namespace":
            continue
        obj = expected[(kind, name)]
        args = ["get", kind.lower(), name, "-o", "name"]
        if obj["metadata"].get("namespace"):
            args += ["-n", obj["metadata"]["namespace"]]
        assert kubectl(*args).stdout.strip(), f"{kind} {name} is missing after the upgrade"
    for crd_name in [n for k, n in expected if k == "CustomResourceDefinition"]:
        kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=60s")
    bindings = json.loads(kubectl("get", "validatingadmissionpolicybindings", "-o", "json").stdout)["items"]
    policies = {n for k, n in expected if k == "ValidatingAdmissionPolicy"}
    assert policies <= {b["spec"]["policyName"] for b in bindings}
    listed = helm("list", "--namespace", "hubwright-system", "-o", "json", kubeconfig=kubeconfig)
    [release] = json.loads(listed.stdout)
    assert release["chart"] == f"hubwright-{version()}"
    assert release["status"] == "deployed" and int(release["revision"]) == 2
