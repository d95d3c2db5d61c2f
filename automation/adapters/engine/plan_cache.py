"""The plan's content-addressed cache: a stack planned once is not planned again while nothing it is made of moved.

    key = sha256(program digest, policy settings, output format, the stack's inputs)   plan_key()
    DIR/v1/<key[:2]>/<key>.json = {"key", "program", "stack", "cluster", "text", "outputs", "resources",
                                   "violations"}                                       PlanCache.get, put
    DIR/v1/fleets/<key>.json = {"key", "program", "stacks": [[stack, cluster, plan key], ...], "mesh",
                                "fleetViolations"}                                    PlanCache.fleet, put_fleet

The second is a fleet's last plan, keyed by everything it read (the hub file, every cluster file's path, size and
mtime: automation.adapters.files.inputs.fleet_stamp), the settings and the program: a plan of a fleet where nothing
moved reads neither a file nor resolves anything, it writes the stacks it wrote last time from the first.

The program digest (program_digest) hashes the source of every package a plan runs (components/, stacks/, policy/,
automation/) and requirements.txt (the Pulumi SDK and provider versions), so an entry written by another version of
the program is never read: its key is another file. An entry is read only when it names the same key and program
digest as the one asked for; a torn or foreign file is a miss, never an error.

What an entry says cannot be checked without planning the stack again, so a cache directory is only as trustworthy
as whoever can write to it: share one only among trusted writers (CI: one per branch; a pull request's job never
writes main's). Deleting the directory is always safe: the next plan is a cold one.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from automation.adapters.atomic import replacing
from policy.rules.view import Violation
from stacks.inputs import StackInputs
from stacks.transit import TransitInputs

FORMAT_VERSION = "v1"
ROOT = Path(__file__).resolve().parents[3]  # the repository: automation/adapters/engine/ is three below it
PROGRAM_PACKAGES = ("components", "stacks", "policy", "automation")
PROGRAM_FILES = ("requirements.txt", "__main__.py", "Pulumi.yaml")


def default_dir() -> Path:
    """$HUBWRIGHT_PLAN_CACHE, else $HUBWRIGHT_CACHE/plans, else $XDG_CACHE_HOME/hubwright/plans, else
    ~/.cache/hubwright/plans."""
    if os.environ.get("HUBWRIGHT_PLAN_CACHE"):
        return Path(os.environ["HUBWRIGHT_PLAN_CACHE"])
    if os.environ.get("HUBWRIGHT_CACHE"):
        return Path(os.environ["HUBWRIGHT_CACHE"]) / "plans"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hubwright" / "plans"


def _sources(root: Path) -> Iterable[Path]:
    for package in PROGRAM_PACKAGES:
        yield from sorted((root / package).rglob("*.py"))
    for name in PROGRAM_FILES:
        if (root / name).is_file():
            yield root / name


@lru_cache(maxsize=4)
def program_digest(root: Path = ROOT) -> str:
    """A hash of the program's own source: every .py file of the packages a plan runs, and the pinned versions."""
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    for path in _sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def plan_key(inputs: StackInputs | TransitInputs, *, program: str, policy: str, render: str) -> str:
    """What a stack's rendered plan is a function of. The whole inputs, the generation and mesh limits included
    (the service's digest leaves those out because they build nothing; a plan key must not have to know that)."""
    digest = hashlib.sha256()
    for part in (program, policy, render, type(inputs).__name__, inputs.model_dump_json()):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def fleet_key(stamp: str, *, program: str, policy: str, render: str, only: list[str] | None,
              held: Iterable[str] = ()) -> str:
    """What a fleet's whole plan is a function of, when read from unchanged files: their stamp
    (automation.adapters.files.inputs.fleet_stamp), the program, the policy settings, the format, --cluster and the
    clusters a baseline holds (stacks.resolve.Fleet.held)."""
    return hashlib.sha256(json.dumps([program, policy, render, only, stamp, sorted(held)]).encode()).hexdigest()


class PlanCache:
    """Rendered stacks by plan key, under `root`, written by any process (atomically: a reader sees a whole entry
    or none)."""

    def __init__(self, root: Path, program: str):
        self.root = Path(root)
        self.program = program
        self.hits = self.misses = 0

    def _path(self, key: str) -> Path:
        return self.root / FORMAT_VERSION / key[:2] / f"{key}.json"

    def holds(self, key: str) -> bool:
        """An entry is there (get() still checks it)."""
        return self._path(key).is_file()

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry's fields (text, outputs, resources, violations), or None: absent, torn, or not this key's and
        this program's."""
        try:
            entry = json.loads(self._path(key).read_bytes())
        except (OSError, ValueError):
            self.misses += 1
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or entry.get("program") != self.program \
                or not isinstance(entry.get("text"), str):
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def fleet(self, key: str) -> dict[str, Any] | None:
        """What the last plan of a fleet with this key (its files' stamps, the settings, the program) wrote: its
        stacks in order, each with its plan key, the mesh summary, the fleet-wide policy violations."""
        try:
            found = json.loads((self.root / FORMAT_VERSION / "fleets" / f"{key}.json").read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(found, dict) or found.get("key") != key or found.get("program") != self.program:
            return None
        stacks = found.get("stacks")
        if not isinstance(stacks, list) or not all(isinstance(s, list) and len(s) == 3 for s in stacks):
            return None
        return found

    def put_fleet(self, key: str, doc: dict[str, Any]) -> None:
        self._write(self.root / FORMAT_VERSION / "fleets" / f"{key}.json", {"key": key, "program": self.program, **doc})

    def put(self, key: str, *, stack: str, cluster: str, text: str, outputs: dict[str, Any], resources: int,
            violations: Iterable[Violation]) -> None:
        """One stack's rendered plan, under its key."""
        self._write(self._path(key), {"key": key, "program": self.program, "stack": stack, "cluster": cluster,
                                      "text": text, "outputs": outputs, "resources": resources,
                                      "violations": [violation_json(v) for v in violations]})

    @staticmethod
    def _write(path: Path, entry: dict[str, Any]) -> None:
        """Best effort: a cache that cannot be written (read-only, full) costs speed, never the plan."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path) as fh:
                json.dump(entry, fh, separators=(",", ":"))
        except OSError:
            pass


def violation_json(v: Violation) -> dict[str, Any]:
    return {"rule": v.rule, "urn": v.urn, "reason": v.reason, "level": v.level}


def violation_of(found: dict[str, Any]) -> Violation:
    return Violation(found["rule"], found["urn"], found["reason"], found["level"])


def violations_of(entry: dict[str, Any]) -> tuple[Violation, ...]:
    return tuple(violation_of(v) for v in entry.get("violations", ()))
