"""`plan --baseline` and `--baseline-ref` as a user runs them: what a change does to every stack, the exit codes,
REF's own program planning REF's files in a worktree that leaves the working tree alone, and the cache that is
never trusted past its key."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from automation.adapters.engine.plan_cache import program_digest
from automation.cli import main

ROOT = Path(__file__).resolve().parents[1]
JOINER = yaml.safe_load((ROOT / "examples" / "mesh" / "join" / "ledger-euw1b.yaml").read_text())  # docs/plan.md's


def plan(capsys, hub, clusters, *args) -> tuple[int, str, str]:
    code = main(["plan", "--hub", str(hub), "--clusters", str(clusters), *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def mesh(tmp_path) -> Path:
    """A copy of the mesh example, with its baseline plan as baseline.json."""
    shutil.copytree(ROOT / "examples" / "mesh", tmp_path / "mesh")
    return tmp_path / "mesh"


def baseline_of(capsys, mesh: Path) -> Path:
    code, out, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--format", "json")
    assert code == 0, err
    (mesh / "baseline.json").write_text(out)
    return mesh / "baseline.json"


def test_a_mesh_join_shows_the_joiners_stack_and_nothing_else(capsys, mesh):
    baseline = baseline_of(capsys, mesh)
    (mesh / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))
    code, out, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", baseline, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    changes = {s["stack"]: s["change"] for s in doc["stacks"]}
    assert changes.pop("globex.ledger-euw1b") == "new"
    assert set(changes.values()) == {"unchanged"} and len(changes) == 5
    [joiner] = [s for s in doc["stacks"] if s["change"] == "new"]
    assert joiner["resources"] and {r["change"] for r in joiner["resources"]} == {"add"}
    assert all(s["resources"] == [] for s in doc["stacks"] if s["change"] == "unchanged")
    assert doc["mesh"]["payments"]["change"] == "changed"
    assert doc["summary"]["stacks"]["new"] == 1


def test_nothing_changed_exits_0_and_a_change_exits_4_with_detailed_exitcode(capsys, mesh):
    baseline = baseline_of(capsys, mesh)
    code, out, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", baseline,
                          "--detailed-exitcode")
    assert code == 0, err
    assert "6 stacks unchanged" in out or "unchanged" in out
    (mesh / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))
    code, _, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", baseline, "--detailed-exitcode")
    assert code == 4, err
    code, _, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", baseline)
    assert code == 0, err  # without the flag a change is not an error


def test_an_edit_that_moves_a_zone_is_a_replace_naming_the_property(capsys, tmp_path):
    shutil.copytree(ROOT / "examples" / "clusters", tmp_path / "clusters")
    hub = ROOT / "examples" / "hub.yaml"
    code, base, err = plan(capsys, hub, tmp_path / "clusters", "--format", "json")
    assert code == 0, err
    (tmp_path / "base.json").write_text(base)
    doc = yaml.safe_load((tmp_path / "clusters" / "prod-1.yaml").read_text())
    doc["spec"]["apiURL"] = doc["spec"]["apiURL"].replace("https://api.", "https://api2.")
    (tmp_path / "clusters" / "prod-1.yaml").write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, hub, tmp_path / "clusters", "--baseline", tmp_path / "base.json", "--format", "json")
    assert code == 0, err
    stacks = {s["stack"]: s for s in json.loads(out)["stacks"]}
    assert stacks["acme.prod-1"]["change"] == "changed"
    assert {s["change"] for name, s in stacks.items() if name != "acme.prod-1"} == {"unchanged"}
    zones = [r for r in stacks["acme.prod-1"]["resources"] if r["type"] == "aws:route53/zone:Zone"]
    assert [z["change"] for z in zones] == ["replace"]
    assert zones[0]["properties"]["name"]["new"].startswith("api2.")


@pytest.mark.parametrize("fmt", ["diff", "markdown"])
def test_a_diff_format_without_a_baseline_is_invalid_input(capsys, fmt):
    code, out, err = plan(capsys, ROOT / "examples/hub.yaml", ROOT / "examples/clusters", "--format", fmt)
    assert code == 2 and out == ""
    assert "needs a baseline" in err


def test_a_baseline_that_is_not_a_plan_is_refused_by_name(capsys, tmp_path):
    (tmp_path / "old.json").write_text('{"not": "a plan"}')
    code, out, err = plan(capsys, ROOT / "examples/hub.yaml", ROOT / "examples/clusters",
                          "--baseline", tmp_path / "old.json")
    assert code == 2 and out == ""
    assert f"--baseline {tmp_path / 'old.json'}" in err and "not a plan document" in err


def test_a_reformatted_baseline_gives_the_same_diff(capsys, mesh):
    baseline = baseline_of(capsys, mesh)
    (mesh / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))
    _, indexed, _ = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", baseline, "--format", "json",
                         "--no-cache")
    (mesh / "compact.json").write_text(json.dumps(json.loads(baseline.read_text())))
    _, parsed, _ = plan(capsys, mesh / "hub.yaml", mesh / "clusters", "--baseline", mesh / "compact.json",
                        "--format", "json", "--no-cache")
    assert indexed == parsed and json.loads(indexed)["summary"]["stacks"]["new"] == 1


# --------------------------------------------------------------------------- the cache

def cache_entries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.json"))


def test_a_second_plan_comes_from_the_cache_as_the_same_bytes(capsys, tmp_path):
    args = ("--format", "json", "--cache", str(tmp_path / "cache"))
    code, cold, _ = plan(capsys, ROOT / "examples/transit/hub.yaml", ROOT / "examples/transit/clusters", *args)
    assert code == 0
    entries = cache_entries(tmp_path / "cache")
    assert entries
    code, warm, err = plan(capsys, ROOT / "examples/transit/hub.yaml", ROOT / "examples/transit/clusters", *args)
    assert code == 0 and warm == cold
    assert "plan: 0 stack(s) planned" in err


def test_a_poisoned_cache_entry_is_never_used(capsys, tmp_path):
    """An entry at the right path whose program digest is another's (or which is torn) is planned again."""
    args = ("--format", "json", "--cache", str(tmp_path / "cache"))
    code, cold, _ = plan(capsys, ROOT / "examples/hub.yaml", ROOT / "examples/clusters", *args)
    assert code == 0
    entries = cache_entries(tmp_path / "cache")
    for i, path in enumerate(entries):
        entry = json.loads(path.read_text())
        assert entry["program"] == program_digest()
        if i % 2 == 0:
            entry["program"] = "0" * 64  # written by another program version
            entry["text"] = entry["text"].replace("vpc-0", "vpc-POISON")
            path.write_text(json.dumps(entry))
        else:
            path.write_text(path.read_text()[:50])  # torn
    code, warm, err = plan(capsys, ROOT / "examples/hub.yaml", ROOT / "examples/clusters", *args)
    assert code == 0, err
    assert warm == cold and "POISON" not in warm


