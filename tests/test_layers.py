"""The layers hold: the contracts in pyproject.toml ([tool.importlinter]) pass on the tree and fail on a planted
violation, and no production module hides an import inside a function (where it would only dodge a cycle)."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("stacks", "components", "automation", "policy", "deploy")
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-logo", "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}, timeout=120)


@pytest.mark.live
def test_the_tree_keeps_every_contract():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.live
def test_a_violation_of_each_kind_fails_the_check(tmp_path):
    for folder in ("stacks", "components", "automation", "policy", "doubles", "bench"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "stacks" / "leak.py").write_text("import boto3\n")  # the pure layer calls AWS
    (tmp_path / "automation" / "adapters" / "upward.py").write_text(  # an adapter reaches into the service
        "from automation.service import serve\n")
    (tmp_path / "automation" / "adapters" / "kube" / "reach.py").write_text(  # a sibling's internals, not its package
        "from automation.adapters.engine import pool\n")
    (tmp_path / "policy" / "rules" / "check.py").write_text(  # a rule reaches for the SDK: no longer a plain function
        (ROOT / "policy" / "rules" / "check.py").read_text() + "\nimport pulumi\n")
    (tmp_path / "policy" / "rules" / "sdk.py").write_text("import pulumi_policy\n")  # so does a module added later
    (tmp_path / "policy" / "rules" / "cycle_a.py").write_text("from policy.rules import cycle_b\n")
    (tmp_path / "policy" / "rules" / "cycle_b.py").write_text("from policy.rules import cycle_a\n")
    (tmp_path / "bench" / "leak.py").write_text("from tests.envtest import kube_apiserver\n")  # a bench on a fixture
    (tmp_path / "doubles" / "leak.py").write_text("def f():\n    import tests.factories\n")  # a harness on tests/
    (tmp_path / "stacks" / "cycle_a.py").write_text("from stacks import cycle_b\n")
    (tmp_path / "stacks" / "cycle_b.py").write_text("def f():\n    from stacks import cycle_a\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    out = result.stdout
    assert "stacks.leak -> boto3" in out
    assert "automation.adapters.upward -> automation.service" in out
    assert "policy.rules.check -> pulumi" in out
    assert "policy.rules.sdk -> pulumi_policy" in out
    assert "No cycles are allowed in policy.rules" in out
    assert "automation.adapters.kube.reach -> automation.adapters.engine.pool" in out
    assert "No cycles are allowed in stacks" in out
    assert "bench.leak -> tests" in out
    assert "doubles.leak -> tests" in out


def test_production_code_imports_only_at_module_level():
    hidden = []
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module_level = {id(node) for node in tree.body}
            hidden += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                       if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in module_level]
    assert hidden == []


MODULE_MAX_LINES = 500
CONTROLLERS = ("automation/service", "automation/runner")  # they reach the API server through the kit alone


def test_no_production_module_is_over_500_lines():
    long = [f"{path.relative_to(ROOT)}: {n}" for package in PRODUCTION for path in sorted((ROOT / package).rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_MAX_LINES]
    assert long == []


def _raw_metadata_reads(tree: ast.AST) -> list[int]:
    """Lines reading `metadata` out of a raw object: x.get("metadata") or x["metadata"] (not a dict being built)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "metadata":
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and isinstance(node.slice, ast.Constant) and node.slice.value == "metadata":
            lines.append(node.lineno)
    return lines


def test_controllers_read_objects_through_the_kits_view_and_reach_the_api_server_through_its_port():
    """No module of the service or the runner imports the Kubernetes client or reads `metadata` from a raw object:
    they hold the kit's Objects port and read through its Obj view (automation/kit/objects.py)."""
    found = []
    for folder in CONTROLLERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = path.relative_to(ROOT)
            found += [f"{where}:{line}: reads metadata from a raw object" for line in _raw_metadata_reads(tree)]
            found += [f"{where}:{node.lineno}: imports the Kubernetes client" for node in ast.walk(tree)
                      if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kubernetes")
                      or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "kubernetes"
                                                               for a in node.names))]
    assert found == []


def test_the_raw_metadata_check_finds_a_read_and_leaves_a_body_alone():
    tree = ast.parse('a = raw.get("metadata") or {}\nb = raw["metadata"]["name"]\nbody = {"metadata": {"name": "x"}}\n'
                     'body["metadata"] = {}\n')
    assert _raw_metadata_reads(tree) == [1, 2]
