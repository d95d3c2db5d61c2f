"""What every source family's part reader shares (stacks.sources.families): a source's HubCluster spec and where
each value was read (Part), what the source asks for (Asks), how it reads the objects it names (Related), and
how a family says which ones it reads (Reads). Pure."""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Protocol

from stacks.model.hub import HubConfig
from stacks.sources.kinds import SourceKind, SourceRef
from stacks.sources.outcome import Pending, Refused

# related(kind, namespace, name): the object of that kind ("" namespace: a cluster-scoped one), or None when it is
# not there (yet).
Related = Callable[[SourceKind, str, str], Mapping[str, Any] | None]
# A HubCluster field path (a prefix) -> the source object and its field it was read from: a value the model
# refuses is named where it was written.
Provenance = dict[str, tuple[SourceRef, str]]
# The related objects a source object reads, as (kind, namespace, name).
Reads = Callable[[Mapping[str, Any]], list[tuple[SourceKind, str, str]]]


class Part(NamedTuple):
    """A source's HubCluster spec (without accountID, which the namespace decides) and where each part came from."""

    spec: dict[str, Any]
    provenance: Provenance


class Asks(NamedTuple):
    """What the source object's annotations ask of hubwright besides the cluster itself (stacks.sources.optin)."""

    privatelink: bool = False
    shared_ingress: bool = False


class PartOf(Protocol):
    def __call__(self, source: Mapping[str, Any], related: Related, /, *, hub: HubConfig, asks: Asks,
                 ref: SourceRef) -> Part | Refused | Pending: ...


def get(doc: Mapping[str, Any] | None, path: str) -> Any:
    """The value at a dotted path of a document, or None where any part is missing or not an object."""
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def text(value: Any) -> str | None:
    """A non-empty string as written, else None (a tenant's object is checked by no schema in a plan folder)."""
    return value if isinstance(value, str) and value else None
