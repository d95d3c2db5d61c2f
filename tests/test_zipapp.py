"""The CLI as one file (scripts/zipapp.sh): hubwright-<version>.pyz runs outside the checkout, in a fresh
environment (no PYTHONPATH, no venv, the system's Python 3.11), prints the same plan as the checkout, runs the
pull-request job (docs/plan.md), and runs its own code whatever the user's environment holds, installing nothing there.

The zipapp is built once for the module; every run extracts into a $SHIV_ROOT of the test's (never ~/.shiv).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.release import NAME, version
from tests.release_build import Release, release_dist  # noqa: F401 - the fixture
from tests.test_plan_baseline import committed, git

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"  # what a CI runner or a laptop has, not this venv's
PLAN = ["plan", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters"]  # ./dev plan's fleet
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def zipapp(release_dist: Release) -> Path:  # noqa: F811
    """The release's zipapp (scripts/zipapp.sh, run by make release)."""
    built = release_dist.dist / f"{NAME}-{version()}.pyz"
    assert built.is_file(), f"make release wrote no {built.name}"
    return built


@pytest.fixture(scope="module")
def python() -> str:
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                          text=True)
    assert done.stdout.strip() == "(3, 11)", f"{SYSTEM_PYTHON} must be CPython 3.11 for the zipapp: {done}"
    return SYSTEM_PYTHON


@pytest.fixture(scope="module")
def shiv_root(tmp_path_factory) -> Path:
    """Where the module's runs extract the zipapp (once: the first run's folder is reused)."""
    return tmp_path_factory.mktemp("shiv")


def fresh_env(home: Path, shiv_root: Path, **more: str) -> dict[str, str]:
    """A clean environment, as a CI step or a new terminal has it: nothing of this checkout or of its venv."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "SHIV_ROOT": str(shiv_root), **more}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=RUN_TIMEOUT_S)


def outside(tmp_path: Path) -> Path:
    """A folder outside the checkout holding copies of the bundled examples."""
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    assert not work.resolve().is_relative_to(ROOT)
    return work


# --------------------------------------------------------------------------- the version and the plan

def test_the_zipapp_prints_the_one_version(zipapp, python, shiv_root, tmp_path):
    done = run([python, str(zipapp), "--version"], tmp_path, fresh_env(tmp_path / "home", shiv_root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"{NAME} {version()}\n"


def test_plan_outside_the_checkout_prints_the_checkouts_bytes(zipapp, python, shiv_root, tmp_path):
    work = outside(tmp_path)
    env = fresh_env(tmp_path / "home", shiv_root)
    for extra in ([], ["--format", "tree"]):
        ours = subprocess.run([sys.executable, "-m", "automation", *PLAN, *extra, "--no-cache"], cwd=ROOT,
                              capture_output=True, timeout=RUN_TIMEOUT_S)
        assert ours.returncode == 0, ours.stderr
        for attempt in ("planned", "from the plan cache"):  # the second run reads ~/.cache/hubwright/plans
            done = run([python, str(zipapp), *PLAN, *extra], work, env)
            assert done.returncode == 0, (attempt, done.stderr)
            assert done.stdout == ours.stdout, attempt
    assert (tmp_path / "home" / ".cache" / "hubwright" / "plans").is_dir()


# --------------------------------------------------------------------------- docs/plan.md's pull-request job

def test_the_documented_pull_request_job_runs_with_the_zipapp_outside_the_checkout(zipapp, python, shiv_root,
                                                                                  tmp_path):
    """docs/plan.md's block, run as written with the release's file in a repository of cluster files whose
    origin/main has the mesh example (no checkout of hubwright, nothing installed): the comment it writes is the
    one the doc shows. --baseline-ref plans origin/main in a worktree with the zipapp's own packages."""
    from tests.docblocks import blocks, script, section

    heading = "Pull requests: what a change does to the fleet"
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "mesh", repo / "examples" / "mesh")
    committed(repo)
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    shutil.copy(zipapp, repo / zipapp.name)  # where the job's `gh release download` puts it
    env = fresh_env(tmp_path / "home", shiv_root, HUBWRIGHT_VERSION=version())
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script(blocks(ROOT / "docs" / "plan.md", heading))], cwd=repo,
                          env={**env, "PATH": f"{Path(python).parent}:{env['PATH']}"}, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    body, _ = section((ROOT / "docs" / "plan.md").read_text(encoding="utf-8"), heading)
    shown = body.split("````markdown\n", 1)[1].split("````", 1)[0]
    assert (repo / "plan-diff.md").read_text() == shown
    assert "globex.ledger-euw1b" in shown and "| payments | changed | members | `4` | `5` |" in shown
    assert "plan: the baseline: this program on origin/main's files" in done.stderr, done.stderr


