"""Reading a hub and a folder of clusters from YAML files (the plan's and the CLI's input)."""
from __future__ import annotations

import os

from stacks.errors import InvalidSpec
from stacks.model import Cluster, HubConfig, Namespace, load_documents
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


def load_fleet(hub_path: str, clusters_path: str) -> Fleet:
    """The HubConfig from one file; Clusters (and Namespaces, for their annotations) from a file or folder."""
    hubs = [o for o in load_documents(yaml_files(hub_path)) if isinstance(o, HubConfig)]
    if len(hubs) != 1:
        raise InvalidSpec.one(hub_path, "kind", f"expected exactly one HubConfig, found {len(hubs)}")
    objects = load_documents(yaml_files(clusters_path))
    clusters = tuple(o for o in objects if isinstance(o, Cluster))
    keys = [c.key for c in clusters]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise InvalidSpec.one(clusters_path, "metadata", f"clusters defined more than once: {', '.join(dupes)}")
    namespaces = {o.metadata.name: dict(o.metadata.annotations) for o in objects if isinstance(o, Namespace)}
    return Fleet(hub=hubs[0], clusters=clusters, namespaces=namespaces)
