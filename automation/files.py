"""Reading a hub and a folder of clusters from YAML files (the plan's and the CLI's input)."""
from __future__ import annotations

import os

from stacks.errors import FieldError, InvalidSpec
from stacks.model import Cluster, HubConfig, Namespace, load_documents, read_documents
from stacks.resolve import Fleet


def yaml_files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(path)
            for name in names
            if name.endswith((".yaml", ".yml"))
        )
    if not os.path.exists(path):
        raise InvalidSpec.one(path, "(path)", "no such file or folder")
    return [path]


def load_fleet(hub_path: str, clusters_path: str, invalid: list[FieldError] | None = None) -> Fleet:
    """The HubConfig from one file; Clusters (and Namespaces, for their annotations) from a file or folder.

    Invalid cluster files raise, unless `invalid` is given: then their errors are appended to it and the
    valid clusters still load, so a caller can report every problem of the fleet at once.
    """
    hubs = [o for o in load_documents(yaml_files(hub_path)) if isinstance(o, HubConfig)]
    if len(hubs) != 1:
        raise InvalidSpec.one(hub_path, "kind", f"expected exactly one HubConfig, found {len(hubs)}")
    objects, errors = read_documents(yaml_files(clusters_path))
    if errors and invalid is None:
        raise InvalidSpec(errors)
    (invalid if invalid is not None else []).extend(errors)
    clusters = tuple(o for o in objects if isinstance(o, Cluster))
    keys = [c.key for c in clusters]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise InvalidSpec.one(clusters_path, "metadata", f"clusters defined more than once: {', '.join(dupes)}")
    namespaces = {o.metadata.name: dict(o.metadata.annotations) for o in objects if isinstance(o, Namespace)}
    return Fleet(hub=hubs[0], clusters=clusters, namespaces=namespaces)
