"""The release: a license, one version shown everywhere, a changelog, the project's own agent image, and none of the
old names.

Through the real surfaces: `python -m automation --version`, the registry API process (its /version, its OpenAPI
document and its install answer, against the real kube-apiserver), and its refusal at start of an agent image with
a moving tag or of another project (#32 finding 2: the install answer deployed another project's `:latest`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from automation.api.app import ApiSettings
from automation.api.serve import settings_from
from automation.cli import build_parser
from automation.service.options import ServiceOptions
from stacks.crds import crd_manifests
from stacks.errors import InvalidSpec
from stacks.names import KINDS, RESERVED_KINDS
from stacks.release import IMAGE_REPOSITORY, NAME, default_image, image_problem, version
from tests.envtest import free_port, kube_apiserver  # noqa: F401 - the fixture
from doubles.service_env import wait_until
from tests.test_registry_bootstrap import Made, manifest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OLD = "cluster" + "net"  # the old name, spelled so that this file does not contain it
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text (its appendix's placeholder kept)
APACHE_2_0 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
COPYRIGHT = "Copyright 2026 The Hubwright Authors"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def automation(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "automation", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})}, timeout=timeout)


# --------------------------------------------------------------------------- license, version, changelog

def test_the_license_is_the_standard_apache_2_0_text_with_our_copyright():
    text = (ROOT / "LICENSE").read_text()
    assert text.count(COPYRIGHT) == 1
    standard = text.replace(COPYRIGHT, "Copyright [yyyy] [name of copyright owner]")
    assert hashlib.sha256(standard.encode()).hexdigest() == APACHE_2_0  # complete and unchanged otherwise
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert "Apache License 2.0 ([LICENSE](LICENSE))" in (ROOT / "README.md").read_text()


def test_pyproject_holds_the_metadata_the_one_version_and_every_tool_setting():
    project = PYPROJECT["project"]
    assert project["name"] == NAME and re.fullmatch(r"\d+\.\d+\.\d+", project["version"])
    assert version() == project["version"]
    assert {"pytest", "importlinter"} <= set(PYPROJECT["tool"])
    # one place for each setting: no second config a tool would read first (pytest.ini wins over pyproject.toml)
    assert [f for f in ("pytest.ini", ".importlinter", "setup.cfg", "tox.ini", "setup.py") if (ROOT / f).exists()] == []
    # an application run from its directory: nothing builds or installs it as a package
    assert "build-system" not in PYPROJECT


def test_pytest_runs_with_the_settings_in_pyproject(pytestconfig):
    assert pytestconfig.inipath == ROOT / "pyproject.toml"
    assert any(marker.startswith("live:") for marker in pytestconfig.getini("markers"))


@pytest.mark.live
def test_version_prints_the_one_version(tmp_path):
    shown = automation("--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{NAME} {PYPROJECT['project']['version']}\n"
    # the one source: the same code beside a pyproject.toml with another version shows that version
    for folder in ("stacks", "components", "automation", "policy"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text().replace(
        f'version = "{version()}"', 'version = "9.8.7"', 1))
    moved = automation("--version", cwd=tmp_path)
    assert (moved.returncode, moved.stdout) == (0, f"{NAME} 9.8.7\n"), moved.stderr


def test_the_changelog_starts_with_this_release_and_its_breaking_changes():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (unreleased|\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    assert releases and releases[0][0] == version()
    first = text.split("\n## [", 2)[1]
    for heading in ("### Changed (breaking)", "### Added", "### Fixed"):
        assert heading in first
    for name in ("hubwright.io", "HubCluster", "hubclusters", "hwc", "HubTenant", "hubtenants", "hwt", "hwcfg",
                 "hubwright-system", "HUBWRIGHT_", f"{OLD}.io", default_image(), "no aliases",
                 "no migration command", "`<namespace>.<name>`"):
        assert name in first, name


# --------------------------------------------------------------------------- the agent image

REFUSED = [
    f"{IMAGE_REPOSITORY}:latest",  # a moving tag
    IMAGE_REPOSITORY,  # no tag: latest
    f"ghcr.io/{OLD}/{OLD}:latest",  # what the install answer deployed: another project's, moving
    f"ghcr.io/{OLD}/{OLD}:v0.17.0",  # another project's, even pinned
    f"ghcr.io/{OLD}/{OLD}@{DIGEST}",
    "registry.example/Hubwright:1",  # not a reference a container runtime can pull
]


@pytest.mark.parametrize("image", REFUSED)
def test_an_agent_image_that_is_moving_or_not_ours_is_refused_naming_the_flag(image):
    with pytest.raises(InvalidSpec) as refused:
        settings_from(build_parser().parse_args(["api", "--agent-image", image]))
    [error] = refused.value.errors
    assert error.field == "--agent-image" and image in error.reason


@pytest.mark.live
def test_the_api_process_refuses_at_start_a_moving_or_foreign_agent_image(tmp_path):
    """Every cluster installed from this API would run the image with its agent's rights: refused before the API
    serves anything (exit 2, naming the flag), whether given as the flag or as its environment variable."""
    for image, args, env in ((REFUSED[0], ["--agent-image", REFUSED[0]], {}),
                             (REFUSED[2], [], {"HUBWRIGHT_AGENT_IMAGE": REFUSED[2]})):
        refused = automation("api", "--kubeconfig", str(tmp_path / "none"), "--state-dir", str(tmp_path), *args,
                             env=env)
        assert refused.returncode == 2, refused.stderr
        assert "--agent-image" in refused.stderr and image in refused.stderr
        assert "Traceback" not in refused.stderr
    assert not (tmp_path / "registry-facts.db").exists()  # nothing started


def test_a_pinned_image_of_ours_is_accepted_wherever_it_is_mirrored():
    for image in (default_image(), f"{IMAGE_REPOSITORY}@{DIGEST}", f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/"
                  f"ghcr/hubwright/hubwright:{version()}", f"localhost:5000/hubwright:1.2.3@{DIGEST}"):
        assert image_problem(image) is None, image
        assert settings_from(build_parser().parse_args(["api", "--agent-image", image])).agent_image == image
    assert ApiSettings().agent_image == default_image() == f"ghcr.io/{NAME}/{NAME}:{version()}"
    assert "moving tag" in image_problem("registry.example/hubwright:latest")
    assert "not hubwright's image" in image_problem("registry.example/agent:1")


def _get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except urllib.error.URLError:  # not listening yet
        return 0, {}


@pytest.mark.parametrize("agent_image", [None, f"registry.example/mirror/hubwright@{DIGEST}"])
def test_the_api_process_shows_its_version_and_installs_the_agent_image_it_was_given(kube_apiserver, tmp_path,
                                                                                     agent_image):
    """Not told an image, the install answer's agent runs ghcr.io/hubwright/hubwright:<version>; told a digest,
    that digest. /version and the OpenAPI document show the one version."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("KUBERNETES_SERVICE_HOST", "HUBWRIGHT_FACTS_DB", "HUBWRIGHT_AGENT_IMAGE", "KUBECONFIG"):
        env.pop(name, None)
    flags = [] if agent_image is None else ["--agent-image", agent_image]
    log = tmp_path / "api.log"
    with kube_apiserver.api_client() as admin, open(log, "wb") as stderr:
        made = Made(kube_apiserver, admin, None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "automation", "api", "--kubeconfig", str(kube_apiserver.kubeconfig()),
             "--bind", f"127.0.0.1:{port}", "--state-dir", str(tmp_path), *flags],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_until(lambda: proc.poll() is not None or _get(f"{base}/healthz")[0] == 200, 90, what="/healthz")
            assert proc.poll() is None, log.read_text()
            assert _get(f"{base}/version") == (200, {"name": NAME, "version": version()})
            assert _get(f"{base}/openapi.json")[1]["info"]["version"] == version()

            tenant, namespace = made.tenant()
            cluster = made.cluster(namespace)
            status, issued = _get(f"{base}/tenants/{tenant}/clusters/{cluster}/bootstrap-token",
                                  kube_apiserver.token, method="POST")
            assert status == 201, issued
            status, body = _get(f"{base}/install/agent.json?token={issued['token']}")
            assert status == 200, body
            [container] = manifest(body, "Deployment")["spec"]["template"]["spec"]["containers"]
            assert container["image"] == (agent_image or f"ghcr.io/{NAME}/{NAME}:{version()}")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
            made.cleanup()


