"""The image (Dockerfile) holds what the service imports and reads, its PULUMI_HOME is writable in the pod, every
download is verified against a pinned SHA-256, its base is taken by digest, and it is labelled with the one version.
It is the same recipe as scripts/image.sh (the image CI builds and runs, tests/test_image_live.py): the same ENV,
labels, packages and files, the pulumi CLI from scripts/tools.sh, the AWS plugin an input.

No Docker engine here (nor base images or GitHub's release downloads): the Dockerfile is read (tests/dockerfile.py),
the import graph computed with grimp, the Deployment rendered under the mock runtime (components/controlplane.py),
and the build's own checks (the checksum step, the version check) run as written on local files.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import grimp
import pytest
from packaging.requirements import Requirement

from stacks import release
from tests.dockerfile import (DOCKERFILE, Image, check_step, commands, downloads, guard_step, image, instructions,
                              parse)
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
    [run] = [run for run in img.runs if "pulumi-resource-aws" in run]
    unpack = [c.words for c in commands(run) if c.words[0] == "tar" and "pulumi-resource-aws" in c.words]
    assert unpack and all(words[words.index("-C") + 1] == "/usr/local/bin" for words in unpack)
    assert img.env["PULUMI_HOME"] not in run and not any("plugin install" in r for r in img.runs)


def test_the_image_names_its_user_for_the_pulumi_cli():
    """uid 65532 has no /etc/passwd entry in python:3.11-slim; the pulumi CLI (Go's user.Current, for a stack lock's
    owner) then reads $USER, or every stack creation fails (found by tests/test_deploy_live.py)."""
    assert image().env.get("USER")


# --------------------------------------------------------------------------- what the build copies, fetches and labels

def test_every_copy_source_exists_and_what_the_code_reads_at_run_time_is_copied():
    img = image()
    assert [src for src, _ in img.copies if not (ROOT / src).exists()] == []
    # stacks.release reads the version from pyproject.toml beside the packages: without it every command fails
    read = release.PYPROJECT.relative_to(ROOT).as_posix()
    assert img.copied_to(f"{img.workdir}/{read}") == read
    assert img.copied_to(f"{img.workdir}/LICENSE") == "LICENSE"  # the license travels with every copy of the code


@pytest.mark.live
def test_the_service_fails_without_the_pyproject_the_image_copies(tmp_path):
    """What the copy of pyproject.toml is for: the code as the image lays it out, without it, cannot start."""
    for src, dest in image().copies:
        if dest.startswith("/app/") and src != "pyproject.toml" and (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, tmp_path / dest.removeprefix("/app/"),
                            ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    missing = subprocess.run([sys.executable, "-m", "automation", "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "pyproject.toml" in missing.stderr


def test_every_download_is_written_to_a_file_and_checked_against_a_pinned_sha256_before_use():
    img = image()
    fetched = [d for run in img.runs for d in downloads(run)]
    assert len(fetched) >= 1  # the AWS provider plugin (an input); the pulumi CLI is scripts/tools.sh's
    for download in fetched:
        assert download.url.startswith("https://") and download.file, download  # never piped into a shell
        assert download.checked_by in img.args, download  # a build argument of this stage ...
        pinned = img.args[download.checked_by]
        assert re.fullmatch(r"[0-9a-f]{64}", pinned) or pinned == "", (download, pinned)  # ... a sum, or unset
    assert {d.checked_by for d in fetched} == {"PULUMI_AWS_SHA256"}
    piped_into = [c.words[0] for run in img.runs for c in commands(run) if c.after == "|"]
    assert piped_into and set(piped_into) == {"sha256sum"}  # nothing downloaded is piped into a shell
    assert not any("get.pulumi.com" in run or "pulumi/pulumi/releases" in run for run in img.runs)


def test_the_pulumi_cli_is_the_one_tools_sh_builds_not_a_download():
    img = image()
    for name in ("pulumi", "pulumi-resource-pulumi-python", "pulumi-language-python-exec"):
        assert img.copied_to(f"/usr/local/bin/{name}") == f".tools/bin/{name}"
    [check] = [run for run in img.runs if "pulumi version" in run]
    assert '"v${PULUMI_VERSION}"' in check  # the CLI copied is requirements.txt's version, or no image


def test_an_unchecked_or_piped_download_is_caught():
    assert downloads("curl -fsSL https://get.pulumi.com | sh -s -- --version 3") == [
        downloads("curl -fsSL https://get.pulumi.com | sh")[0]]
    [piped] = downloads("curl -fsSL https://get.pulumi.com | sh")
    assert piped.file is None and piped.checked_by is None
    [used_first] = downloads(
        'curl -fsSLo a.tgz https://x/a.tgz && tar -xzf a.tgz && echo "${S}  a.tgz" | sha256sum -c -')
    assert used_first.file == "a.tgz" and used_first.checked_by is None  # checked only after it was unpacked
    [wget] = downloads('wget -qO a.tgz https://x/a.tgz && echo "${S}  a.tgz" | sha256sum -c - && tar -xzf a.tgz')
    assert wget.checked_by == "S"
    [other_file] = downloads('curl -o a.tgz https://x/a.tgz && echo "${S}  b.tgz" | sha256sum -c - && tar xf a.tgz')
    assert other_file.checked_by is None


@pytest.mark.live
def test_the_checksum_step_passes_the_right_sum_and_fails_the_build_otherwise(tmp_path):
    """The Dockerfile's own steps, run as /bin/sh runs a RUN line, on a local file in place of the download."""
    arg, file = "PULUMI_AWS_SHA256", "pulumi-resource-aws.tar.gz"
    [run] = [run for run in image().runs if f'"${{{arg}}}  {file}"' in run]
    (tmp_path / file).write_bytes(os.urandom(4096))
    right = hashlib.sha256((tmp_path / file).read_bytes()).hexdigest()

    def build(value: str, step: str = check_step(run, arg)) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", arg: value, "PULUMI_AWS_VERSION": "7"}
        return subprocess.run(["/bin/sh", "-c", step], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                              env=env)

    assert build(right).returncode == 0
    wrong = build(hashlib.sha256(b"another file").hexdigest())
    assert wrong.returncode != 0 and "FAILED" in wrong.stdout
    assert build(right[:63]).returncode != 0  # not a sum at all
    assert build("").returncode != 0  # the check itself never passes an empty sum
    (tmp_path / file).write_bytes(b"tampered")
    assert build(right).returncode != 0
    # An empty sum: the RUN stops before any download, successfully, saying the image has no plugin.
    guarded = guard_step(run, arg) + " && echo downloading"
    empty = build("", guarded)
    assert empty.returncode == 0 and "downloading" not in empty.stdout and f"{arg} is empty" in empty.stderr
    assert "-noplugin" in empty.stderr
    given = build(right, guarded)
    assert given.returncode == 0 and "downloading" in given.stdout


