"""Reading a hub and a folder of clusters from YAML files (the plan's and the CLI's input).

A folder may hold Cluster API, CAPA and Hive objects beside ours (docs/sources.md): they are never parsed as
ours; each opted-in source object's HubCluster is derived with stacks.sources.derive, the service's own, and a
refused or pending one is named among the errors, never dropped.

Files come from people, so every way a file can be bad ends in an InvalidSpec naming the file and the reason,
never in a traceback or a hang: missing paths, broken or looping symbolic links, files that are not UTF-8, too
large, nested too deep, YAML whose aliases expand past a bound ("billion laughs"), numbers Python will not
parse, documents that are not objects. Anything that is not a regular file (a FIFO, a socket, a device) is
skipped without being opened.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from yaml.composer import Composer

from automation.adapters.files.parsed import RACY_NS, ParsedFiles
from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.model.resource import Namespace
from stacks.names import OWNER_ACCOUNT_ANNOTATION
from stacks.resolve import Fleet
from stacks.sources.derive import derive
from stacks.sources.families import SOURCES, kind_of, of_source_project
from stacks.sources.kinds import NAMESPACE, SourceKind
from stacks.sources.part import get
from stacks.sources.optin import source_namespace, overrides_source
from stacks.sources.outcome import Derived, Pending
from stacks.transit import MeshStatus

MAX_FILE_BYTES = 1 << 20  # 1 MiB, about a Kubernetes object's own limit (etcd's request size)
MAX_DEPTH = 64  # nesting of mappings and lists in one document
MAX_NODES = 100_000  # values in one file once aliases are expanded
MAX_NUMBER_CHARS = 100  # a Kubernetes integer is at most 20 characters
SUFFIXES = (".yaml", ".yml")

Objects = list[HubConfig | Cluster | Namespace]
Sourced = list[tuple[HubConfig | Cluster | Namespace, str]]  # each object with where it was read
Foreign = list[tuple[dict, str]]  # Cluster API's, its providers' and Hive's objects, with where they were read


class _BadFile(Exception):
    """Why one file cannot be read; becomes FieldError(path, "", reason): the file is the object."""


# --------------------------------------------------------------------------- finding files

def _link_problem(path: str) -> str | None:
    """Why `path` cannot be followed, or None (it exists, through any links)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(path):
            return "a symbolic link that points nowhere"
        return "no such file or folder" if exc.errno == errno.ENOENT else exc.strerror or str(exc)
    return None


def yaml_files(path: str) -> tuple[list[str], list[FieldError]]:
    """The regular *.yaml/*.yml files at `path` (a file or a folder, walked without following folder links),
    sorted, and an error for every one that cannot be followed. Other kinds of files are left unopened."""
    problem = _link_problem(path)
    if problem is not None:
        return [], [FieldError(path, "", problem)]
    if not os.path.isdir(path):
        return ([path], []) if stat.S_ISREG(os.stat(path).st_mode) else \
            ([], [FieldError(path, "", "not a regular file or a folder")])
    found, errors = [], []

    def unreadable(exc: OSError) -> None:
        errors.append(FieldError(exc.filename or path, "", exc.strerror or str(exc)))

    for root, _, names in os.walk(path, onerror=unreadable):
        for name in names:
            if not name.endswith(SUFFIXES):
                continue
            full = os.path.join(root, name)
            problem = _link_problem(full)
            if problem is not None:
                errors.append(FieldError(full, "", problem))
            elif stat.S_ISREG(os.stat(full).st_mode):
                found.append(full)
    return sorted(found), errors


# --------------------------------------------------------------------------- reading one file