def test_the_program_digest_covers_the_program_source(tmp_path):
    for package in ("components", "stacks", "policy", "automation"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text("x = 1\n")
    before = program_digest(tmp_path)
    program_digest.cache_clear()
    (tmp_path / "components" / "m.py").write_text("x = 2\n")
    assert program_digest(tmp_path) != before
    program_digest.cache_clear()


# --------------------------------------------------------------------------- --baseline-ref

def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def committed(repo: Path) -> Path:
    """`repo` made a git repository whose one commit holds everything in it."""
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main")
    return repo


@pytest.mark.live
def test_baseline_ref_plans_refs_files_and_leaves_the_working_tree_alone(tmp_path):
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "mesh", repo)
    committed(repo)
    (repo / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))  # not committed: the working tree
    status = git(repo, "status", "--porcelain")
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", "hub.yaml", "--clusters", "clusters",
                           "--baseline-ref", "HEAD", "--format", "json"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    changes = {s["stack"]: s["change"] for s in json.loads(done.stdout)["stacks"]}
    assert changes.pop("globex.ledger-euw1b") == "new" and set(changes.values()) == {"unchanged"}
    # A repository of cluster files alone: its baseline is this program on HEAD's files, and the message says so.
    assert "plan: the baseline: this program on HEAD's files" in done.stderr, done.stderr
    assert git(repo, "status", "--porcelain") == status
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # the temporary worktree is gone