def test_the_image_records_and_labels_whether_it_has_the_aws_plugin():
    """Empty PULUMI_AWS_SHA256: the label says none and serve's record (stacks.release.IMAGE_AWS_PLUGIN) too."""
    img = image()
    assert img.labels[release.AWS_PLUGIN_LABEL] == "${PULUMI_AWS_SHA256:-%s}" % release.NO_AWS_PLUGIN
    assert any(f'echo "${{PULUMI_AWS_SHA256:-{release.NO_AWS_PLUGIN}}}" > {release.IMAGE_AWS_PLUGIN}' in run
               for run in img.runs)
    assert img.env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"


IMAGE_SH = ROOT / "scripts" / "image.sh"


def test_the_dockerfile_and_image_sh_are_the_same_recipe():
    """scripts/image.sh (podman import --change ...) sets every ENV, USER and ENTRYPOINT of the Dockerfile, every
    label it sets, installs the same Debian packages and places the same files."""
    img, script = image(), IMAGE_SH.read_text()
    for key, value in img.env.items():
        assert f'"ENV {key}={value}"' in script, key
    assert f'"USER {img.user}"' in script and f"'ENTRYPOINT {json.dumps(img.entrypoint)}'" in script
    assert f'"WORKDIR {img.workdir}"' in script
    for key in img.labels:
        assert f"LABEL {key}=" in script or (key == release.AWS_PLUGIN_LABEL and "LABEL $PLUGIN_LABEL=" in script), key
    [apt] = [run for run in img.runs if "apt-get install" in run]
    packages = [w for w in apt.split("apt-get install", 1)[1].split("&&")[0].split() if not w.startswith("-")]
    [include] = re.findall(r"--include=(\S+)", script)
    assert set(packages) - {"curl"} <= set(include.split(","))  # curl: the Dockerfile's download, purged after
    for src, dest in img.copies:
        if dest.startswith("/usr/local/bin/"):
            assert src.rsplit("/", 1)[-1] in script, src
        elif dest.startswith("/app/") and dest.count("/") == 2 and src != "requirements.txt":
            assert f" {src}" in script, src


def test_the_pinned_tools_match_the_sdks_requirements_pins():
    pins = {Requirement(line).name: str(Requirement(line).specifier).removeprefix("==")
            for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")}
    args = image().args
    assert args["PULUMI_VERSION"] == pins["pulumi"] and args["PULUMI_AWS_VERSION"] == pins["pulumi-aws"]
    assert 'pin pulumi' in IMAGE_SH.read_text()  # image.sh checks .tools/bin/pulumi against requirements.txt too


def test_the_base_image_is_an_argument_taken_by_digest():
    img = image()
    assert [rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "FROM"] == ["${BASE_IMAGE}"]
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", img.base) and img.args["BASE_IMAGE"] == img.base


def test_the_labels_name_the_one_version_the_license_and_the_source():
    labels = image().labels
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.version"] == "${VERSION}" and "VERSION" in image().args
    assert labels["org.opencontainers.image.licenses"] == project["license"] == "Apache-2.0"
    assert labels["org.opencontainers.image.title"] == release.NAME
    owner = release.IMAGE_REPOSITORY.split("/")[1]  # ghcr.io/<owner>/...: the GitHub owner of the source
    assert labels["org.opencontainers.image.source"] == f"https://github.com/{owner}/{release.NAME}"


@pytest.mark.live
def test_make_image_passes_the_one_version_and_tags_the_default_image():
    planned = subprocess.run(["make", "-n", "image", "PULUMI_AWS_SHA256=" + "a" * 64], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert planned.returncode == 0, planned.stderr
    assert f"--build-arg VERSION={release.version()} " in planned.stdout
    assert f"-t {release.default_image()} " in planned.stdout and f"PULUMI_AWS_SHA256={'a' * 64}" in planned.stdout


@pytest.mark.live
def test_the_build_refuses_a_version_that_is_not_the_codes(tmp_path):
    """The RUN that checks VERSION, run as written on the code it would check (the repository's, as copied)."""
    [run] = [run for run in image().runs if "--version" in run]
    env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    for version, ok in ((release.version(), True), ("", False), ("9.9.9", False)):
        built = subprocess.run(["/bin/sh", "-c", run], cwd=ROOT, capture_output=True, text=True, timeout=120,
                               env={**env, "VERSION": version})
        assert (built.returncode == 0) == ok, (version, built.stderr)
        assert ok or "is not this code's version" in built.stderr
