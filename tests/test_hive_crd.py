"""Hive's ClusterDeployment CRD, generated from github.com/openshift/hive/apis by controller-gen (scripts/crds-gen.sh,
pinned in tools/crds/generated.txt): a real, structural schema that a real kube-apiserver serves and enforces.

A source reads a ClusterDeployment's spec.clusterName, spec.baseDomain, spec.platform.aws.region,
spec.platform.aws.privateLink.enabled, spec.clusterMetadata.infraID and spec.installed: each is created on the API
server and read back as written. A field Hive's types do not have is pruned, and one they require is demanded,
which a hand-written or x-kubernetes-preserve-unknown-fields schema would not do.

scripts/crds-gen.sh runs from a copy of the script and a table in a temporary root (so .tools/crds of the checkout
is not touched), with the module cache and the controller-gen binary scripts/tools.sh left: nothing is built again.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import doubles.thirdparty as thirdparty
from doubles.envtest import install_crds
from tests.envtest import kube_apiserver  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
GROUP, VERSION, PLURAL = "hive.openshift.io", "v1", "clusterdeployments"
FILE = "hive.openshift.io_clusterdeployments.yaml"


def cluster_deployment(name: str, *, private_link: bool) -> dict:
    """A ClusterDeployment as Hive leaves it once installed: every field a source reads, and what the schema
    requires beside them (clusterMetadata's clusterID and adminKubeconfigSecretRef)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterDeployment",
        "metadata": {"name": name},
        "spec": {
            "clusterName": "prod-east",
            "baseDomain": "example.com",
            "platform": {"aws": {"region": "us-east-1",
                                 "credentialsSecretRef": {"name": "aws-creds"},
                                 "privateLink": {"enabled": private_link}}},
            "clusterMetadata": {"infraID": "prod-east-x7k2p", "clusterID": "0b5c1c6e-4b7e-4bd4-9a3c-5a0c7f0e3d11",
                                "adminKubeconfigSecretRef": {"name": "prod-east-admin-kubeconfig"}},
            "installed": True,
            "pullSecretRef": {"name": "pull-secret"},
            "provisioning": {"installConfigSecretRef": {"name": "prod-east-install-config"}},
        },
    }


@pytest.fixture(scope="module")
def hive_api(kube_apiserver):  # noqa: F811
    """The shared API server with the generated ClusterDeployment CRD installed, and a namespace of the module's."""
    api = kube_apiserver.api_client()
    assert install_crds(api, thirdparty.crds("hive-apis")) == [f"{PLURAL}.{GROUP}"]
    namespace = f"hive-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    yield client.CustomObjectsApi(api), namespace
    client.CoreV1Api(api).delete_namespace(namespace)
    api.close()


def test_the_generated_crd_is_hives_clusterdeployment_alone_structural_and_described():
    [crd] = thirdparty.crds("hive-apis")
    assert [p.name for p in thirdparty.crd_files("hive-apis")] == [FILE]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["annotations"]["controller-gen.kubebuilder.io/version"] == \
        thirdparty.generated()["hive-apis"].generator.split("@")[1]
    assert crd["spec"]["group"] == GROUP and crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "ClusterDeployment" and crd["spec"]["names"]["shortNames"] == ["cd"]
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    # Nothing is kept unknown: every level a source reads is typed, and described as Hive's Go comments say.
    assert "x-kubernetes-preserve-unknown-fields" not in str(schema)
    aws = spec["properties"]["platform"]["properties"]["aws"]
    assert aws["properties"]["region"]["type"] == "string" and "region" in aws["properties"]["region"]["description"]
    assert aws["properties"]["privateLink"]["properties"]["enabled"]["type"] == "boolean"
    assert "PrivateLink" in aws["properties"]["privateLink"]["description"]
    assert spec["properties"]["clusterMetadata"]["properties"]["infraID"]["type"] == "string"
    assert spec["properties"]["installed"]["type"] == "boolean"
    assert sorted(spec["required"]) == ["baseDomain", "clusterName", "platform"]


def test_a_clusterdeployment_keeps_every_field_a_source_reads_and_loses_the_ones_hive_does_not_have(hive_api):
    custom, namespace = hive_api
    body = cluster_deployment("prod-east", private_link=True)
    body["spec"]["notAHiveField"] = "pruned"
    body["spec"]["platform"]["aws"]["privateLink"]["endpointService"] = "pruned too"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    live = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "prod-east")
    spec = live["spec"]
    assert (spec["clusterName"], spec["baseDomain"]) == ("prod-east", "example.com")
    assert spec["platform"]["aws"]["region"] == "us-east-1"
    assert spec["platform"]["aws"]["privateLink"] == {"enabled": True}
    assert spec["clusterMetadata"]["infraID"] == "prod-east-x7k2p"
    assert spec["installed"] is True
    assert "notAHiveField" not in spec
    expected = cluster_deployment("prod-east", private_link=True)["spec"]
    assert spec == expected