@pytest.mark.live
def test_baseline_ref_runs_refs_own_program(tmp_path):
    """A change to components/ shows as what it does: REF's program planned the baseline, this one the change."""
    clone = tmp_path / "clone"  # this checkout's program and examples, as a repository of its own
    for part in ("automation", "components", "stacks", "policy", "examples"):
        shutil.copytree(ROOT / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("requirements.txt", "__main__.py", "Pulumi.yaml", "pyproject.toml"):
        shutil.copy(ROOT / part, clone / part)
    committed(clone)
    program = clone / "components" / "mesh.py"
    text = program.read_text()
    assert '"hubwright.io/mesh-group": ' in text
    program.write_text(text.replace('"hubwright.io/mesh-group": ', '"hubwright.io/mesh-group-v2": ', 1))
    git(clone, "commit", "-q", "-a", "-m", "rename a tag")
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", "examples/mesh/hub.yaml",
                           "--clusters", "examples/mesh/clusters", "--baseline-ref", "HEAD~1", "--format", "json"],
                          cwd=clone, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "plan: the baseline: HEAD~1's program on HEAD~1's files" in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    changed = [s for s in doc["stacks"] if s["change"] == "changed"]
    assert changed, doc["summary"]
    tags = [p for s in changed for r in s["resources"] for name, p in r["properties"].items() if name == "tags"]
    assert tags and all("hubwright.io/mesh-group-v2" in json.dumps(p["new"]) for p in tags)
    assert all(r["change"] == "update" for s in changed for r in s["resources"])  # tags update in place


@pytest.mark.live
def test_baseline_ref_refuses_a_ref_that_does_not_exist(tmp_path):
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "mesh", repo)
    committed(repo)
    done = subprocess.run([sys.executable, "-m", "automation", "plan", "--hub", "hub.yaml", "--clusters", "clusters",
                           "--baseline-ref", "no-such-branch"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and done.stdout == ""
    assert "--baseline-ref" in done.stderr and "no-such-branch" in done.stderr


# --------------------------------------------------------------------------- docs/plan.md's pull-request flow
# docs/plan.md's job runs with the CLI as one file, outside the checkout: tests/test_zipapp.py runs its block.


@pytest.mark.live
def test_a_plan_read_wholly_from_the_cache_loads_neither_pulumi_nor_the_services_libraries(tmp_path):
    """The warm path: nothing is planned, so the recorder (Pulumi) and other commands' libraries stay unloaded."""
    args = ["plan", "--hub", "examples/transit/hub.yaml", "--clusters", "examples/transit/clusters", "--format", "json",
            "--cache", str(tmp_path / "cache")]
    check = ("import sys; from automation.cli import main; code = main(sys.argv[1:]); "
             "loaded = sorted(m for m in ('pulumi', 'pulumi_aws', 'kubernetes', 'uvicorn') if m in sys.modules); "
             "print(code, loaded, file=sys.stderr)")
    cold = subprocess.run([sys.executable, "-c", check, *args], cwd=ROOT, capture_output=True, text=True)
    warm = subprocess.run([sys.executable, "-c", check, *args], cwd=ROOT, capture_output=True, text=True)
    assert cold.stdout == warm.stdout and len(warm.stdout) > 1000
    assert "0 ['pulumi', 'pulumi_aws']" in cold.stderr  # planned: the recorder was needed
    assert "0 []" in warm.stderr and "plan: 0 stack(s) planned" in warm.stderr


def backdate(root: Path, seconds: int = 60) -> None:
    """Every file under `root` written `seconds` ago: past the racy window in which a stamp is not trusted."""
    old = time.time() - seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (old, old))


def test_a_fleet_where_nothing_moved_is_written_from_its_last_plan_and_any_edit_is_seen(capsys, mesh):
    args = ("--format", "json", "--cache", str(mesh / "cache"))
    backdate(mesh)
    code, first, _ = plan(capsys, mesh / "hub.yaml", mesh / "clusters", *args)
    assert code == 0
    code, again, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", *args)
    assert code == 0 and again == first
    assert "no file, setting or program source changed since the last plan" in err
    (mesh / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))  # a new file
    backdate(mesh, 30)
    code, joined, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", *args)
    assert code == 0 and "no file" not in err and "globex.ledger-euw1b" in joined
    doc = yaml.safe_load((mesh / "clusters" / "joiner.yaml").read_text())
    doc["spec"]["network"]["cidr"] = "10.29.0.0/16"  # the same size, and the mtime put back where it was
    stat = (mesh / "clusters" / "joiner.yaml").stat()
    (mesh / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(doc))
    os.utime(mesh / "clusters" / "joiner.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    code, edited, err = plan(capsys, mesh / "hub.yaml", mesh / "clusters", *args)
    assert code == 0 and "no file" not in err and "10.29.0.0/16" in edited and "10.29.0.0/16" not in joined


def test_a_file_written_in_the_racy_window_is_never_stamped(tmp_path):
    from automation.adapters.files.inputs import fleet_stamp, yaml_files

    shutil.copytree(ROOT / "examples" / "mesh", tmp_path / "mesh")
    backdate(tmp_path / "mesh")
    def files() -> list[str]:
        return yaml_files(str(tmp_path / "mesh" / "clusters"))[0]

    assert fleet_stamp(str(tmp_path / "mesh" / "hub.yaml"), files()) is not None
    (tmp_path / "mesh" / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))
    assert fleet_stamp(str(tmp_path / "mesh" / "hub.yaml"), files()) is None


