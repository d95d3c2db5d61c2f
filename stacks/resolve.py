"""resolve(): Kubernetes objects in, one StackInputs per cluster out. Pure.

`resolve_all` is what the plan, the service and `ingress render` call: it resolves every
cluster of a fleet at once, because some decisions (endpoint placement, mesh
ownership, who owns an account, an API host or a shared-ingress ID) depend on
the other clusters. Every cluster first passes `admit`, the tenancy gate
(docs/security.md). A bad cluster yields its InvalidSpec and never blocks the
others. Its answer also holds the shared ingress's routes, so what is routed and
what runs are decided in one place.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from stacks import accounts, names
from stacks.claims import Claimant, gate, granted
from stacks.errors import FieldError, InvalidSpec
from stacks.ingress import Route, claim_ids, cluster_id_of, ingress_error, route_of
from stacks.inputs import PrivateLinkInputs, SharedIngressInputs, StackInputs
from stacks.mesh.plan import MeshPlan, plan_mesh
from stacks.mesh.share import MeshShare
from stacks.network.merge import merged
from stacks.model.cluster import Cluster
from stacks.model.hub import EndpointVPC, HubConfig
from stacks.transit import MeshStatus
from stacks.names import CLUSTER_TAG, MANAGED_BY, MANAGED_BY_TAG, TENANT_TAG, stack_name_error
from stacks.placement import Want, place_endpoints
from stacks.retention import Retention, policy_of
from stacks.targets import AwsTarget
from stacks.tenancy import (Owners, Seat, host_errors, namespace_caps, cluster_namespace, quota_refusals, shared_refusal,
                            namespace_tenant)


@dataclass(frozen=True)
class Fleet:
    """Everything resolve needs besides the cluster itself."""

    hub: HubConfig
    clusters: tuple[Cluster, ...]
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # namespace → annotations
    role_map: Mapping[str, str] | None = None  # the role-map ConfigMap's entries
    placements: Mapping[str, str] = field(default_factory=dict)  # cluster key → endpoint VPC already in use
    # Cluster keys whose stack exists (status.stack recorded; the offline plan knows of none): under its
    # namespace's cap a cluster with a stack keeps its slot (stacks.tenancy.quota_refusals).
    stacks: frozenset[str] = frozenset()
    # endpoint VPC → interface endpoints there that hubwright did not make (the service's census counts
    # them; the offline plan knows of none). They use up the same per-VPC quota.
    foreign_endpoints: Mapping[str, int] = field(default_factory=dict)
    # What the service recorded of the mesh: each group's state and the transit stacks' outputs (HubConfig
    # status.mesh), each member's attachment (its status). The offline plan reads the hub file's status.
    mesh_status: MeshStatus = field(default_factory=MeshStatus.empty)
    # Cluster keys that hold their claims before newcomers where no status.claims says so: the offline plan's
    # clusters whose stacks its baseline planned (stacks.claims.holder_order; the service records claims instead).
    held: frozenset[str] = frozenset()
    # Whether a discovery reads the clusters' networks (the service with AWS, the plan with its stand-ins): then a
    # cluster waits for its status.network before anything is built (stacks.network.merge).
    discovery: bool = False
    # The retained stacks (HubRetainedStacks) and their namespaces' UIDs: the service's; the offline plan has none.
    retention: Retention = field(default_factory=Retention.empty)

    def owners(self) -> Owners:
        return Owners.of(self.hub, self.clusters, self.namespaces, self.retention)


def resolve(
    cluster: Cluster,
    hub: HubConfig,
    *,
    ns_annotations: Mapping[str, str] | None = None,
    role_map: Mapping[str, str] | None = None,
    endpoint_vpc: EndpointVPC | None = None,
    mesh: MeshShare | None = None,
    target: AwsTarget | None = None,
) -> StackInputs:
    """One cluster's inputs. `target`: what `admit` gave it within its fleet; without one, the cluster is
    admitted as if it were the whole fleet."""
    namespace = cluster_namespace(cluster)
    ns_annotations = ns_annotations or {}
    if target is None:
        owners = Owners.of(hub, [cluster], {namespace: ns_annotations})
        target = admit(cluster, owners, accounts.merged_role_map(hub, role_map))
    tenant = namespace_tenant(namespace, ns_annotations)
    tags = {  # values fit AWS's 256 characters: the key by the stack-name limit, the tenant by namespace_tenant
        CLUSTER_TAG: cluster.key,
        TENANT_TAG: tenant,
        MANAGED_BY_TAG: MANAGED_BY,
    }
    return StackInputs(
        stack=cluster.stack,
        namespace=namespace,
        name=cluster.metadata.name,
        tenant=tenant,
        generation=cluster.metadata.generation,
        cluster=target,
        hub=accounts.hub_target(hub, cluster),
        tags=tags,
        cluster_tags=dict(cluster.spec.tags),
        private_link=_private_link(cluster, hub, target.region, endpoint_vpc),
        shared_ingress=shared_ingress_inputs(cluster, hub, ns_annotations),
        mesh=mesh,
    )


def admit(cluster: Cluster, owners: Owners, roles: Mapping[str, str], stack: bool = False) -> AwsTarget:
    """The tenancy gate: the cluster's names and account are its namespace's to use (InvalidSpec if not).

    Where it lives (account, region, role) is the answer. A cluster refused here takes nothing from the
    fleet: no endpoint placement, no mesh pair, no claim (stacks.claims). `stack`: its stack exists (an account
    two namespaces own without the administrator's say refuses only new clusters).
    """
    problem = stack_name_error(cluster.metadata.namespace, cluster.metadata.name)
    if problem is not None:
        raise InvalidSpec.one(cluster.ref, "metadata.name", problem)
    namespace = cluster_namespace(cluster)
    namespace_tenant(namespace, owners.annotations(namespace))  # the tenant tag must be one AWS accepts
    namespace_caps(owners.hub, namespace, owners.annotations(namespace))  # its caps must be numbers
    refused = host_errors(cluster, owners.hub, owners.annotations(namespace))
    if refused is not None:
        raise refused
    policy_of(cluster.ref, cluster.spec.deletion_policy, owners.hub)  # Retain where the hub does not allow it: refused while it can still be changed
    target = accounts.cluster_target(cluster, owners, roles)
    adoption = owners.retention.adoption_refusal(cluster, target.account_id)
    if adoption is not None:
        raise adoption
    sharing = owners.contested.get(target.account_id)
    if sharing is not None and not (stack or owners.retention.holds(cluster.key)):
        raise shared_refusal(cluster, target.account_id, sharing)
    return target


def _private_link(cluster: Cluster, hub: HubConfig, region: str, vpc: EndpointVPC | None) -> PrivateLinkInputs | None:
    if not cluster.spec.private_link.enabled:
        return None
    if vpc is None:  # resolved alone, not as part of a fleet: placed as if it were the only cluster
        vpc = _placed(hub, cluster, region)
    host, port = names.parse_api_url(cluster.spec.aws.api_url)
    return PrivateLinkInputs(
        infra_id=cluster.spec.infra_id,
        nlb_name=cluster.spec.private_link.load_balancer_name or f"{cluster.spec.infra_id}-int",
        api_host=host,
        api_port=port,
        allowed_principal=hub.spec.allowed_principal or hub.spec.credentials.role_arn,
        endpoint_vpc=vpc,
        associated_vpcs=tuple(hub.spec.associated_vpcs),
        dns_record_type=hub.spec.private_link.dns_record_type,
    )


def shared_ingress_inputs(cluster: Cluster, hub: HubConfig,
                          ns_annotations: Mapping[str, str] | None = None) -> SharedIngressInputs | None:
    """The node-side proxy's inputs, or None when the cluster has not opted in to the shared ingress.
    Refused (InvalidSpec) where stacks.ingress.ingress_error refuses its route."""
    mine = cluster.spec.shared_ingress
    if not mine.enabled:
        return None
    refused = ingress_error(cluster, hub, ns_annotations or {})
    if refused is not None:
        raise refused
    central = hub.spec.shared_ingress
    assert central is not None and central.address is not None  # ingress_error checked both
    return SharedIngressInputs(
        cluster_id=cluster_id_of(cluster),
        central_address=central.address,
        proxy_bind=mine.proxy_bind,
        wire_mode=central.wire_mode,
        tlv_type=central.tlv_type,
        image=central.image,
        external_proxy=mine.node_proxy == "External",
    )


def _placed(hub: HubConfig, cluster: Cluster, region: str) -> EndpointVPC:
    placed = place_endpoints(hub, [Want(cluster.key, cluster.ref, region)], {})[cluster.key]
    if isinstance(placed, InvalidSpec):
        raise placed
    return placed


def fleet_targets(fleet: Fleet, owners: Owners | None = None) -> dict[str, AwsTarget | InvalidSpec]:
    """`admit` for every cluster: its account, region and role, or why its namespace may not have them; then its
    namespace's caps (stacks.tenancy.quota_refusals), whose refusal is an admission refusal too."""
    owners = owners or fleet.owners()
    roles = accounts.merged_role_map(fleet.hub, fleet.role_map)
    targets: dict[str, AwsTarget | InvalidSpec] = {}
    for cluster in fleet.clusters:
        try:
            targets[cluster.key] = admit(cluster, owners, roles, cluster.key in fleet.stacks)
        except InvalidSpec as exc:
            targets[cluster.key] = exc
    by_namespace: dict[str, list[Seat]] = {}
    for cluster in fleet.clusters:
        seat = seat_of(cluster, targets[cluster.key], cluster.key in fleet.stacks, fleet.placements.get(cluster.key),
                       owners)
        by_namespace.setdefault(cluster_namespace(cluster), []).append(seat)
    for namespace, seats in by_namespace.items():
        targets.update(quotas(fleet.hub, namespace, owners, seats))
    return targets


def with_network(cluster: Cluster, target: AwsTarget | InvalidSpec, hub: HubConfig,
                 discovery: bool) -> tuple[Cluster, AwsTarget | InvalidSpec]:
    """An admitted cluster with its network merged from what discovery found (stacks.network.merge), or refused
    (Pending while discovery has not read it, NetworkMismatch when the account contradicts it): a refusal here
    is an admission refusal, and the cluster takes nothing from the fleet."""
    if isinstance(target, InvalidSpec):
        return cluster, target
    found = merged(cluster, target, hub.spec.discovery, discovery=discovery)
    return (cluster, found) if isinstance(found, InvalidSpec) else (found, target)


def seat_of(cluster: Cluster, target: AwsTarget | InvalidSpec, stack: bool, placement: str | None,
            owners: Owners) -> Seat:
    """The cluster as its namespace's caps see it: admitted or not, asking for an endpoint, holding what (the
    retained stack it adopts counts as its own: stacks.retention)."""
    return Seat(cluster, isinstance(target, AwsTarget), cluster.spec.private_link.enabled,
                stack or owners.retention.holds(cluster.key), bool(placement))


def quotas(hub: HubConfig, namespace: str, owners: Owners, seats: list[Seat]) -> dict[str, InvalidSpec]:
    """The namespace's clusters refused by its caps: over a cap, a cluster is refused like at admission and
    takes nothing from the fleet (no endpoint placement, mesh pair, API host or shared-ingress ID)."""
    try:
        return quota_refusals(hub, namespace, owners.annotations(namespace), seats, owners.retention.slots(namespace))
    except InvalidSpec:  # a cap that is not a number: `admit` refused every cluster of the namespace already
        return {}


@dataclass(frozen=True)
class Resolved:
    """A fleet resolved: every cluster's inputs (or why not) and the shared ingress's routes."""

    inputs: dict[str, StackInputs | InvalidSpec]  # by namespace/name, in input order
    # Opted-in clusters whose every check but the mesh passes (a mesh problem lies between peers: it
    # stalls the stack, never the route). Sorted by cluster ID.
    routes: tuple[Route, ...] = ()
    guests: dict[str, SharedIngressInputs] = field(default_factory=dict)  # each routed cluster's node-side proxy
    unrouted: dict[str, InvalidSpec] = field(default_factory=dict)  # opted-in, not routed, and why
    mesh: MeshPlan | None = None  # the mesh plan the inputs were built from (the service hands out its stamps)
    # What admission granted each cluster it let through every stage (stacks.claims.granted): the service records
    # it in status.claims, so that the cluster keeps it.
    claims: dict[str, dict[str, str]] = field(default_factory=dict)


def resolve_fleet(fleet: Fleet) -> dict[str, StackInputs | InvalidSpec]:
    """Every cluster's inputs, keyed by namespace/name, in input order (`resolve_all(fleet).inputs`)."""
    return resolve_all(fleet).inputs


def resolve_all(fleet: Fleet) -> Resolved:
    """Resolve every cluster and route the shared ingress.

    Per cluster: its names, its account (tenancy), its region, its shared-ingress ID and backend. Over the fleet,
    admission decides, in this order, tenancy (accounts, caps), then the claims (stacks.claims: VPC, load
    balancer, infra ID, API host, then the shared-ingress ID): a cluster refused at one stage enters no later stage
    and takes nothing from the fleet. Only then are endpoints placed and the mesh planned, over the admitted
    clusters alone. A refusal never blocks the others. A cluster is routed exactly when it is refused for nothing
    but its mesh. (stacks.incremental keeps this answer up to date one change at a time, with the same steps.)
    """
    # Registered-only clusters (no AWS part) get no stack and claim nothing: they are not in the answer.
    fleet = replace(fleet, clusters=tuple(c for c in fleet.clusters if c.spec.provisioned))
    hub = fleet.hub
    owners = fleet.owners()
    targets = fleet_targets(fleet, owners)
    networked = [with_network(c, targets[c.key], hub, fleet.discovery) for c in fleet.clusters]
    targets.update({c.key: target for c, target in networked})
    fleet = replace(fleet, clusters=tuple(c for c, _ in networked))
    targets.update(gate((Claimant(c, t) for c in fleet.clusters if isinstance(t := targets[c.key], AwsTarget)),
                        fleet.held, owners.retention.reserved()))
    _, id_refusals = claim_ids(c for c in fleet.clusters if claims_id(c, hub, owners, targets[c.key]))
    targets.update({key: InvalidSpec([error]) for key, error in id_refusals.items()})
    wants = [w for c in fleet.clusters if (w := want_of(c, targets[c.key])) is not None]
    placed = place_endpoints(hub, wants, fleet.placements, fleet.foreign_endpoints)
    mesh = plan_mesh(hub, fleet.clusters, targets, fleet.mesh_status, accounts.merged_role_map(hub, fleet.role_map),
                     fleet.held)
    result: dict[str, StackInputs | InvalidSpec] = {}
    guests: dict[str, SharedIngressInputs] = {}
    unrouted: dict[str, InvalidSpec] = {}
    claims: dict[str, dict[str, str]] = {}
    for cluster in fleet.clusters:
        key = cluster.key
        base = base_inputs(cluster, hub, owners, fleet.role_map, targets[key], placed.get(key), mesh.share(key))
        value, guest = finish(cluster, base, mesh.errors.get(key))
        result[key] = value
        if isinstance(target := targets[key], AwsTarget):
            claims[key] = granted(cluster, target)
        if guest is not None:
            guests[key] = guest
        elif cluster.spec.shared_ingress.enabled and isinstance(value, InvalidSpec):
            unrouted[key] = value
    routes = tuple(sorted((route_of(c) for c in fleet.clusters if c.key in guests), key=lambda route: route.cluster_id))
    return Resolved(result, routes, guests, unrouted, mesh, claims)


# --- the steps of resolve_all, one cluster at a time (stacks.incremental runs them too) ---------------------

def want_of(cluster: Cluster, target: AwsTarget | InvalidSpec) -> Want | None:
    """What the cluster asks of endpoint placement: an admitted cluster with PrivateLink, in its region."""
    if cluster.spec.private_link.enabled and isinstance(target, AwsTarget):
        return Want(cluster.key, cluster.ref, target.region, cluster.metadata.creation_timestamp or "")
    return None


def claims_id(cluster: Cluster, hub: HubConfig, owners: Owners, target: AwsTarget | InvalidSpec) -> bool:
    """Only admitted, opted-in clusters whose own shared-ingress checks pass claim a shared-ingress ID."""
    return isinstance(target, AwsTarget) and cluster.spec.shared_ingress.enabled \
        and ingress_error(cluster, hub, owners.annotations(cluster_namespace(cluster))) is None


def base_inputs(cluster: Cluster, hub: HubConfig, owners: Owners, role_map: Mapping[str, str] | None,
                target: AwsTarget | InvalidSpec, vpc: EndpointVPC | InvalidSpec | None,
                share: MeshShare | None) -> StackInputs | InvalidSpec:
    """The cluster's inputs before the fleet-wide refusals (names claimed twice, the mesh's) are merged in."""
    if isinstance(target, InvalidSpec):
        return target
    if isinstance(vpc, InvalidSpec):
        return vpc
    try:
        return resolve(cluster, hub, ns_annotations=owners.annotations(cluster_namespace(cluster)), role_map=role_map,
                       endpoint_vpc=vpc, mesh=share, target=target)
    except InvalidSpec as exc:
        return exc


def finish(cluster: Cluster, base: StackInputs | InvalidSpec,
           mesh: InvalidSpec | None) -> tuple[StackInputs | InvalidSpec, SharedIngressInputs | None]:
    """The cluster's answer, and its node-side proxy's inputs when it is routed: refused for nothing but its
    mesh (a mesh problem lies between peers: it stalls the stack, never the route)."""
    guest = base.shared_ingress if isinstance(base, StackInputs) and cluster.spec.shared_ingress.enabled else None
    return _merged(base, mesh), guest


def _merged(earlier: StackInputs | InvalidSpec, problem: InvalidSpec | None) -> StackInputs | InvalidSpec:
    if problem is None:
        return earlier
    if isinstance(earlier, InvalidSpec):  # an error already reported is not repeated
        fresh = [err for err in problem.errors if err not in earlier.errors]
        return InvalidSpec([*earlier.errors, *fresh], earlier.reason)
    return problem
