"""`make release` on this tree: every artifact, each the thing it says it is, checked the way a user checks it
(sha256sum -c, kubectl apply against a real kube-apiserver, helm show, the SBOM's packages, the zipapp run)."""
from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from doubles.envtest import EnvTest, require_binaries, start_envtest
from doubles.kubectl import against
from stacks.release import version
from tests.release_build import Release, release_dist  # noqa: F401 - the fixture

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def dist(release_dist: Release) -> Path:  # noqa: F811
    if release_dist.seconds is not None:
        print(f"\nmake release: {release_dist.seconds:.0f}s\n{release_dist.log}")
    return release_dist.dist


def _files(dist: Path) -> list[str]:
    return sorted(p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file())


def test_every_artifact_is_there_and_summed(dist: Path) -> None:
    v = version()
    files = _files(dist)
    image = f"hubwright-{v}.oci.tar" if f"hubwright-{v}.oci.tar" in files else f"hubwright-{v}-noplugin.oci.tar"
    expected = {image, image.replace(".oci.tar", ".spdx.json"), f"hubwright-{v}.tgz", "install.yaml",
                f"hubwright-kustomize-{v}.tar.gz", f"hubwright-{v}.pyz", "SHA256SUMS",
                "iam/hubwright-cluster-role.json", "iam/hubwright-hub-role.json",
                "iam/hubwright-cluster-role-scoped.json", "iam/hubwright-hub-role-scoped.json"}
    assert set(files) == expected
    summed = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=dist, capture_output=True,
                            text=True, timeout=300)
    assert summed.returncode == 0, summed.stdout + summed.stderr
    listed = sorted(line.split(maxsplit=1)[1].lstrip("*") for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert listed == sorted(set(files) - {"SHA256SUMS"})


def test_the_chart_is_this_release(dist: Path) -> None:
    shown = subprocess.run([require_binaries("helm")["helm"], "show", "chart", str(dist / f"hubwright-{version()}.tgz")],
                           capture_output=True, text=True, check=True, timeout=60).stdout
    meta = yaml.safe_load(shown)
    assert meta["version"] == meta["appVersion"] == version()


def test_the_kustomize_base_builds_install_yaml(dist: Path, tmp_path: Path) -> None:
    """The two manifest artifacts are one install: install.yaml is the base as kustomize orders it."""
    with tarfile.open(dist / f"hubwright-kustomize-{version()}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    base = tmp_path / f"hubwright-kustomize-{version()}"
    built = subprocess.run([require_binaries("kubectl")["kubectl"], "kustomize", str(base)], capture_output=True,
                           text=True, check=True, timeout=120).stdout
    shipped = (dist / "install.yaml").read_text()
    assert list(yaml.safe_load_all(built)) == [d for d in yaml.safe_load_all(shipped) if d]
    kinds = [d["kind"] for d in yaml.safe_load_all(shipped) if d]
    assert kinds.index("Namespace") < kinds.index("CustomResourceDefinition") < kinds.index("Deployment")


@pytest.fixture(scope="module")
def bare_apiserver() -> Iterator[EnvTest]:
    with start_envtest() as env:
        yield env


def test_install_yaml_applies_to_a_real_api_server(dist: Path, bare_apiserver: EnvTest) -> None:
    """`kubectl apply --server-side -f install.yaml`, as the file's first line says: every object accepted, the
    CRDs Established."""
    kubectl = against(bare_apiserver)
    kubectl("apply", "--server-side", "-f", str(dist / "install.yaml"))
    docs = [d for d in yaml.safe_load_all((dist / "install.yaml").read_text()) if d]
    for crd in [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]:
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    deployments = json.loads(kubectl("get", "deployments", "-n", "hubwright-system", "-o", "json").stdout)["items"]
    assert {d["metadata"]["name"] for d in deployments} == {"hubwright", "hubwright-registry"}


def test_the_sbom_lists_the_images_pinned_packages(dist: Path) -> None:
    [sbom] = [p for p in dist.glob("*.spdx.json")]
    doc = json.loads(sbom.read_text())
    assert doc["spdxVersion"].startswith("SPDX-")
    found = {(p.get("name"), p.get("versionInfo")) for p in doc["packages"]}
    pins = dict(line.split("==", 1) for line in (Path(__file__).parent.parent / "requirements.txt").read_text()
                .splitlines() if "==" in line and not line.startswith("#"))
    for name in ("pulumi", "pydantic", "kubernetes"):
        version_pinned = pins[name].split()[0].split(";")[0]
        assert (name, version_pinned) in found, f"the SBOM does not list {name} {version_pinned}"
    assert any(name == "python3.11" or (name or "").startswith("python3") for name, _ in found)  # the Debian base


def test_the_zipapp_is_this_release(dist: Path, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHIV_ROOT": str(tmp_path / "shiv")}
    done = subprocess.run(["/usr/bin/python3", str(dist / f"hubwright-{version()}.pyz"), "--version"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hubwright {version()}"
