"""The shared ingress's rules: who may be routed, on which ID, to which backend. Pure.

One function owns each rule, and `stacks.resolve.resolve_all` applies them for the plan, the service and
`ingress render` alike (docs/shared-ingress.md, docs/security.md):

- `cluster_id_of`, `id_error`, `claim_ids`: the cluster ID is the one recorded when it was first routed, else a
  clusterID its namespace may use, else "<namespace>.<name>"; a safe map key; one cluster's (the routed one's,
  else the oldest claimant's);
- `backend_error`: the central proxy dials the backend only where the hub administrator allows
  (HubConfig spec.sharedIngress.allowedBackends, narrowed by the namespace's hubwright.io/allowed-backends)
  and never at itself, loopback, link-local metadata or the management cluster's API server;
- `ingress_error`: all of a cluster's own shared-ingress checks, in the order a user fixes them.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable, Mapping

from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.names import (ALLOWED_BACKENDS_ANNOTATION, CLUSTER_ID, CLUSTER_ID_PREFIXES_ANNOTATION, INGRESS_STATUS_KEY,
                          Host, default_cluster_id, parse_host_port, under)
from stacks.tenancy import allowed_backends, cluster_namespace


BACKEND_NOT_ALLOWED = "BackendNotAllowed"  # condition reason
NO_SHARED_INGRESS = "NoSharedIngress"
ID_NOT_ALLOWED = "ClusterIDNotAllowed"

# AWS's IPv6 link-local services (instance metadata fd00:ec2::254, DNS ::253, time ::123): not link-local
# to Python, as dangerous as 169.254.169.254.
_AWS_IPV6_SERVICES = ipaddress.IPv6Network("fd00:ec2::/32")


@dataclass(frozen=True)
class Route:
    """One cluster behind the central proxy."""

    cluster_id: str
    backend: str  # host:port of the cluster's API server, reachable from the central proxy
    allowed_source_cidrs: tuple[str, ...] = ()  # matched against the PROXY header's source address
    cluster: str = ""  # namespace/name, written as a comment


def route_of(cluster: Cluster) -> Route:
    spec = cluster.spec.shared_ingress
    return Route(cluster_id=cluster_id_of(cluster), backend=spec.backend or "", cluster=cluster.key,
                 allowed_source_cidrs=tuple(spec.allowed_source_cidrs))


# --------------------------------------------------------------------------- IDs

def recorded_id(cluster: Cluster) -> str | None:
    """The ID the cluster was routed on, as the service recorded it in status.sharedIngress.clusterID (or None).
    Only the service writes a Cluster's status (tenants have no hubclusters/status), so it is a fact, like
    status.outputs.endpointVPC: once routed, a cluster keeps its ID whatever the rules below become."""
    record = (cluster.status or {}).get(INGRESS_STATUS_KEY)
    value = record.get("clusterID") if isinstance(record, Mapping) else None
    return value if isinstance(value, str) and CLUSTER_ID.fullmatch(value) else None


def cluster_id_of(cluster: Cluster) -> str:
    """The ID the guest sends and the central proxy routes on: the one recorded when it was first routed, else
    spec.sharedIngress.clusterID, else "<namespace>.<name>" (stacks.names.default_cluster_id)."""
    return recorded_id(cluster) or cluster.spec.shared_ingress.cluster_id \
        or default_cluster_id(cluster_namespace(cluster), cluster.metadata.name)


def id_prefixes(cluster: Cluster, annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The prefixes an explicit clusterID of the cluster may start with: "<namespace>." (a namespace name has no
    '.', so no other namespace's IDs start so), and those the hub administrator lists in the namespace's
    hubwright.io/cluster-id-prefixes annotation. A granted prefix covers only IDs without a '.': every default
    ID has one, so no grant reaches another namespace's defaults (acme granted "edge-" cannot take edge-x.prod)."""
    namespace = cluster_namespace(cluster)
    granted = (part.strip() for part in (annotations.get(CLUSTER_ID_PREFIXES_ANNOTATION) or "").split(","))
    return (f"{namespace}.", *(prefix for prefix in granted if prefix))


def _allowed(cluster_id: str, namespace: str, prefixes: tuple[str, ...]) -> bool:
    if cluster_id.startswith(f"{namespace}."):
        return True
    return "." not in cluster_id and any(cluster_id.startswith(prefix) for prefix in prefixes)


