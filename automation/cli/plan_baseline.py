"""`plan --baseline-ref REF`: the baseline planned by REF's own program on REF's files, in a temporary git worktree.

    git rev-parse REF ──► git worktree add --detach TMP REF ──► python -m automation plan (REF's program, REF's
    --hub and --clusters, the same policy and cache) > baseline.json ──► git worktree remove TMP

The working tree is never touched: the worktree is a separate checkout under a temporary folder (git records it in
.git/worktrees until it is removed, which happens whatever the outcome). The repository is the one that holds
--clusters; when that repository holds the program too (automation/ at REF), REF's program plans REF's files, so a
change to components/ or stacks/ shows what it does; otherwise (the cluster files live in a repository of their
own) this program plans REF's files. Either runs with this interpreter and its packages.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from stacks.errors import InvalidSpec
from stacks.hub_state import LIVE

PROGRAM = Path(__file__).resolve().parents[2]  # the checkout this program runs from
GIT_TIMEOUT_S = 120
PLAN_OK = (0, 3)  # 3: the baseline breaks a mandatory policy rule, and is still a whole plan
INVALID_INPUT = 2  # exit status of invalid input; with --keep-going, after the valid clusters are planned (REF's too)


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InvalidSpec.one("--baseline-ref", "", f"git {' '.join(args)}: {err}") from None
    if done.returncode != 0:
        raise InvalidSpec.one("--baseline-ref", "", f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _inside(path: Path, top: Path, flag: str) -> str:
    try:
        return path.relative_to(top).as_posix()
    except ValueError:
        raise InvalidSpec.one(f"{flag} {path}", "", f"outside the git repository {top}: REF's copy of it cannot "
                                                    f"be read (use --baseline with a plan made there)") from None


def plan_at_ref(ref: str, args: argparse.Namespace, out: Path) -> None:
    """Write REF's plan document (`--format json`) of the same --hub and --clusters to `out`."""
    clusters, hub = Path(args.clusters).resolve(), Path(args.hub).resolve()
    top = Path(_git(["rev-parse", "--show-toplevel"], clusters if clusters.is_dir() else clusters.parent)).resolve()
    rel_hub, rel_clusters = _inside(hub, top, "--hub"), _inside(clusters, top, "--clusters")
    commit = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], top)
    with tempfile.TemporaryDirectory(prefix="hubwright-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        _git(["worktree", "add", "--detach", "--quiet", str(tree), commit], top)
        try:
            program = tree if (tree / "automation" / "__main__.py").is_file() and \
                (top / "automation" / "__main__.py").is_file() else PROGRAM
            _run_plan(program, tree / rel_hub, tree / rel_clusters, args, out, ref)
        finally:
            _git(["worktree", "remove", "--force", str(tree)], top)


def _run_plan(program: Path, hub: Path, clusters: Path, args: argparse.Namespace, out: Path, ref: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(program), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "automation", "plan", "--hub", str(hub), "--clusters", str(clusters),
               "--format", "json", "--policy", args.policy, "--jobs", str(args.jobs)]
    if args.policy_config:
        command += ["--policy-config", str(Path(args.policy_config).resolve())]
    if args.discover:
        command.append("--discover")
    helps = subprocess.run([*command[:4], "--help"], cwd=program, env=env, capture_output=True, text=True,
                           timeout=GIT_TIMEOUT_S).stdout
    if "--no-cache" in helps:  # REF's program has the cache: it reads and fills the same one
        command += ["--no-cache"] if args.no_cache else ["--cache", str(Path(args.cache).resolve())]
    if args.hub_state is not None and "--hub-state" in helps:  # the same recorded order on both sides
        command += ["--hub-state", args.hub_state if args.hub_state == LIVE else str(Path(args.hub_state).resolve())]
    keep_going = args.keep_going and "--keep-going" in helps  # REF's invalid clusters are left out, not fatal
    if keep_going:
        command.append("--keep-going")
    whose = f"{ref}'s program" if program != PROGRAM else "this program"
    print(f"plan: the baseline: {whose} on {ref}'s files", file=sys.stderr)
    with open(out, "wb") as sink:
        done = subprocess.run(command, cwd=program, env=env, stdout=sink, stderr=subprocess.PIPE)
    if done.returncode not in PLAN_OK + ((INVALID_INPUT,) if keep_going else ()):
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-20:]
        raise InvalidSpec.one("--baseline-ref", ref, f"{ref}'s plan failed (exit {done.returncode}):\n    "
                                                     + "\n    ".join(tail))
