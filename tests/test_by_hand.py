"""docs/plan.md's "`pulumi up` by hand, for one cluster", run as it is written, with the real pulumi CLI.

The blocks run in bash from a copy of the repository's root (its Pulumi.yaml and __main__.py; the packages,
examples and .venv linked), with HOME and PULUMI_HOME in a temporary folder (pulumi keeps its login in
PULUMI_HOME, which defaults to the passwd entry's home, not $HOME), and no other PULUMI_* variable: the doc must
supply what pulumi needs. `pulumi login`, `pulumi stack init` and `pulumi config set hubwright:inputs ...` run for
real. `pulumi preview` needs the language host pulumi-language-python, which this machine cannot build
(scripts/tools.sh says why): the doc says so, and the test checks that the preview stops for that reason and no
other.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import blocks, repository_copy, script

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "plan.md"
HEADING = "`pulumi up` by hand, for one cluster"
TOOLS = ROOT / ".tools" / "bin"
NO_PLUGIN = "no language plugin 'pulumi-language-python' found"


@pytest.fixture
def checkout(tmp_path):
    """The repository's root as a user has it, without this worktree's state: files copied, packages linked."""
    root = repository_copy(ROOT, tmp_path / "repo", ("Pulumi.yaml", "__main__.py", "requirements.txt"))
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PULUMI_", "VIRTUAL_ENV", "PYTHON", "AWS_"))}
    env.update(HOME=str(home), PULUMI_HOME=str(home / ".pulumi"), PULUMI_SKIP_UPDATE_CHECK="true",
               PATH=f"{TOOLS}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}")
    return root, home, env


def _run(text: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_by_hand_section_lists_its_not_run_blocks_with_a_reason():
    skipped = [(str(block), block.not_run) for block in blocks(README, HEADING) if block.not_run]
    assert [reason for _, reason in skipped] == [
        "downloads the provider from GitHub, and the test machine is offline"], skipped
    assert "pulumi plugin install resource aws" in next(b.text for b in blocks(README, HEADING) if b.not_run)


@pytest.mark.live
def test_pulumi_up_by_hand_runs_as_written_until_the_language_host(checkout):
    root, home, env = checkout
    *setup, preview = [block for block in blocks(README, HEADING) if block.not_run is None]
    assert preview.text.strip().startswith("pulumi preview"), preview

    # on this machine there is no language host (scripts/tools.sh cannot build it), so the last block stops
    assert shutil.which("pulumi-language-python", path=env["PATH"]) is None, \
        "pulumi-language-python is on PATH now: make this test run the preview to its end"
    ran = _run(script([*setup, preview]), root, env)
    output = f"stdout:\n{ran.stdout}\nstderr:\n{ran.stderr}"
    # ... and that is the one reason: every block before it ran (bash -e stops at the first failure), the
    # preview started, and its only error is the missing plugin
    assert ran.returncode != 0 and "Previewing update (acme.prod-1)" in ran.stdout, output
    errors = [line for line in (ran.stderr + ran.stdout).splitlines() if line.startswith("error:")]
    assert errors and all(NO_PLUGIN in line for line in errors), output

    # the state is in ~/.hubwright/state (the doc's backend), the stack config in stack-config/
    assert (home / ".hubwright" / "state" / ".pulumi" / "stacks" / "hubwright" / "acme.prod-1.json").is_file()
    config = root / "stack-config" / "Pulumi.acme.prod-1.yaml"
    assert config.is_file() and not list(root.glob("Pulumi.*.yaml"))
    # ... which git ignores in the repository itself
    ignored = subprocess.run(["git", "check-ignore", "-q", "stack-config/Pulumi.acme.prod-1.yaml"], cwd=ROOT)
    assert ignored.returncode == 0, "stack-config/ is not git-ignored"
    # the stack's hubwright:inputs is exactly what `python -m automation inputs` prints for acme/prod-1
    stored = _run("pulumi config get hubwright:inputs", root, {**env, "PULUMI_CONFIG_PASSPHRASE": "..."})
    assert stored.returncode == 0, stored.stderr
    expected = subprocess.run([sys.executable, "-m", "automation", "inputs", "--hub", "examples/hub.yaml",
                               "--clusters", "examples/clusters", "--cluster", "acme/prod-1"],
                              cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(stored.stdout) == json.loads(expected.stdout)
    assert json.loads(stored.stdout)["stack"] == "acme.prod-1"