def fleet_stamp(hub_path: str, files: list[str]) -> str | None:
    """A digest of what a plan reads from files: the hub file's bytes, and `files` (the YAML files of the clusters'
    folder, as yaml_files lists them) by path, size and mtime. None when one of them cannot be read, or was written in
    the last RACY_NS (a second edit of the same size within the file system's timestamp granularity would not move
    its stamp)."""
    hubs, hub_errors = yaml_files(hub_path)  # a FIFO or a device is never opened
    if hub_errors or hubs != [hub_path]:
        return None
    digest = hashlib.sha256()
    young = time.time_ns() - RACY_NS
    try:
        with open(hub_path, "rb") as fh:
            digest.update(fh.read(MAX_FILE_BYTES + 1) + b"\0")
        for path in [hub_path, *files]:
            st = os.stat(path)
            if st.st_mtime_ns > young:
                return None
            digest.update(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    except OSError:
        return None
    return digest.hexdigest()


def _read_text(path: str) -> str:
    # O_NONBLOCK: a FIFO swapped in after the check above still cannot block the open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise _BadFile("not a regular file")
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise _BadFile(f"larger than {MAX_FILE_BYTES // (1 << 20)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadFile(f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


class _Bounded(Composer):
    """Measures each value as it is composed, before anything is built from it (mixed into a loader).

    An alias (a merge key `<<: *x` too) counts as the whole value it names, so an alias bomb, which costs
    exponential work or memory once built, is refused after a few thousand steps; literal nesting is refused
    at MAX_DEPTH + 1 levels, before the composer's recursion can get deep."""

    check_event: Callable[..., bool]  # the loader's parser (Parser, or libyaml's CParser) gives it

    def _start_measuring(self) -> None:
        self._ancestors = 0  # values around the one being composed
        self._measured: dict[yaml.Node, tuple[int, int]] = {}  # value -> (values, levels), aliases expanded
        self._total = 0  # values of the documents composed so far

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        alias = self.check_event(yaml.AliasEvent)
        if self._ancestors >= MAX_DEPTH + 1:
            raise _BadFile(f"nested deeper than {MAX_DEPTH} levels")
        self._ancestors += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._ancestors -= 1
        if node is None:  # Composer's type allows it; PyYAML's composer always gives a node
            return None
        if alias and node not in self._measured:
            raise _BadFile("a YAML alias inside the value it names")
        values, levels = self._measured.get(node) or self._measure(node)
        if self._ancestors + levels - 1 > MAX_DEPTH:
            raise _BadFile(f"nested deeper than {MAX_DEPTH} levels")
        if self._ancestors == 0:
            self._total += values
            values = self._total
        if values > MAX_NODES:
            raise _BadFile(f"more than {MAX_NODES:,} values once YAML aliases are expanded")
        return node

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes = [self._measured[c] for c in children]  # each was measured as it was composed
        self._measured[node] = (1 + sum(v for v, _ in sizes), 1 + max((lv for _, lv in sizes), default=0))
        return self._measured[node]


class _BoundedLoader(_Bounded, yaml.SafeLoader):
    """The pure-Python SafeLoader, measured (where PyYAML was built without libyaml)."""

    def __init__(self, stream: str):
        yaml.SafeLoader.__init__(self, stream)
        self._start_measuring()


if yaml.__with_libyaml__:
    class _BoundedCLoader(_Bounded, Composer, yaml.CSafeLoader):
        """libyaml's parser (about 6 times faster) under the Python composer, measured.

        Not libyaml's composer: it builds the whole tree in C, recursing once per level, so a file of deep
        nesting overflows the C stack (a crash, not an error). Its events come from a parser with a stack of
        its own; composing them here keeps the bounds above."""

        def __init__(self, stream: str):
            yaml.CSafeLoader.__init__(self, stream)  # libyaml's parser, the safe constructor, the resolver
            Composer.__init__(self)
            self._start_measuring()

    class _PlainCLoader(yaml.CSafeLoader):
        """libyaml end to end (its composer too): only for text `_plain` has walked (shallow, no aliases)."""

    LOADERS: tuple[type[yaml.SafeLoader | yaml.CSafeLoader], ...] = (_BoundedCLoader, _BoundedLoader)
else:  # pragma: no cover - PyYAML without libyaml
    LOADERS = (_BoundedLoader,)


def _bounded_number(kind: str):
    """A constructor refusing long numbers: a 1 MiB sexagesimal integer (1:2:3:...) takes minutes to build."""
    build = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]

    def construct(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _BadFile(f"a number longer than {MAX_NUMBER_CHARS} characters")
        return build(loader, node)

    return construct


for _loader in (*LOADERS, *([_PlainCLoader] if yaml.__with_libyaml__ else [])):
    for _kind in ("int", "float"):
        _loader.add_constructor(f"tag:yaml.org,2002:{_kind}", _bounded_number(_kind))


_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _plain(text: str) -> bool:
    """True when libyaml may compose `text` itself: its events (cheap: libyaml's parser keeps a stack of its own)
    show no alias, nesting within MAX_DEPTH and at most MAX_NODES values. Anything else, a parse error included,
    goes through the measuring composer, which says what is wrong."""
    depth = values = 0
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.AliasEvent):
                return False
            if isinstance(event, _OPENS):
                depth += 1
                values += 1
                if depth > MAX_DEPTH:
                    return False
            elif isinstance(event, _CLOSES):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                values += 1
    except yaml.YAMLError:
        return False
    return values <= MAX_NODES


def _documents(path: str) -> list[dict]:
    text = _read_text(path)
    fast = LOADERS[0] is not LOADERS[-1] and _plain(text)  # libyaml here, and not told to use one loader only
    try:
        docs = [d for d in yaml.load_all(text, Loader=_PlainCLoader if fast else LOADERS[0]) if d is not None]
    except yaml.YAMLError as exc:
        raise _BadFile(f"not valid YAML: {exc}") from None
    except RecursionError:  # not expected past _BoundedLoader's depth bound; kept as a last guard
        raise _BadFile(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. a date like 2024-13-45
        raise _BadFile(f"a value YAML cannot read: {str(exc).splitlines()[0]}") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise _BadFile(f"document {i + 1} is a {type(doc).__name__}, not a Kubernetes object")
    return docs


def _read_sourced(path: str, parsed: ParsedFiles | None = None) -> tuple[Sourced, Foreign, list[FieldError]]:
    """Every valid object of ours at `path` with where it was read ("file, document N"), the source projects'
    objects (never parsed as ours), and the errors. `parsed`: files read before, by path, size and mtime."""
    files, errors = yaml_files(path)
    if not files and not errors:
        errors.append(FieldError(path, "", "no YAML files (*.yaml, *.yml) there"))
    objects: Sourced = []
    foreign: Foreign = []
    for file in files:
        docs = parsed.get(file) if parsed is not None else None
        if docs is None:
            try:
                docs = _documents(file)
            except (_BadFile, OSError) as exc:
                reason = str(exc) if isinstance(exc, _BadFile) else exc.strerror or str(exc)
                errors.append(FieldError(file, "", reason))
                continue
            if parsed is not None:
                parsed.put(file, docs)
        for i, doc in enumerate(docs):
            if of_source_project(doc):  # by apiVersion: a Cluster API Cluster is not ours, whatever its kind
                foreign.append((doc, f"{file}, document {i + 1}"))
                continue
            try:
                objects.append((parse(doc, source=file), f"{file}, document {i + 1}"))
            except InvalidSpec as exc:
                errors.extend(exc.errors)
    return objects, foreign, errors


def read_documents(path: str) -> tuple[Objects, list[FieldError]]:
    """Every valid object in the YAML files at `path`, and the errors of the files and objects that are not."""
    sourced, _, errors = _read_sourced(path)
    return [obj for obj, _ in sourced], errors


def _duplicates(sourced: Sourced) -> list[FieldError]:
    """One error per object defined more than once (same kind, namespace and name), naming every place: a
    Cluster twice, or a Namespace twice with different annotations (which owner account would be meant?)."""
    places: dict[str, Sourced] = {}
    for obj, where in sourced:
        if isinstance(obj, (Cluster, Namespace)):
            places.setdefault(obj.ref, []).append((obj, where))
    return [FieldError(ref, "metadata.name", f"defined {len(found)} times: in {' and in '.join(w for _, w in found)}")
            for ref, found in sorted(places.items())
            if len(found) > 1 and (ref.startswith("HubCluster ")
                                   or len({tuple(sorted(o.metadata.annotations.items())) for o, _ in found}) > 1)]


def load_documents(path: str) -> Objects:
    """The objects at `path`; every problem of every file raised at once."""
    objects, errors = read_documents(path)
    if errors:
        raise InvalidSpec(errors)
    return objects


def load_hub(path: str) -> HubConfig:
    hubs = [o for o in load_documents(path) if isinstance(o, HubConfig)]
    if len(hubs) != 1:
        raise InvalidSpec.one(path, "kind", f"expected exactly one HubConfig, found {len(hubs)}")
    return hubs[0]


# --------------------------------------------------------------------------- cluster sources

def _derived(hub: HubConfig, foreign: Foreign, namespaces: dict[str, Namespace]) -> tuple[Sourced, list[FieldError]]:
    """The HubClusters of the folder's opted-in source objects (stacks.sources.derive, as the service derives them:
    the account is the namespace's owner account), and an error for each refused or pending one. A source reads the
    folder's Namespaces as the service reads the API server's (HyperShift's control-plane namespace)."""
    index: dict[tuple[SourceKind, str, str], dict] = {}
    for doc, _ in foreign:
        kind, namespace, name = kind_of(doc), source_namespace(doc), get(doc, "metadata.name")
        if kind is not None and namespace is not None and isinstance(name, str):
            index[(kind, namespace, name)] = doc

    def related(kind: SourceKind, namespace: str, name: str) -> dict | None:
        if kind == NAMESPACE:
            found = namespaces.get(name)
            return None if found is None else {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": name, "labels": dict(found.metadata.labels), "annotations": dict(found.metadata.annotations)}}
        return index.get((kind, namespace, name))

    clusters: Sourced = []
    errors: list[FieldError] = []
    for doc, where in foreign:
        if kind_of(doc) not in SOURCES:
            continue
        ns = namespaces.get(source_namespace(doc) or "default")
        owner = ns.metadata.annotations.get(OWNER_ACCOUNT_ANNOTATION) if ns is not None else None
        outcome = derive(doc, related, owner_account=owner, hub=hub)
        if isinstance(outcome, Derived):
            clusters.append((outcome.cluster, f"{where} ({outcome.source})"))
        elif isinstance(outcome, Pending):  # the plan cannot wait: named, not planned
            errors.extend(FieldError(e.obj, e.field, f"not ready: {e.reason}") for e in outcome.error.errors)
        elif outcome is not None:
            errors.extend(outcome.errors)
    return clusters, errors


def _with_sources(sourced: Sourced, derived: Sourced) -> Sourced:
    """Ours and the derived HubClusters: where both name one cluster, the hand-written one wins only when it says
    so (stacks.sources.optin.overrides_source); otherwise the derived one replaces it, as in the service."""
    keep = {o.key for o, _ in sourced if isinstance(o, Cluster) and overrides_source(o.metadata.annotations)}
    replaced = {c.key for c, _ in derived if isinstance(c, Cluster)} - keep
    return [*((o, w) for o, w in sourced if not (isinstance(o, Cluster) and o.key in replaced)),
            *((c, w) for c, w in derived if isinstance(c, Cluster) and c.key not in keep)]


# --------------------------------------------------------------------------- a fleet

def load_fleet(hub_path: str, clusters_path: str, invalid: list[FieldError] | None = None,
               cache_dir: Path | None = None) -> Fleet:
    """The HubConfig from one file; Clusters (and Namespaces, for their annotations) from a file or folder.

    Invalid cluster files raise, unless `invalid` is given: then their errors are appended to it and the
    valid clusters still load, so a caller can report every problem of the fleet at once. With `cache_dir`, the
    folder's unchanged files are not parsed again (automation.adapters.files.parsed).
    """
    hub = load_hub(hub_path)
    parsed = ParsedFiles(cache_dir, clusters_path) if cache_dir is not None else None
    sourced, foreign, errors = _read_sourced(clusters_path, parsed)
    if parsed is not None:
        parsed.save()
    folder_namespaces = {o.metadata.name: o for o, _ in sourced if isinstance(o, Namespace)}
    namespaces = {name: dict(o.metadata.annotations) for name, o in folder_namespaces.items()}
    derived, refused = _derived(hub, foreign, folder_namespaces)
    errors.extend(refused)
    sourced = _with_sources(sourced, derived)
    objects = [obj for obj, _ in sourced]
    if errors and invalid is None:
        raise InvalidSpec(errors)
    (invalid if invalid is not None else []).extend(errors)
    clusters = tuple(o for o in objects if isinstance(o, Cluster))
    if not clusters and not errors:
        raise InvalidSpec.one(clusters_path, "", "no Cluster objects there")
    dupes = _duplicates(sourced)
    if dupes:  # which of the two is meant cannot be guessed: nothing is planned, every problem is named
        raise InvalidSpec([*errors, *dupes])
    # The hub file's status.mesh, when it has one (a copy of the live HubConfig): the groups' recorded states.
    return Fleet(hub=hub, clusters=clusters, namespaces=namespaces, mesh_status=MeshStatus.from_hub_status(hub.status))