# --------------------------------------------------------------------------- isolation: the attack first

MARKED = """import os, pathlib
pathlib.Path(os.environ["MARKERS"], __name__).touch()  # imported: the user's code ran
"""


def users_packages(folder: Path) -> Path:
    """Top-level packages of the user's named as ours (and as one of our dependencies), each leaving a marker
    when imported and answering with HIJACKED where ours would answer."""
    for package, modules in {
        "stacks": {"release.py": 'NAME = "HIJACKED"\ndef version():\n    return "HIJACKED"\n'},
        "automation": {"cli/__init__.py": MARKED + 'def main(argv=None):\n    print("HIJACKED")\n    return 0\n',
                       "__main__.py": 'print("HIJACKED")\n'},
        "components": {},
        "policy": {},
        "yaml": {},
    }.items():
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(MARKED)
        for name, text in modules.items():
            (folder / package / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / package / name).write_text(text)
    return folder


def users_venv(tmp_path: Path, python: str) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    users_packages(Path(site))
    return venv


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if not p.is_dir()}


def test_the_users_packages_on_pythonpath_never_run(zipapp, python, shiv_root, tmp_path):
    """shiv alone puts its site-packages after PYTHONPATH: the user's `stacks` and `automation` would win."""
    markers = tmp_path / "markers"
    markers.mkdir()
    user = users_packages(tmp_path / "user")
    work = outside(tmp_path)
    env = fresh_env(tmp_path / "home", shiv_root, PYTHONPATH=str(user), MARKERS=str(markers))
    done = run([python, str(zipapp), "--version"], work, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"{NAME} {version()}\n"
    plain = run([python, str(zipapp), *PLAN], work, fresh_env(tmp_path / "home", shiv_root))
    done = run([python, str(zipapp), *PLAN, "--no-cache"], work, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain.stdout and b"HIJACKED" not in done.stdout
    assert sorted(p.name for p in markers.iterdir()) == []


def test_the_users_packages_in_a_venv_never_run_and_the_venv_is_left_as_it_was(zipapp, python, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    venv = users_venv(tmp_path, python)
    before = tree(venv)
    home, root = tmp_path / "home", tmp_path / "shiv"
    env = fresh_env(home, root, VIRTUAL_ENV=str(venv), PATH=f"{venv}/bin:/usr/bin:/bin", MARKERS=str(markers))
    for _ in range(2):  # the first run extracts, the second reuses
        done = run([str(venv / "bin" / "python"), str(zipapp), "--version"], tmp_path, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode() == f"{NAME} {version()}\n"
    assert sorted(p.name for p in markers.iterdir()) == []
    # Nothing installed: the venv and the home folder are as they were; the one folder written is $SHIV_ROOT's.
    assert tree(venv) == before
    assert list(home.iterdir()) == []
    extracted = [p for p in root.iterdir() if p.is_dir()]  # beside it only shiv's lock file
    assert len(extracted) == 1 and extracted[0].name.startswith(f"{zipapp.name}_"), extracted
    assert (extracted[0] / "site-packages" / "pyproject.toml").is_file()


def test_a_user_module_imported_before_ours_is_replaced_by_ours(zipapp, python, shiv_root, tmp_path):
    """A user's sitecustomize imports its own `stacks` at startup, before shiv's bootstrap: ours still runs."""
    markers = tmp_path / "markers"
    markers.mkdir()
    user = users_packages(tmp_path / "user")
    (user / "sitecustomize.py").write_text("import stacks.release\n")
    env = fresh_env(tmp_path / "home", shiv_root, PYTHONPATH=str(user), MARKERS=str(markers))
    done = run([python, str(zipapp), "--version"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"{NAME} {version()}\n"
    assert [p.name for p in markers.iterdir()] == ["stacks"]  # the user's ran at startup; ours answered
