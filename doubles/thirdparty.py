"""Other projects' real CustomResourceDefinitions, as they publish them: not doubles, the things themselves.

``scripts/crds.sh`` (run by ``scripts/tools.sh``) reads them out of each project's Go module into
``.tools/crds/<project>/``; ``tools/crds/modules.txt`` pins the module, version and hash of each project and is
the one list of projects. Tests install them beside ours (``crds("cluster-api")`` for ``kubectl get clusters``,
``crds("prometheus-operator")`` for ServiceMonitor and PrometheusRule) and compare resource names with them::

    from doubles.thirdparty import crds
    install_crds(api, [c for c in crds("prometheus-operator")
                       if c["spec"]["names"]["kind"] in ("ServiceMonitor", "PrometheusRule")])

A project that was not fetched, or was fetched at another pinned version, raises :class:`MissingCRDs` naming
the script to run: never a skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRDS_DIR = ROOT / ".tools" / "crds"
MODULES = ROOT / "tools" / "crds" / "modules.txt"
FETCH_HINT = "run scripts/crds.sh (scripts/tools.sh runs it) to fetch them from the Go module proxy"



class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.1 as the API server reads it (its CRDs are megabytes: the C loader where there is one). A bare `=`
    (an enum value in the Prometheus Operator's CRDs) is a string, not PyYAML's unconstructable `!!value`."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


class MissingCRDs(FileNotFoundError):
    """A project's CRDs are not in .tools/crds at their pinned version."""


class Module(NamedTuple):
    """One line of tools/crds/modules.txt."""
    project: str
    module: str
    version: str
    sum: str
    files: tuple[str, ...]

    @property
    def source(self) -> str:
        """What scripts/crds.sh writes to .tools/crds/<project>/.source once it has extracted this module."""
        return f"{self.module}@{self.version} {self.sum} {','.join(self.files)}"


def modules() -> dict[str, Module]:
    """The pinned projects, by name, in the order of tools/crds/modules.txt."""
    found: dict[str, Module] = {}
    for number, line in enumerate(MODULES.read_text().splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 5:
            raise ValueError(f"{MODULES}:{number}: expected PROJECT MODULE VERSION SUM FILES, got {line!r}")
        project, module, version, digest, files = fields
        found[project] = Module(project, module, version, digest, tuple(files.split(",")))
    return found


def projects() -> list[str]:
    return list(modules())


def crd_files(project: str) -> list[Path]:
    """The CRD files of `project` in .tools/crds/<project>/, sorted; MissingCRDs when they are not there."""
    pinned = modules()
    if project not in pinned:
        raise KeyError(f"no project {project!r} in {MODULES.relative_to(ROOT)} "
                       f"(known: {', '.join(pinned)})")
    module = pinned[project]
    where = CRDS_DIR / project
    stamp = where / ".source"
    if not stamp.is_file():
        raise MissingCRDs(f"{project}'s CRDs ({module.module}@{module.version}) are not in {where}: {FETCH_HINT}")
    if stamp.read_text().strip() != module.source:
        raise MissingCRDs(f"{project}'s CRDs in {where} are from {stamp.read_text().split()[0]}, "
                          f"not the pinned {module.module}@{module.version}: {FETCH_HINT}")
    files = sorted(where.glob("*.yaml"))
    if not files:
        raise MissingCRDs(f"{where} holds no CRD file: {FETCH_HINT}")
    return files


def crds(project: str) -> list[dict]:
    """Every CustomResourceDefinition in `project`'s files, parsed, in file order, as published: the older
    modules the proxy serves (Hive's) are apiextensions.k8s.io/v1beta1, which no API server of today installs;
    their `spec.names` are what a name check needs."""
    found = []
    for path in crd_files(project):
        for doc in yaml.load_all(path.read_text(), Loader=_Loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found.append(doc)
    if not found:
        raise MissingCRDs(f"no CustomResourceDefinition in {CRDS_DIR / project}: {FETCH_HINT}")
    return found
