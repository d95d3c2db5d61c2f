"""The image (Dockerfile) holds what the service imports, and its PULUMI_HOME is writable in the pod.

No Docker engine here: the Dockerfile is read (tests/dockerfile.py), the import graph computed with grimp, and
the Deployment rendered under the mock runtime (components/controlplane.py).
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import grimp
import pytest
from packaging.requirements import Requirement

from tests.dockerfile import DOCKERFILE, Image, image, instructions, parse
from tests.test_controlplane import deploy

ROOT = DOCKERFILE.parent


def is_local(name: str, root: Path = ROOT) -> bool:
    return (root / name / "__init__.py").is_file() or (root / f"{name}.py").is_file()


def local_imports(package: str, root: Path = ROOT) -> set[str]:
    """The top-level packages and modules of `root` that `package` imports, transitively, itself included."""
    found = {package}
    while True:  # grimp follows imports inside the packages it is given: widen until nothing new turns up
        graph = grimp.build_graph(*sorted(found), include_external_packages=True, cache_dir=None)
        upstream = {m.split(".")[0] for m in graph.find_upstream_modules(package, as_package=True)}
        wider = found | {name for name in upstream if is_local(name, root)}
        if wider == found:
            return found
        found = wider


def missing_from(img: Image, names: set[str]) -> list[str]:
    """The local packages/modules not COPY'd into the image's WORKDIR (the import root of `python -m`)."""
    return sorted(n for n in names
                  if img.copied_to(f"{img.workdir}/{n}") != n and img.copied_to(f"{img.workdir}/{n}.py") != f"{n}.py")


def under(path: str, mounts: list[str]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def test_the_image_copies_every_local_package_the_service_imports():
    needed = local_imports("automation")
    assert {"automation", "stacks", "components"} <= needed
    assert not needed & {"tests", "doubles", "bench", "deploy"}  # test and install code stays out of the image
    assert missing_from(image(), needed) == []


def third_party_imports(package: str) -> set[str]:
    """The top-level third-party modules that `package` and the local packages it uses import (no stdlib)."""
    local = local_imports(package)
    graph = grimp.build_graph(*sorted(local), include_external_packages=True, cache_dir=None)
    upstream = {m.split(".")[0] for m in graph.find_upstream_modules(package, as_package=True)}
    return {name for name in upstream - local if name not in sys.stdlib_module_names}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def installed_by(requirements: Path) -> set[str]:
    """The distributions `pip install -r requirements` puts in the image: those it names and, transitively,
    what they require (markers evaluated here, extras left out unless named)."""
    wanted = [line.split("#")[0].strip() for line in requirements.read_text().splitlines()]
    todo = [Requirement(line) for line in wanted if line and not line.startswith("-")]
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = _name(str(requirement))
        if name in found:
            continue
        found.add(name)
        for extra in (None, *requirement.extras):
            for dependency in metadata.requires(requirement.name) or []:
                marker = Requirement(dependency).marker
                if marker is None or marker.evaluate({"extra": extra or ""}):
                    todo.append(Requirement(dependency))
    return found


def test_the_image_installs_every_third_party_package_the_service_imports():
    """The image installs requirements.txt only (requirements-dev.txt is the tests'): a module the service, the
    registry API or the agent imports from a test-only package makes every `python -m automation` fail there."""
    distributions = metadata.packages_distributions()
    installed = installed_by(ROOT / "requirements.txt")
    imported = third_party_imports("automation")
    assert {"kubernetes", "pulumi", "fastapi"} <= imported
    assert sorted(m for m in imported if not {_name(d) for d in distributions.get(m, [m])} & installed) == []


def test_a_test_only_package_is_not_counted_as_installed():
    assert "httpx" in third_party_imports("automation")  # the agent's HTTP client
    assert "moto" not in installed_by(ROOT / "requirements.txt")  # requirements-dev.txt's only
    assert {"boto3", "botocore", "urllib3"} <= installed_by(ROOT / "requirements.txt")  # named, and required


def test_a_missing_copy_line_is_caught():
    text = DOCKERFILE.read_text()
    assert "COPY components components\n" in text
    assert missing_from(parse(text.replace("COPY components components\n", "")), local_imports("automation")) == [
        "components"]


def test_imports_are_followed_through_every_local_package(tmp_path, monkeypatch):
    for name, body in {"svc": "import lib1\n", "lib1": "from lib2 import x\nimport json\n", "lib2": "x = 1\n",
                       "unused": ""}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert local_imports("svc", tmp_path) == {"svc", "lib1", "lib2"}
    assert missing_from(parse("WORKDIR /app\nCOPY svc svc\nCOPY lib1 ./lib1\n"), {"svc", "lib1", "lib2"}) == ["lib2"]


def test_parse_reads_copy_destinations_env_and_user():
    img = parse("FROM x AS build\nENV A=1\nFROM y\nWORKDIR /app\nCOPY a.txt b.py ./\nCOPY --chown=1 pkg pkg/\n"
                "COPY [\"c\", \"/opt/c\"]\nENV K=v L=\"two words\"\nENV M m n\nUSER 10\n"
                "ENTRYPOINT [\"/init\", \"--\"]\n")
    assert img.copies == [("a.txt", "/app/a.txt"), ("b.py", "/app/b.py"), ("pkg", "/app/pkg/pkg"), ("c", "/opt/c")]
    assert img.env == {"K": "v", "L": "two words", "M": "m n"} and img.user == "10"
    assert img.entrypoint == ["/init", "--"]
    assert parse("ENTRYPOINT run it\n").entrypoint == ["/bin/sh", "-c", "run it"]


@pytest.mark.parametrize("backend", [None, "s3://state-bucket/hubwright"])
def test_pulumi_home_and_the_state_dir_are_writable_volumes(backend):
    """The root filesystem is read-only: PULUMI_HOME (the image's ENV and the pod's env) and --state-dir must be
    volumes, or every `up` fails with `mkdir .../workspaces: read-only file system`."""
    img = image()
    pod = deploy(backend_url=backend).one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert under(img.env["PULUMI_HOME"], mounts) and env["PULUMI_HOME"] == img.env["PULUMI_HOME"]
    assert under(container["args"][container["args"].index("--state-dir") + 1], mounts)
    assert img.user == str(pod["securityContext"]["runAsUser"])


def test_provider_plugins_are_on_path_not_in_pulumi_home():
    """PULUMI_HOME is an empty volume at run time: a plugin installed there at build time would be hidden."""
    img = image()
    runs = [rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "RUN" and "plugin install" in rest]
    assert runs and all(f"PULUMI_HOME={img.env['PULUMI_HOME']}" not in run for run in runs)
    assert all("pulumi-resource-aws /usr/local/bin/" in run for run in runs)


def test_the_image_names_its_user_for_the_pulumi_cli():
    """uid 65532 has no /etc/passwd entry in python:3.11-slim; the pulumi CLI (Go's user.Current, for a stack lock's
    owner) then reads $USER, or every stack creation fails (found by tests/test_deploy_live.py)."""
    assert image().env.get("USER")