def _format_error(cluster: Cluster) -> FieldError | None:
    cluster_id = cluster_id_of(cluster)
    if CLUSTER_ID.fullmatch(cluster_id):
        return None
    return FieldError(cluster.ref, "spec.sharedIngress.clusterID",
                      f"{cluster_id!r} is not a valid ID (letters, digits, '-', '_', '.'; at most 63 characters): "
                      "set clusterID")


def id_error(cluster: Cluster, annotations: Mapping[str, str] | None = None) -> InvalidSpec | None:
    """Why the cluster may not be routed on its ID, or None: not a valid ID; an explicit clusterID outside what
    its namespace may use (`id_prefixes`); or, once routed, a clusterID other than the recorded one."""
    field = "spec.sharedIngress.clusterID"
    malformed = _format_error(cluster)
    if malformed is not None:
        return InvalidSpec([malformed])
    explicit, recorded = cluster.spec.shared_ingress.cluster_id, recorded_id(cluster)
    if recorded is not None:
        if explicit is not None and explicit != recorded:
            return InvalidSpec.one(cluster.ref, field, f"{explicit!r} is not the ID {recorded!r} the cluster is "
                                   "routed on (status.sharedIngress.clusterID); a routed ID never changes, because "
                                   "the nodes' proxies send it: set it back or remove it", condition=ID_NOT_ALLOWED)
        return None
    if explicit is None:
        return None
    allowed = id_prefixes(cluster, annotations or {})
    if not _allowed(explicit, cluster_namespace(cluster), allowed):
        return InvalidSpec.one(cluster.ref, field, f"{explicit!r} does not start with a prefix namespace "
                               f"{cluster_namespace(cluster)} may use ({', '.join(map(repr, allowed))}; the hub "
                               f"administrator grants others in annotation {CLUSTER_ID_PREFIXES_ANNOTATION}, "
                               "for IDs without a '.')", condition=ID_NOT_ALLOWED)
    return None


def claim_ids(clusters: Iterable[Cluster]) -> tuple[dict[str, Cluster], dict[str, FieldError]]:
    """Each ID of the opted-in clusters → the cluster that owns it, and, by cluster key, an error for every cluster
    whose ID is invalid or already taken. The owner is the one routed on it already (recorded), else the oldest
    claimant: a routed ID is never taken away. (Callers pass clusters `ingress_error` let through.)"""
    claims: dict[str, list[Cluster]] = {}
    errors: dict[str, FieldError] = {}
    for cluster in clusters:
        spec = cluster.spec.shared_ingress
        if not spec.enabled:
            continue
        malformed = _format_error(cluster)
        if malformed is not None:
            errors[cluster.key] = malformed
            continue
        claims.setdefault(cluster_id_of(cluster), []).append(cluster)
    owners: dict[str, Cluster] = {}
    for cluster_id, claimants in sorted(claims.items()):
        claimants.sort(key=lambda c: (recorded_id(c) != cluster_id, c.metadata.creation_timestamp or "", c.key))
        owners[cluster_id] = claimants[0]
        for other in claimants[1:]:
            errors[other.key] = FieldError(other.ref, "spec.sharedIngress.clusterID",
                                           f"ID {cluster_id!r} is already used by {claimants[0].ref}")
    return owners, errors


# --------------------------------------------------------------------------- backends

def _address_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why no cluster's backend may be this address, whatever the hub allows, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1 to the kernel
    if ip.is_loopback:
        return "is a loopback address: the central proxy would dial itself (its admin and health ports)"
    if ip.is_link_local or ip in _AWS_IPV6_SERVICES:
        return "is link-local, where instance metadata (169.254.169.254, fd00:ec2::254) and the VPC's DNS answer"
    if ip.is_unspecified:
        return "is the unspecified address, which means every local address: the central proxy itself"
    if ip.is_multicast or ip.is_reserved or ip == ipaddress.IPv4Address("255.255.255.255"):
        return "is a multicast, broadcast or reserved address, never an API server"
    return None


