"""A re-created mesh member, as the pull-request diff shows it from a Git repository (no hand-written timestamps):
a member deleted with deletionPolicy Retain loses its pairs (its peers' stacks and its own drop them); the
HubCluster re-created later joins last, so it owns every pair it has again, and the diff shows exactly that: its
stack builds them, no peer's stack changes (docs/mesh.md "Who owns a pair", docs/service.md "Deletion policy")."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAIR = "hubwright:mesh:MeshPeering"  # one per pair a stack owns

pytestmark = pytest.mark.live


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def plan(repo: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", "hub.yaml", "--clusters", "clusters",
                           "--format", "json", "--no-cache", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def pairs_in(doc: dict) -> dict[str, list[str]]:
    """Stack -> the pairs it owns (its MeshPeering components, by name: the two stacks in sorted order)."""
    return {s["stack"]: sorted(r["urn"].split("::")[-1] for r in s["resources"] if r["type"] == PAIR)
            for s in doc["stacks"]}


def test_a_re_created_mesh_member_joins_last_and_owns_its_pairs_again_in_the_diff(tmp_path):
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "mesh", repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the mesh")
    before = pairs_in(plan(repo))
    member = "acme.pay-use1"
    owned_by_peers = {stack: [p for p in names if member in p] for stack, names in before.items() if stack != member}
    assert any(owned_by_peers.values()), "the member must start as an early joiner whose pairs its peers own"
    kept = (repo / "clusters" / "pay-use1.yaml").read_text()

    (repo / "clusters" / "pay-use1.yaml").unlink()  # deleted (deletionPolicy Retain: its pairs go all the same)
    git(repo, "commit", "-q", "-am", "pay-use1 deleted")
    gone = pairs_in(plan(repo))
    assert member not in gone and not any(member in p for names in gone.values() for p in names)

    (repo / "clusters" / "pay-use1.yaml").write_text(kept)  # re-created: it adopts its retained stack
    diff = plan(repo, "--baseline-ref", "HEAD")
    changes = {s["stack"]: s["change"] for s in diff["stacks"]}
    assert changes.pop(member) == "new" and set(changes.values()) == {"unchanged"}, changes
    # Every pair it has is its own now: the ones it owned before and the ones its peers owned.
    assert set(pairs_in(diff)[member]) == {p for names in owned_by_peers.values() for p in names} | set(before[member])
    assert {r["change"] for s in diff["stacks"] if s["stack"] == member for r in s["resources"]} == {"add"}
