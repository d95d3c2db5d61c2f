"""resolve(): Kubernetes objects in, one StackInputs per cluster out. Pure.

`resolve_fleet` is what the plan and the service call: it resolves every
cluster of a fleet at once, because some decisions (endpoint placement, mesh
ownership) depend on the other clusters. A bad cluster yields its InvalidSpec
and never blocks the others.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import urlsplit

from stacks import accounts
from stacks.errors import InvalidSpec
from stacks.ingress import claim_ids, id_error
from stacks.inputs import PrivateLinkInputs, SharedIngressInputs, StackInputs
from stacks.mesh import MeshPlan, MeshShare, plan_mesh
from stacks.model import Cluster, EndpointVPC, HubConfig
from stacks.placement import Want, place_endpoints


def stack_name(cluster: Cluster) -> str:
    return f"{cluster.metadata.namespace or 'default'}.{cluster.metadata.name}"


@dataclass(frozen=True)
class Fleet:
    """Everything resolve needs besides the cluster itself."""

    hub: HubConfig
    clusters: tuple[Cluster, ...]
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # namespace → annotations
    role_map: Mapping[str, str] | None = None  # the role-map ConfigMap's entries
    placements: Mapping[str, str] = field(default_factory=dict)  # cluster key → endpoint VPC already in use


def resolve(
    cluster: Cluster,
    hub: HubConfig,
    *,
    ns_annotations: Mapping[str, str] | None = None,
    role_map: Mapping[str, str] | None = None,
    endpoint_vpc: EndpointVPC | None = None,
    mesh: MeshShare | None = None,
) -> StackInputs:
    ns_annotations = ns_annotations or {}
    roles = accounts.merged_role_map(hub, role_map)
    target = accounts.cluster_target(cluster, hub, ns_annotations, roles)
    namespace = cluster.metadata.namespace or "default"
    tenant = cluster.spec.tenant or namespace
    return StackInputs(
        stack=stack_name(cluster),
        namespace=namespace,
        name=cluster.metadata.name,
        tenant=tenant,
        generation=cluster.metadata.generation,
        cluster=target,
        hub=accounts.hub_target(hub, cluster),
        tags={
            "clusternet.io/cluster": cluster.key,
            "clusternet.io/tenant": tenant,
            "clusternet.io/managed-by": "clusternet",
        },
        private_link=_private_link(cluster, hub, target.region, endpoint_vpc),
        shared_ingress=shared_ingress_inputs(cluster, hub),
        mesh=mesh,
    )


def _private_link(cluster: Cluster, hub: HubConfig, region: str, vpc: EndpointVPC | None) -> PrivateLinkInputs | None:
    if not cluster.spec.private_link.enabled:
        return None
    if vpc is None:  # resolved alone, not as part of a fleet: placed as if it were the only cluster
        vpc = _placed(hub, cluster, region)
    url = urlsplit(cluster.spec.api_url)
    return PrivateLinkInputs(
        infra_id=cluster.spec.infra_id,
        nlb_name=f"{cluster.spec.infra_id}-int",
        api_host=url.hostname,
        api_port=url.port or 443,
        allowed_principal=hub.spec.allowed_principal or hub.spec.credentials.role_arn,
        endpoint_vpc=vpc,
        associated_vpcs=tuple(hub.spec.associated_vpcs),
        dns_record_type=hub.spec.private_link.dns_record_type,
    )


def shared_ingress_inputs(cluster: Cluster, hub: HubConfig) -> SharedIngressInputs | None:
    """The node-side proxy's inputs, or None when the cluster has not opted in to the shared ingress."""
    mine = cluster.spec.shared_ingress
    if not mine.enabled:
        return None
    central = hub.spec.shared_ingress
    if central is None or central.address is None:
        raise InvalidSpec.one(cluster.ref, "spec.sharedIngress.enabled",
                              f"{hub.ref} has no spec.sharedIngress.address for the cluster's proxy to dial")
    invalid = id_error(cluster)
    if invalid is not None:
        raise InvalidSpec([invalid])
    return SharedIngressInputs(
        cluster_id=mine.id_for(cluster.metadata.name),
        central_address=central.address,
        proxy_bind=mine.proxy_bind,
        wire_mode=central.wire_mode,
        tlv_type=central.tlv_type,
        image=central.image,
    )


def _placed(hub: HubConfig, cluster: Cluster, region: str) -> EndpointVPC:
    placed = place_endpoints(hub, [Want(cluster.key, cluster.ref, region)], {})[cluster.key]
    if isinstance(placed, InvalidSpec):
        raise placed
    return placed


def mesh_of(fleet: Fleet) -> MeshPlan:
    """The fleet's mesh: groups, pair owners, each stack's share (stacks.mesh.changed_stacks diffs two)."""
    return plan_mesh(fleet.hub, fleet.clusters, namespaces=fleet.namespaces, role_map=fleet.role_map)


def resolve_fleet(fleet: Fleet) -> dict[str, StackInputs | InvalidSpec]:
    """Resolve every cluster; the result is keyed by namespace/name, in input order."""
    hub = fleet.hub
    regions: dict[str, str | InvalidSpec] = {}
    for cluster in fleet.clusters:
        try:
            annotations = fleet.namespaces.get(cluster.metadata.namespace or "default", {})
            regions[cluster.key], _ = accounts.cluster_region(cluster, hub, annotations)
        except InvalidSpec as exc:
            regions[cluster.key] = exc
    wants = [
        Want(c.key, c.ref, regions[c.key], c.metadata.creation_timestamp or "")
        for c in fleet.clusters
        if c.spec.private_link.enabled and isinstance(regions[c.key], str)
    ]
    placed = place_endpoints(hub, wants, fleet.placements)
    mesh = mesh_of(fleet)

    result: dict[str, StackInputs | InvalidSpec] = {}
    for cluster in fleet.clusters:
        vpc = placed.get(cluster.key)
        if isinstance(regions[cluster.key], InvalidSpec):
            result[cluster.key] = regions[cluster.key]
        elif isinstance(vpc, InvalidSpec):
            result[cluster.key] = vpc
        else:
            try:
                result[cluster.key] = resolve(
                    cluster,
                    hub,
                    ns_annotations=fleet.namespaces.get(cluster.metadata.namespace or "default", {}),
                    role_map=fleet.role_map,
                    endpoint_vpc=vpc,
                    mesh=mesh.share(cluster.key),
                )
            except InvalidSpec as exc:
                result[cluster.key] = exc
    _, taken = claim_ids(fleet.clusters)  # a shared-ingress ID claimed twice: the younger claimant is refused
    problems = [*mesh.errors.items(), *((key, InvalidSpec([err])) for key, err in taken.items())]
    for key, problem in problems:
        earlier = result[key]
        if isinstance(earlier, InvalidSpec):  # an error resolve() already reported is not repeated
            fresh = [err for err in problem.errors if err not in earlier.errors]
            result[key] = InvalidSpec([*earlier.errors, *fresh], earlier.reason)
        else:
            result[key] = problem
    return result
