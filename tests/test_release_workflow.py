""".github/workflows/release.yml, checked here as far as it can be without GitHub: the real actionlint (built by
scripts/tools.sh into .tools/bin, tools/release/go.mod) finds nothing in any workflow, and does find the faults put
into a copy of a good one (so a clean result means something); the release runs `make release` and checks dist/
against SHA256SUMS before it publishes; and the two steps that decide (the tag is pyproject.toml's version; dist/ is
what SHA256SUMS says) are run as bash, the way the runner runs them, against stand-ins.

The publishing steps (skopeo, helm push, gh release create) are not run: they need ghcr.io and a token.

actionlint runs with shellcheck and pyflakes turned off, so the result is the same on every machine (it uses them
only when they are on PATH).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from stacks.release import IMAGE_REPOSITORY, version

pytestmark = pytest.mark.live  # runs a binary built by scripts/tools.sh (tests/tiers.py)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
ACTIONLINT = ROOT / ".tools" / "bin" / "actionlint"
BASH = shutil.which("bash") or "/bin/bash"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")  # owner/repo[/path]@<full commit SHA>


def actionlint(files: list[Path], cwd: Path) -> list[dict]:
    """actionlint's findings on FILES (its JSON output: message, filepath, line, column, kind)."""
    if not ACTIONLINT.exists():
        pytest.skip("no .tools/bin/actionlint: run scripts/tools.sh (builds it from tools/release/go.mod)")
    proc = subprocess.run([str(ACTIONLINT), "-format", "{{json .}}", "-shellcheck=", "-pyflakes=",
                           *(str(f) for f in files)], cwd=cwd, capture_output=True, text=True, timeout=120)
    # 0: nothing found, 1: findings; anything else (2: bad usage, 3: it failed) is not a verdict.
    assert proc.returncode in (0, 1), f"actionlint exited {proc.returncode}: {proc.stderr}{proc.stdout}"
    findings = json.loads(proc.stdout or "[]")
    assert (proc.returncode == 1) == bool(findings), (proc.returncode, proc.stdout)
    return findings