def _name_refusal(host: str, hub: HubConfig) -> str | None:
    """Why no cluster's backend may be this name, whatever the hub allows, or None."""
    labels = host.split(".")
    if labels[-1] == "localhost" or labels[0] == "localhost":
        return "is localhost: the central proxy would dial itself (its admin and health ports)"
    if labels[0] == "kubernetes" and (len(labels) == 1 or labels[1] == "default"):
        return "is the management cluster's own API server (the kubernetes Service)"
    if labels[0] == "instance-data":
        return "is the EC2 instance metadata service"
    namespace = hub.spec.shared_ingress.namespace if hub.spec.shared_ingress else None
    if namespace and len(labels) >= 2 and labels[1] == namespace:
        return f"is a Service in namespace {namespace}, where the central proxy itself runs"
    return None


def _own_refusal(host: Host, hub: HubConfig) -> str | None:
    """The central proxy's own load balancer and listener."""
    central = hub.spec.shared_ingress
    if central is None:
        return None
    if central.address is not None and parse_host_port(central.address)[0] == host:
        return f"is the central proxy's own load balancer ({central.address}): it would route to itself"
    if parse_host_port(central.bind, bind=True)[0] == host:
        return f"is the central proxy's own listener ({central.bind})"
    return None


def _matches(host: Host, rule: str) -> bool:
    if "/" in rule:
        network = ipaddress.ip_network(rule)
        if isinstance(host, ipaddress.IPv6Address) and host.ipv4_mapped is not None:
            host = host.ipv4_mapped
        return not isinstance(host, str) and host.version == network.version and host in network
    return isinstance(host, str) and under(host, rule)


def backend_error(cluster: Cluster, hub: HubConfig, annotations: Mapping[str, str]) -> InvalidSpec | None:
    """Why the central proxy must not dial this cluster's backend, or None.

    Refused whatever the lists say: loopback, link-local and AWS's metadata addresses, the unspecified,
    multicast and reserved addresses, localhost, the kubernetes Service, the proxy's own namespace,
    load balancer and listener. Otherwise the backend must match the HubConfig's allowedBackends (a CIDR
    block holding the address, or a domain the name is equal to or under) and, when the namespace has
    the hubwright.io/allowed-backends annotation, one of its entries too.
    """
    backend = cluster.spec.shared_ingress.backend or ""
    field = "spec.sharedIngress.backend"

    def refuse(why: str) -> InvalidSpec:
        return InvalidSpec.one(cluster.ref, field, f"{backend}: {why}", condition=BACKEND_NOT_ALLOWED)

    try:
        host, _ = parse_host_port(backend)
    except ValueError as exc:  # the model already refused it; kept for callers that build Clusters by hand
        return refuse(str(exc))
    assert host is not None
    never = _name_refusal(host, hub) if isinstance(host, str) else _address_refusal(host)
    never = never or _own_refusal(host, hub)
    if never is not None:
        return refuse(f"{host} {never}")
    central = hub.spec.shared_ingress
    hub_rules = central.allowed_backends if central is not None else []
    if not any(_matches(host, rule) for rule in hub_rules):
        listed = ", ".join(hub_rules) if hub_rules else "none: it is empty"
        return refuse(f"{host} is outside {hub.ref} spec.sharedIngress.allowedBackends ({listed}); "
                      "the hub administrator lists where API servers may be")
    namespace = cluster_namespace(cluster)
    try:
        narrowed = allowed_backends(namespace, annotations)
    except InvalidSpec as exc:  # the administrator's annotation is malformed: refused, said where
        return exc
    if narrowed is not None and not any(_matches(host, rule) for rule in narrowed):
        return refuse(f"{host} is outside what namespace {namespace} may use "
                      f"({', '.join(narrowed) or 'none'}; annotation {ALLOWED_BACKENDS_ANNOTATION})")
    return None


def ingress_error(cluster: Cluster, hub: HubConfig, annotations: Mapping[str, str]) -> InvalidSpec | None:
    """Why an opted-in cluster cannot be routed through the shared ingress on its own account, or None.
    (Whether its ID is taken depends on the fleet: `claim_ids`.)"""
    central = hub.spec.shared_ingress
    if central is None or central.address is None:
        return InvalidSpec.one(cluster.ref, "spec.sharedIngress.enabled",
                               f"{hub.ref} has no spec.sharedIngress.address for the cluster's proxy to dial",
                               condition=NO_SHARED_INGRESS)
    invalid = id_error(cluster, annotations)
    if invalid is not None:
        return invalid
    return backend_error(cluster, hub, annotations)