# --------------------------------------------------------------------------- the old names are gone

@pytest.mark.live
def test_no_tracked_file_names_the_old_project():
    """Its name, API group, namespace, image and environment variables belong to another project: only the
    changelog's first entry, which says what changed, and this test name it."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                             timeout=60).stdout.decode().split("\0")
    allowed = {"CHANGELOG.md", "tests/test_release.py"}
    files = [path for path in tracked if path and path not in allowed and (ROOT / path).is_file()]
    assert len(files) > 100 and "README.md" in files
    named = [path for path in files if OLD.encode() in (ROOT / path).read_bytes().lower()]
    assert named == []
    assert OLD not in Path(__file__).read_text().lower()  # the allowed file does not hold it either


def test_our_crds_group_and_namespace_are_hubwright_and_no_name_is_the_generic_one():
    crds = crd_manifests()
    assert {crd["spec"]["group"] for crd in crds} == {"hubwright.io"}
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {"HubCluster", "HubTenant", "HubConfig", "HubStackRun", "HubGitRepo",
                                                                "HubRetainedStack"}
    names = {name for crd in crds for key in ("plural", "singular", "shortNames")
             for name in ([crd["spec"]["names"][key]] if isinstance(crd["spec"]["names"][key], str)
                          else crd["spec"]["names"][key])}
    names |= {name for kind in (*KINDS, *RESERVED_KINDS) for name in (kind.plural, kind.singular, *kind.short)}
    assert names and not names & {"clusters", "cluster", "tenants", "tenant", "gitrepos", "gitrepo", "stackruns"}
    assert ServiceOptions().namespace == "hubwright-system"