def shown(findings: list[dict]) -> str:
    return "\n".join(f"{f['filepath']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings)


def load(path: Path = RELEASE) -> dict:
    return yaml.safe_load(path.read_text())


def triggers(doc: dict) -> dict:
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True.
    return doc.get("on", doc.get(True))


def steps(doc: dict) -> list[dict]:
    (job,) = doc["jobs"].values()
    return job["steps"]


def step_index(found: list[dict], pattern: str) -> int:
    """The index of the one step whose `run` matches PATTERN."""
    hits = [i for i, s in enumerate(found) if re.search(pattern, s.get("run", ""))]
    assert len(hits) == 1, f"{len(hits)} steps run {pattern!r} in {RELEASE.name}"
    return hits[0]


def run_step(step: dict, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The step's script as the runner runs `shell: bash` (bash --noprofile --norc -eo pipefail FILE), with `python`
    this interpreter (the container's python3, python-is-python3)."""
    with tempfile.TemporaryDirectory() as tmp:  # not in CWD: the verify step lists every file of dist/
        script = Path(tmp) / "step.sh"
        script.write_text(step["run"])
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        return subprocess.run([BASH, "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd,
                              env={**os.environ, "PATH": path, **env}, capture_output=True, text=True, timeout=60)


# --- actionlint -------------------------------------------------------------------------------------------------

def test_every_workflow_passes_actionlint() -> None:
    files = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
    assert RELEASE in files
    findings = actionlint(files, ROOT)
    assert not findings, f"actionlint found {len(findings)} problem(s):\n{shown(findings)}"


# A good workflow, and faults to put into it: (what, text replaced, replacement, kind, words of the message).
GOOD = """\
name: good
on:
  push:
    tags: ["v*"]
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - id: v
        run: echo "x=1" >>"$GITHUB_OUTPUT"
      - env:
          X: ${{ steps.v.outputs.x }}
        run: echo "$X"
"""
FAULTS = [
    ("an undefined step's output", "steps.v.outputs.x", "steps.nope.outputs.x", "expression", '"nope"'),
    ("a typo'd key", "runs-on:", "runs-onn:", "syntax-check", '"runs-onn"'),
    ("an untrusted value in a script", 'run: echo "$X"', 'run: echo "${{ github.event.head_commit.message }}"',
     "expression", "potentially untrusted"),
]


def test_actionlint_passes_the_good_workflow(tmp_path: Path) -> None:
    wf = tmp_path / ".github" / "workflows" / "good.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(GOOD)
    assert actionlint([wf], tmp_path) == []


@pytest.mark.parametrize(("what", "old", "new", "kind", "words"), FAULTS, ids=[f[0] for f in FAULTS])
def test_actionlint_finds_a_fault(tmp_path: Path, what: str, old: str, new: str, kind: str, words: str) -> None:
    assert GOOD.count(old) == 1
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(GOOD.replace(old, new))
    findings = actionlint([wf], tmp_path)
    assert any(f["kind"] == kind and words in f["message"] for f in findings), \
        f"actionlint missed {what}; it found:\n{shown(findings) or '(nothing)'}"


# --- what the release runs --------------------------------------------------------------------------------------

def test_release_runs_on_a_version_tag_with_minimal_permissions() -> None:
    doc = load()
    on = triggers(doc)
    assert on["push"] == {"tags": ["v*"]}
    assert "workflow_dispatch" in on
    assert doc["permissions"] == {}  # nothing by default; the job asks for what it needs
    (job,) = doc["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"contents": "write", "packages": "write"}


def test_release_pins_every_action_by_commit() -> None:
    uses = [s["uses"] for s in steps(load()) if "uses" in s]
    assert uses, "no actions used"
    assert [u for u in uses if not PINNED.match(u)] == []


def test_release_scripts_take_values_from_env_not_expressions() -> None:
    # `${{ }}` inside a script is pasted into it before bash reads it (script injection); env values are not.
    assert [s.get("name", s.get("id")) for s in steps(load()) if "${{" in s.get("run", "")] == []


def test_release_builds_verifies_then_publishes_in_that_order() -> None:
    found = steps(load())
    check = next(i for i, s in enumerate(found) if s.get("id") == "version")
    build = step_index(found, r"\bmake release VERSION=")
    verify = step_index(found, r"(?m)^ *sha256sum (-c|--check)\b.*\bSHA256SUMS\b")
    assert found[verify].get("working-directory") == "dist"
    publish = [step_index(found, r"\bskopeo copy\b"), step_index(found, r"\bhelm push\b"),
               step_index(found, r"\bgh release create\b")]
    assert check < build < verify < min(publish), (check, build, verify, publish)
    assert "from stacks.release import version" in found[check]["run"]
    assert found[build]["env"]["VERSION"] == "${{ steps.version.outputs.version }}"
    assert "oci-archive:dist/hubwright-$VERSION.oci.tar" in found[publish[0]]["run"]
    assert 'helm push "dist/hubwright-$VERSION.tgz"' in found[publish[1]]["run"]


# --- the steps that decide, run ----------------------------------------------------------------------------------

def version_step() -> dict:
    return next(s for s in steps(load()) if s.get("id") == "version")


def test_the_version_step_passes_the_projects_version(tmp_path: Path) -> None:
    out = tmp_path / "github_output"
    out.touch()
    proc = run_step(version_step(), {"REF_TYPE": "tag", "TAG": f"v{version()}", "GITHUB_OUTPUT": str(out)}, ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    repo_dir = IMAGE_REPOSITORY.rsplit("/", 1)[0]
    assert out.read_text().splitlines() == [f"version={version()}", f"image={IMAGE_REPOSITORY}:{version()}",
                                            f"charts=oci://{repo_dir}/charts"]


@pytest.mark.parametrize(("ref_type", "tag", "words"), [
    ("tag", f"v{version()}.1", "pyproject.toml's project.version is"),
    ("tag", "v0.0.0-other", "not publishing"),
    ("tag", version(), "v* tag"),  # no v
    ("branch", "main", "v* tag"),  # run by hand from a branch
])
def test_the_version_step_refuses(tmp_path: Path, ref_type: str, tag: str, words: str) -> None:
    out = tmp_path / "github_output"
    out.touch()
    proc = run_step(version_step(), {"REF_TYPE": ref_type, "TAG": tag, "GITHUB_OUTPUT": str(out)}, ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert words in proc.stdout
    assert out.read_text() == ""


V = "9.8.7"
DIST = [f"hubwright-{V}.oci.tar", f"hubwright-{V}.tgz", "install.yaml", f"hubwright-kustomize-{V}.tar.gz",
        f"hubwright-{V}.pyz", f"hubwright-{V}.spdx.json", "iam/hub.json", "iam/spoke.json"]


def fake_dist(root: Path) -> Path:
    """dist/ as `make release` writes it (stand-in contents), with SHA256SUMS as sha256sum writes it."""
    dist = root / "dist"
    lines = []
    for name in DIST:
        (dist / name).parent.mkdir(parents=True, exist_ok=True)
        (dist / name).write_bytes(name.encode())
        lines.append(f"{hashlib.sha256(name.encode()).hexdigest()}  {name}\n")
    (dist / "SHA256SUMS").write_text("".join(lines))
    return dist


def verify_step() -> dict:
    found = steps(load())
    return found[step_index(found, r"(?m)^ *sha256sum (-c|--check)\b")]


def test_the_verify_step_passes_a_whole_dist(tmp_path: Path) -> None:
    proc = run_step(verify_step(), {"VERSION": V}, fake_dist(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def corrupt(dist: Path) -> None:
    (dist / f"hubwright-{V}.tgz").write_bytes(b"changed")


def unlisted(dist: Path) -> None:
    (dist / "stray.txt").write_text("not in SHA256SUMS")


def missing(dist: Path) -> None:
    (dist / f"hubwright-{V}.pyz").unlink()
    sums = dist / "SHA256SUMS"
    sums.write_text("".join(x for x in sums.read_text().splitlines(keepends=True) if not x.endswith(".pyz\n")))


def no_iam(dist: Path) -> None:
    shutil.rmtree(dist / "iam")
    sums = dist / "SHA256SUMS"
    sums.write_text("".join(x for x in sums.read_text().splitlines(keepends=True) if " iam/" not in x))


@pytest.mark.parametrize(("damage", "words"), [
    (corrupt, "FAILED"),
    (unlisted, "does not list exactly"),
    (missing, f"wrote no dist/hubwright-{V}.pyz"),
    (no_iam, "wrote no dist/iam/*.json"),
], ids=["a changed file", "a file not in SHA256SUMS", "a missing artifact", "no IAM templates"])
def test_the_verify_step_refuses(tmp_path: Path, damage, words: str) -> None:
    dist = fake_dist(tmp_path)
    damage(dist)
    proc = run_step(verify_step(), {"VERSION": V}, dist)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert words in proc.stdout + proc.stderr


def changelog_step() -> dict:
    return next(s for s in steps(load()) if s.get("id") == "changelog")


def test_the_changelog_step_refuses_an_undated_entry_and_passes_a_dated_one(tmp_path: Path) -> None:
    """The release notes are the version's CHANGELOG entry: publishing waits until it is dated."""
    undated = tmp_path / "undated"
    undated.mkdir()
    (undated / "CHANGELOG.md").write_text(f"# Changelog\n\n## [{version()}] - unreleased\n")
    proc = run_step(changelog_step(), {"VERSION": version()}, undated)
    assert proc.returncode == 1 and "no dated entry" in proc.stdout + proc.stderr
    dated = tmp_path / "dated"
    dated.mkdir()
    (dated / "CHANGELOG.md").write_text(f"# Changelog\n\n## [{version()}] - 2026-12-01\n")
    proc = run_step(changelog_step(), {"VERSION": version()}, dated)
    assert proc.returncode == 0, proc.stdout + proc.stderr
