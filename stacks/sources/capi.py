"""A Cluster API `Cluster` (cluster.x-k8s.io v1beta1 or v1beta2) as a HubCluster's inputs, read with the object
that holds its AWS network: CAPA's `AWSCluster` (infrastructureRef) or, for EKS, CAPA's `AWSManagedControlPlane`
(controlPlaneRef). Pure; the field paths are those of the real CRDs (tests/test_sources_schema.py walks them).

| HubCluster input                  | read from                                                                 |
| infraID                           | the Cluster's metadata.name (CAPA tags the VPC kubernetes.io/cluster/<it>) |
| region                            | AWSCluster spec.region                                                    |
| apiURL                            | the Cluster's spec.controlPlaneEndpoint, else the AWSCluster's            |
| network.vpcID, cidr               | AWSCluster spec.network.vpc.id, .cidrBlock                                |
| network.secondaryCIDRs            | AWSCluster spec.network.vpc.secondaryCidrBlocks[].ipv4CidrBlock           |
| network.routeTableIDs             | AWSCluster spec.network.subnets[].routeTableId (private ones only when    |
|                                   | HubConfig spec.discovery.routeTables is private)                          |
| network.transitSubnets            | one private subnet per zone (resourceID, availabilityZone)               |
| network.nodeSecurityGroupIDs      | AWSCluster status.networkStatus.securityGroups[node, node-eks-additional] |
| privateLink.loadBalancerName      | AWSCluster status.networkStatus.apiServerElb.name (an NLB only)           |

Every fact read is declared on the HubCluster, so discovery verifies it against the cloud (stacks.network): a
tenant writes these objects, and its word is compared, not trusted.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from stacks.errors import FieldError
from stacks.model.hub import HubConfig
from stacks.names import PRIVATELINK_ANNOTATION
from stacks.network.found import FoundSubnet
from stacks.network.merge import chosen_tables, one_per_zone
from stacks.sources.kinds import (AWS_CLUSTER, AWS_MANAGED_CLUSTER, AWS_MANAGED_CONTROL_PLANE, SourceKind, SourceRef,
                                  group_of)
from stacks.sources.optin import source_namespace
from stacks.sources.outcome import Pending, Refused
from stacks.sources.part import Asks, Part, Provenance, Related, get

NODE_ROLES = ("node", "node-eks-additional")  # CAPA's SecurityGroupRole values of the nodes' groups
CAPA_DEFAULT_PORT = 6443


class _Ref(NamedTuple):
    group: str
    kind: str
    name: str


def _reference(cluster: Mapping[str, Any], field: str, ref: SourceRef) -> _Ref | Refused | None:
    """A Cluster's object reference, v1beta2 `{apiGroup, kind, name}` or v1beta1 `{apiVersion, kind, name,
    namespace}`; Refused when it leaves the Cluster's namespace; None when it is not set."""
    value = get(cluster, field)
    if not isinstance(value, Mapping):
        return None
    namespace = value.get("namespace")
    if namespace not in (None, "", ref.namespace):
        return Refused.one(ref, ref, f"{field}.namespace",
                           f"is {namespace!r}: a source object may only reference objects in its own namespace "
                           f"({ref.namespace})")
    group = value.get("apiGroup") if "apiGroup" in value else group_of(value.get("apiVersion"))
    kind, name = value.get("kind"), value.get("name")
    if not (isinstance(group, str) and isinstance(kind, str) and isinstance(name, str) and name):
        return Refused.one(ref, ref, field, "names no object: it needs a group (apiGroup or apiVersion), a kind "
                                            "and a name")
    return _Ref(group, kind, name)


def _is(found: _Ref | None, kind: SourceKind) -> bool:
    return found is not None and (found.group, found.kind) == (kind.group, kind.kind)


def _holder(cluster: Mapping[str, Any], ref: SourceRef) -> tuple[SourceKind, str, str] | Refused | Pending:
    """(kind, name, the Cluster's field naming it) of the object holding the cluster's AWS network."""
    infra = _reference(cluster, "spec.infrastructureRef", ref)
    control_plane = _reference(cluster, "spec.controlPlaneRef", ref)
    for found in (infra, control_plane):
        if isinstance(found, Refused):
            return found
    assert not isinstance(infra, Refused) and not isinstance(control_plane, Refused)
    if infra is None:
        return Pending(ref, _wait(ref, "spec.infrastructureRef", "names no infrastructure object yet"))
    if _is(infra, AWS_CLUSTER):
        return AWS_CLUSTER, infra.name, "spec.infrastructureRef"
    if _is(infra, AWS_MANAGED_CONTROL_PLANE):
        return AWS_MANAGED_CONTROL_PLANE, infra.name, "spec.infrastructureRef"
    if _is(infra, AWS_MANAGED_CLUSTER):
        if control_plane is not None and _is(control_plane, AWS_MANAGED_CONTROL_PLANE):
            return AWS_MANAGED_CONTROL_PLANE, control_plane.name, "spec.controlPlaneRef"
        named = f"names {control_plane.kind}.{control_plane.group}" if control_plane else "is not set"
        return Refused.one(ref, ref, "spec.controlPlaneRef",
                           f"{named}: an EKS cluster (infrastructureRef {AWS_MANAGED_CLUSTER.qualified}) is read from "
                           f"its {AWS_MANAGED_CONTROL_PLANE.qualified}")
    return Refused.one(ref, ref, "spec.infrastructureRef",
                       f"names {infra.kind}.{infra.group}, which hubwright does not read: it reads "
                       f"{AWS_CLUSTER.qualified} (CAPA) and {AWS_MANAGED_CONTROL_PLANE.qualified} (EKS)")


def _wait(obj: SourceRef, field: str, why: str) -> FieldError:
    return FieldError(str(obj), field, why)


def _subnet_id(subnet: Mapping[str, Any]) -> str | None:
    """The AWS ID of a CAPA subnet: resourceID (CAPA-managed), else id when it is one (bring-your-own)."""
    for key in ("resourceID", "id"):
        value = subnet.get(key)
        if isinstance(value, str) and value.startswith("subnet-"):
            return value
    return None


def _list(value: Any) -> list[Any]:
    """A list field as written; anything else (a tenant's object is not checked by any schema in a plan folder) is
    none."""
    return value if isinstance(value, list) else []


def _unique(values: list[Any]) -> list[Any]:
    """`values` in order without repeats, whatever they are (a value the model refuses is kept, so it is named)."""
    kept: list[Any] = []
    for value in values:
        if value not in kept:
            kept.append(value)
    return kept


def _zone(value: Any) -> bool:
    """Whether a CAPA subnet's availabilityZone can place it: a zone name (a tenant's object is checked by no schema
    in a plan folder; a subnet whose zone is empty or not a name is left out, not an exception)."""
    return isinstance(value, str) and 0 < len(value) <= 32


def _network(holder: Mapping[str, Any], hub: HubConfig, oref: SourceRef, provenance: Provenance) -> dict[str, Any]:
    network: dict[str, Any] = {}
    vpc_id, cidr = get(holder, "spec.network.vpc.id"), get(holder, "spec.network.vpc.cidrBlock")
    if vpc_id:
        network["vpcID"] = vpc_id
        provenance["spec.network.vpcID"] = (oref, "spec.network.vpc.id")
    if cidr:
        network["cidr"] = cidr
        provenance["spec.network.cidr"] = (oref, "spec.network.vpc.cidrBlock")
    secondary = [get(block, "ipv4CidrBlock") if isinstance(block, Mapping) else block
                 for block in _list(get(holder, "spec.network.vpc.secondaryCidrBlocks"))]
    if secondary:
        network["secondaryCIDRs"] = secondary
        provenance["spec.network.secondaryCIDRs"] = (oref, "spec.network.vpc.secondaryCidrBlocks")
    subnets = [s for s in _list(get(holder, "spec.network.subnets")) if isinstance(s, Mapping)]
    # CAPA's subnets as discovery would find them: a subnet is private unless CAPA says isPublic.
    known = [FoundSubnet(subnet_id=subnet_id, availability_zone=zone, route_table_id=table if isinstance(table, str)
                         else None, private=s.get("isPublic") is not True)
             for s in subnets for subnet_id, zone, table in ((_subnet_id(s), s.get("availabilityZone"),
                                                              s.get("routeTableId")),)
             if isinstance(subnet_id, str) and _zone(zone)]
    tables = chosen_tables(known, [s.route_table_id for s in known if s.route_table_id], hub.spec.discovery)
    if tables:
        network["routeTableIDs"] = tables
        provenance["spec.network.routeTableIDs"] = (oref, "spec.network.subnets[].routeTableId")
    per_zone = one_per_zone(s for s in known if s.private)
    if per_zone:
        network["transitSubnets"] = [{"subnetID": s.subnet_id, "availabilityZone": s.availability_zone}
                                     for s in per_zone]
        provenance["spec.network.transitSubnets"] = (oref, "spec.network.subnets")
    groups = get(holder, "status.networkStatus.securityGroups") or {}
    nodes = [get(groups, f"{role}.id") for role in NODE_ROLES if get(groups, f"{role}.id")]
    if nodes:
        network["nodeSecurityGroupIDs"] = _unique(nodes)
        provenance["spec.network.nodeSecurityGroupIDs"] = (oref, "status.networkStatus.securityGroups")
    return network


def _private_link(holder_kind: SourceKind, holder: Mapping[str, Any], ref: SourceRef,
                  oref: SourceRef) -> dict[str, Any] | Refused | Pending:
    asked = f"metadata.annotations[{PRIVATELINK_ANNOTATION}]"
    if holder_kind is AWS_MANAGED_CONTROL_PLANE:
        return Refused.one(ref, ref, asked,
                           "asks for PrivateLink, but an EKS control plane is AWS's own: the cluster has no load "
                           "balancer of its own for an endpoint service to publish (use EKS's private endpoint access; "
                           "the mesh works without PrivateLink)")
    given = get(holder, "spec.controlPlaneLoadBalancer.loadBalancerType")
    if given != "nlb":
        shown = f"is {given}" if given else "is not set (CAPA's default: classic)"
        return Refused.one(ref, oref, "spec.controlPlaneLoadBalancer.loadBalancerType",
                           f"{shown}: PrivateLink's endpoint service needs a network load balancer in front of the "
                           f"API server, so {asked} needs loadBalancerType nlb; a classic ELB cannot be published")
    name = get(holder, "status.networkStatus.apiServerElb.name")
    if not isinstance(name, str) or not name:
        return Pending(ref, _wait(oref, "status.networkStatus.apiServerElb.name",
                                  "CAPA has not reported the control-plane NLB yet"))
    return {"enabled": True, "loadBalancerName": name}


def reads(cluster: Mapping[str, Any]) -> list[tuple[SourceKind, str, str]]:
    """The objects a Cluster's references name, in its own namespace (the kind is decided when it is read)."""
    namespace = source_namespace(cluster) or ""
    out = []
    for field in ("spec.infrastructureRef", "spec.controlPlaneRef"):
        value = get(cluster, field)
        name = value.get("name") if isinstance(value, Mapping) else None
        for kind in (AWS_CLUSTER, AWS_MANAGED_CONTROL_PLANE):
            if isinstance(name, str) and value.get("kind") == kind.kind:
                out.append((kind, namespace, name))
    return out


def capi_part(cluster: Mapping[str, Any], related: Related, *, hub: HubConfig, asks: Asks,
              ref: SourceRef) -> Part | Refused | Pending:
    """The HubCluster inputs of a Cluster API Cluster (see the table above), or why not (yet)."""
    held = _holder(cluster, ref)
    if isinstance(held, (Refused, Pending)):
        return held
    holder_kind, name, via = held
    holder = related(holder_kind, ref.namespace, name)
    oref = SourceRef(holder_kind.group, holder_kind.kind, ref.namespace, name)
    if holder is None:
        return Pending(ref, _wait(ref, via, f"names {oref}, which is not there yet"))
    if not holder_kind.matches(holder) or source_namespace(holder) != ref.namespace or get(holder, "metadata.name") != name:
        return Refused.one(ref, ref, via, f"names {oref}, but what was read is {SourceRef.of(holder)}")
    provenance: Provenance = {"spec.infraID": (ref, "metadata.name"), "metadata.name": (ref, "metadata.name")}
    region = get(holder, "spec.region")
    if not isinstance(region, str) or not region:
        return Refused.one(ref, oref, "spec.region", "is not set: the cluster's AWS region is read from it")
    provenance["spec.region"] = (oref, "spec.region")
    host = get(cluster, "spec.controlPlaneEndpoint.host")
    endpoint_of = ref
    if not host:
        host, endpoint_of = get(holder, "spec.controlPlaneEndpoint.host"), oref
    if not isinstance(host, str) or not host:
        return Pending(ref, _wait(ref, "spec.controlPlaneEndpoint", "no API endpoint reported yet (on the Cluster or "
                                                                    f"its {holder_kind.kind})"))
    port = get(cluster if endpoint_of is ref else holder, "spec.controlPlaneEndpoint.port") or CAPA_DEFAULT_PORT
    provenance["spec.apiURL"] = (endpoint_of, "spec.controlPlaneEndpoint")
    spec: dict[str, Any] = {"region": region, "infraID": ref.name, "apiURL": f"https://{host}:{port}",
                            "network": _network(holder, hub, oref, provenance)}
    if asks.privatelink:
        link = _private_link(holder_kind, holder, ref, oref)
        if isinstance(link, (Refused, Pending)):
            return link
        spec["privateLink"] = link
        provenance["spec.privateLink"] = (oref, "status.networkStatus.apiServerElb.name")
    return Part(spec, provenance)