@pytest.mark.parametrize("path, field", [
    (("spec", "platform"), "spec.platform"),
    (("spec", "clusterName"), "spec.clusterName"),
    (("spec", "platform", "aws", "region"), "spec.platform.aws.region"),
    (("spec", "platform", "aws", "privateLink", "enabled"), "spec.platform.aws.privateLink.enabled"),
    (("spec", "clusterMetadata", "infraID"), "spec.clusterMetadata.infraID"),
])
def test_a_clusterdeployment_without_a_field_hive_requires_is_refused_naming_it(hive_api, path, field):
    custom, namespace = hive_api
    body = cluster_deployment(f"missing-{uuid.uuid4().hex[:6]}", private_link=False)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422
    assert field in refused.value.body and "Required value" in refused.value.body


def test_a_wrongly_typed_field_is_refused_not_kept(hive_api):
    custom, namespace = hive_api
    body = cluster_deployment("typed", private_link=False)
    body["spec"]["platform"]["aws"]["privateLink"]["enabled"] = "yes"
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert refused.value.status == 422 and "spec.platform.aws.privateLink.enabled" in refused.value.body


# --------------------------------------------------------------------------- scripts/crds-gen.sh

def crds_gen(root: Path, table: str) -> subprocess.CompletedProcess:
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    (root / "tools" / "crds").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "crds-gen.sh", root / "scripts" / "crds-gen.sh")
    shutil.copytree(ROOT / "scripts" / "lib", root / "scripts" / "lib", dirs_exist_ok=True)  # cache.sh, sourced
    (root / "tools" / "crds" / "generated.txt").write_text(table)
    env = dict(os.environ, PATH=f"{os.environ.get('PATH', '')}:/usr/local/go/bin")
    return subprocess.run(["bash", str(root / "scripts" / "crds-gen.sh")], capture_output=True, text=True,
                          env=env, timeout=600)


def pinned_line() -> str:
    g = thirdparty.generated()["hive-apis"]
    return (f"{g.project} {g.module} {g.version} {g.sum} {g.generator} {g.generator_sum} {g.packages} "
            f"{','.join(g.files)}\n")


@pytest.mark.live
def test_the_script_generates_the_same_crd_again_with_its_stamp_and_then_leaves_it(tmp_path):
    done = crds_gen(tmp_path, pinned_line())
    assert done.returncode == 0, done.stderr
    where = tmp_path / ".tools" / "crds" / "hive-apis"
    assert sorted(p.name for p in where.glob("*.yaml")) == [FILE]
    assert (where / FILE).read_bytes() == thirdparty.crd_files("hive-apis")[0].read_bytes()
    assert (where / ".source").read_text().strip() == thirdparty.generated()["hive-apis"].source
    assert os.access(tmp_path / ".tools" / "bin" / "controller-gen", os.X_OK)
    before = (where / FILE).stat().st_mtime_ns
    again = crds_gen(tmp_path, pinned_line())
    assert again.returncode == 0, again.stderr
    assert "hive-apis" in again.stdout and "cached" in again.stdout
    assert (where / FILE).stat().st_mtime_ns == before


@pytest.mark.live
def test_a_module_whose_hash_is_not_the_pinned_one_fails_and_generates_nothing(tmp_path):
    line = pinned_line().replace(thirdparty.generated()["hive-apis"].sum,
                                 "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    done = crds_gen(tmp_path, line)
    assert done.returncode != 0
    assert "has hash 'h1:" in done.stderr and "pins 'h1:AAAA" in done.stderr
    assert not (tmp_path / ".tools" / "crds" / "hive-apis").exists()


@pytest.mark.live
def test_a_generator_whose_hash_is_not_the_pinned_one_fails_even_with_its_binary_cached(tmp_path):
    g = thirdparty.generated()["hive-apis"]
    done = crds_gen(tmp_path, pinned_line().replace(g.generator_sum, "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
    assert done.returncode != 0
    assert f"controller-gen: {g.generator} has hash '{g.generator_sum}', but" in done.stderr
    assert "pins 'h1:AAAA" in done.stderr
    assert not (tmp_path / ".tools" / "crds" / "hive-apis").exists()


@pytest.mark.live
def test_a_file_controller_gen_does_not_write_fails_naming_it(tmp_path):
    line = pinned_line().replace(FILE, "hive.openshift.io_nosuchkinds.yaml")
    done = crds_gen(tmp_path, line)
    assert done.returncode != 0
    assert "wrote no file matching 'hive.openshift.io_nosuchkinds.yaml'" in done.stderr
    assert FILE in done.stderr  # what it did write, named
    assert not (tmp_path / ".tools" / "crds" / "hive-apis").exists()


def test_crd_files_names_the_generating_script_when_missing_or_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(thirdparty, "CRDS_DIR", tmp_path)
    with pytest.raises(thirdparty.MissingCRDs, match="run scripts/crds-gen.sh"):
        thirdparty.crd_files("hive-apis")
    (tmp_path / "hive-apis").mkdir()
    stale = thirdparty.generated()["hive-apis"].source.replace("controller-tools@v0.23.0",
                                                                           "controller-tools@v0.17.2")
    (tmp_path / "hive-apis" / ".source").write_text(stale + "\n")
    with pytest.raises(thirdparty.MissingCRDs, match=r"not the pinned github.com/openshift/hive/apis@v0\S+ by "
                                                     r"sigs.k8s.io/controller-tools@v0.23.0: run scripts/crds-gen.sh"):
        thirdparty.crd_files("hive-apis")
