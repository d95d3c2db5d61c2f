"""Other projects' real CustomResourceDefinitions, as they publish them: not doubles, the things themselves.

``scripts/crds.sh`` (run by ``scripts/tools.sh``) reads them out of each project's Go module into
``.tools/crds/<project>/``; ``tools/crds/modules.txt`` pins the module, version and hash of each project and is
the one list of projects. Tests install them beside ours (``crds("cluster-api")`` for ``kubectl get clusters``,
``crds("prometheus-operator")`` for ServiceMonitor and PrometheusRule) and compare resource names with them.
A project whose module holds only Go types has its CRDs generated from them by controller-gen
(``scripts/crds-gen.sh``; ``tools/crds/generated.txt`` pins the module and the generator): ``crds("hive-apis")``
is Hive's ClusterDeployment, structural, as a hub running Hive serves it::

    from doubles.thirdparty import crds
    install_crds(api, [c for c in crds("prometheus-operator")
                       if c["spec"]["names"]["kind"] in ("ServiceMonitor", "PrometheusRule")])

A project that was not fetched, or was fetched at another pinned version, raises :class:`MissingCRDs` naming
the script to run: never a skip.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRDS_DIR = ROOT / ".tools" / "crds"
MODULES = ROOT / "tools" / "crds" / "modules.txt"
GENERATED = ROOT / "tools" / "crds" / "generated.txt"
FETCH_HINT = "run scripts/crds.sh (scripts/tools.sh runs it) to fetch them from the Go module proxy"
GENERATE_HINT = "run scripts/crds-gen.sh (scripts/tools.sh runs it) to generate them from the module's Go types"



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


class Generated(NamedTuple):
    """One line of tools/crds/generated.txt: CRDs generated from `module`'s Go types by `generator`."""
    project: str
    module: str
    version: str
    sum: str
    generator: str          # sigs.k8s.io/controller-tools@VERSION
    generator_sum: str
    packages: str           # controller-gen's paths=, inside the module
    files: tuple[str, ...]  # what is kept of what it writes

    @property
    def source(self) -> str:
        """What scripts/crds-gen.sh writes to .tools/crds/<project>/.source once it has generated them."""
        return (f"{self.module}@{self.version} {self.sum} {self.generator} {self.generator_sum} {self.packages} "
                f"{','.join(self.files)}")


def generated() -> dict[str, Generated]:
    """The projects whose CRDs are generated, by name, in the order of tools/crds/generated.txt."""
    found: dict[str, Generated] = {}
    for number, line in enumerate(GENERATED.read_text().splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 8:
            raise ValueError(f"{GENERATED}:{number}: expected PROJECT MODULE VERSION SUM GENERATOR GENSUM "
                             f"PACKAGES FILES, got {line!r}")
        project, module, version, digest, generator, generator_sum, packages, files = fields
        found[project] = Generated(project, module, version, digest, generator, generator_sum, packages,
                                   tuple(files.split(",")))
    return found


def projects() -> list[str]:
    """Every project: those whose CRDs are published, then those whose CRDs are generated."""
    return [*modules(), *generated()]


def crd_files(project: str) -> list[Path]:
    """The CRD files of `project` in .tools/crds/<project>/, sorted; MissingCRDs when they are not there."""
    pinned: dict[str, Module | Generated] = {**modules(), **generated()}
    if project not in pinned:
        raise KeyError(f"no project {project!r} in {MODULES.relative_to(ROOT)} or {GENERATED.relative_to(ROOT)} "
                       f"(known: {', '.join(pinned)})")
    module = pinned[project]
    hint = GENERATE_HINT if isinstance(module, Generated) else FETCH_HINT
    where = CRDS_DIR / project
    stamp = where / ".source"
    if not stamp.is_file():
        raise MissingCRDs(f"{project}'s CRDs ({module.module}@{module.version}) are not in {where}: {hint}")
    if stamp.read_text().strip() != module.source:
        raise MissingCRDs(f"{project}'s CRDs in {where} are from {stamp.read_text().split()[0]}, "
                          f"not the pinned {module.module}@{module.version}"
                          f"{f' by {module.generator}' if isinstance(module, Generated) else ''}: {hint}")
    files = sorted(where.glob("*.yaml"))
    if not files:
        raise MissingCRDs(f"{where} holds no CRD file: {hint}")
    return files


def crds(project: str) -> list[dict]:
    """Every CustomResourceDefinition in `project`'s files, parsed, in file order, as published: the older
    modules the proxy serves (Hive's) are apiextensions.k8s.io/v1beta1, which no API server of today installs;
    their `spec.names` are what a name check needs."""
    found = []
    for path in crd_files(project):
        for doc in _documents(path):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found.append(doc)
    if not found:
        hint = GENERATE_HINT if project in generated() else FETCH_HINT
        raise MissingCRDs(f"no CustomResourceDefinition in {CRDS_DIR / project}: {hint}")
    return found


def _documents(path: Path) -> list[Any]:
    """The YAML documents of `path`, parsed once per content: the parse is kept as JSON beside the file
    (`.parsed/<file>.<digest>.json`, which json reads 14 times faster than the C loader reads the YAML: 0.7 s, not
    9.5 s, for every project's CRDs). Kept only when JSON gives back exactly what YAML gave (no dates, no integer
    keys); written under a name of its own, then renamed, so parallel test workers never read half a file."""
    text = path.read_text()
    cache = path.parent / ".parsed" / f"{path.name}.{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    try:
        return list(json.loads(cache.read_text()))
    except (OSError, ValueError):
        pass
    docs = list(yaml.load_all(text, Loader=_Loader))
    try:
        encoded = json.dumps(docs)
        if json.loads(encoded) != docs:
            return docs
        cache.parent.mkdir(exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(encoded)
        partial.replace(cache)
    except (OSError, TypeError, ValueError):  # a read-only checkout, a value JSON cannot hold: parse each time
        pass
    return docs