def test_a_secret_input_is_shown_masked_in_the_plan_and_plain_to_the_policy_rules():
    import pulumi
    import pulumi_aws as aws

    from automation.adapters.engine.plan import record

    def build() -> dict:
        aws.ec2.SecurityGroup("sg", description=pulumi.Output.secret("s3cr3t"), vpc_id="vpc-1")
        return {}

    plan = record(build, stack="acme.secret")
    group = plan.one("aws:ec2/securityGroup:SecurityGroup")
    assert group.inputs["description"] == "s3cr3t"  # what the rules read
    shown = json.dumps(plan.to_json())
    assert "s3cr3t" not in shown and group.to_json()["inputs"] == {"description": "[secret]", "vpcId": "vpc-1"}


@pytest.mark.live
def test_an_invalid_cluster_already_on_main_does_not_block_every_other_diff_with_keep_going(tmp_path):
    """The trial: main held one invalid cluster (an administrator changed a namespace annotation), and every other
    team's diff failed with exit 2 before anything was written, the baseline's run included. With --keep-going both
    runs plan the valid clusters: the joiner's stack shows as new, the invalid cluster's stack is not 'removed',
    and it is listed with its reason (exit 2, as the service stalls that cluster alone)."""
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "mesh", repo)
    broken = yaml.safe_load((repo / "clusters" / "sandbox.yaml").read_text())
    broken["metadata"]["name"] = "broken"
    broken["spec"]["accountID"] = "444444444444"  # an account its namespace does not own: refused at admission
    (repo / "clusters" / "broken.yaml").write_text(yaml.safe_dump(broken))
    committed(repo)
    (repo / "clusters" / "joiner.yaml").write_text(yaml.safe_dump(JOINER))
    command = [sys.executable, "-m", "automation", "plan", "--hub", "hub.yaml", "--clusters", "clusters",
               "--baseline-ref", "HEAD", "--format", "json", "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stopped = subprocess.run(command, cwd=repo, capture_output=True, text=True, env=env)
    assert stopped.returncode == 2 and stopped.stdout == "", stopped.stderr
    done = subprocess.run([*command, "--keep-going"], cwd=repo, capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    changes = {s["stack"]: s["change"] for s in json.loads(done.stdout)["stacks"]}
    assert changes.pop("globex.ledger-euw1b") == "new" and set(changes.values()) == {"unchanged"}, changes
    assert f"{broken['metadata']['namespace']}.broken" not in changes
    assert f"HubCluster {broken['metadata']['namespace']}/broken: spec.accountID" in done.stderr, done.stderr
