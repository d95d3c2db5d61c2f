"""A HyperShift `HostedCluster` (hypershift.openshift.io v1alpha1 or v1beta1) as a HubCluster's inputs. Pure; the
field paths are those of HyperShift's CRDs (tests/test_sources_schema.py walks them in both versions).

| HubCluster input          | read from                                                                       |
| infraID                   | spec.infraID (HyperShift sets it when the HostedCluster leaves it out)          |
| region                    | spec.platform.aws.region                                                        |
| apiURL                    | status.controlPlaneEndpoint.{host, port}: once HyperShift has published the API |
|                           | under a name of the platform's (never the load balancer's amazonaws.com name)   |
| network.vpcID             | spec.platform.aws.cloudProviderConfig.vpc                                       |
| network.cidr, secondary   | spec.networking.machineNetwork[].cidr, IPv4 only (a plan folder's v1alpha1:      |
|                           | spec.networking.machineCIDR, which an API server storing v1beta1 prunes)        |
| tags                      | spec.platform.aws.resourceTags[].{key, value}: HyperShift's tags for the cluster's |
|                           | AWS resources, on what hubwright builds in the cluster's account too             |
| sharedIngress.backend     | kube-apiserver.<control-plane namespace>.svc:6443, once that namespace is proven |
|                           | this HostedCluster's (below); the annotation <group>/shared-ingress asks for it  |

Refused: another platform than AWS, a region missing, spec.platform.aws.sharedVPC (newer HyperShift: the VPC is
another account's). Checked, not copied: spec.platform.aws.cloudProviderConfig.zone must be a zone of the region (a Transit Gateway
attachment needs a subnet in every zone the nodes use, so the one subnet HyperShift names for its cloud provider
is left to discovery, which picks one per zone); spec.platform.aws.endpointAccess decides PrivateLink (below);
the APIServer's spec.services[].servicePublishingStrategy is named while the endpoint is not reported.

**The control-plane namespace is trusted only through HyperShift's own link.** HyperShift runs the control plane
in the namespace `<namespace>-<name>` (dots in the name become dashes), which a tenant cannot choose and which may
be another tenant's: tenant `acme`'s HostedCluster `prod` and the namespace `acme-prod` meet. A route is derived
only when that namespace (a) carries HyperShift's label hypershift.openshift.io/hosted-control-plane: "true" and
owns no account (a tenant's namespace is never a control plane's), and (b) holds the HostedControlPlane HyperShift
made for this HostedCluster: named as it, with HyperShift's annotation hypershift.openshift.io/cluster naming its
namespace/name (HyperShift's owner link: an ownerReference cannot cross namespaces). Otherwise it is refused, and
a missing namespace or HostedControlPlane is waited for.

**PrivateLink, never twice and never elsewhere.** endpointAccess Private or PublicAndPrivate means HyperShift
builds its own (its AWSEndpointService); with Public, the API server is published by this hub's own load
balancer, not by one in the cluster's VPC, so there is nothing of the cluster's for an endpoint service to
publish. Either way a HostedCluster asking hubwright for PrivateLink is refused, naming HyperShift's field.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.errors import FieldError
from stacks.model.hub import HubConfig
from stacks.names import OWNER_ACCOUNT_ANNOTATION, PRIVATELINK_ANNOTATION, SHARED_INGRESS_ANNOTATION, aws_domain_of
from stacks.sources.kinds import HOSTED_CONTROL_PLANE, NAMESPACE, SourceKind, SourceRef
from stacks.sources.optin import source_namespace
from stacks.sources.outcome import Pending, Refused
from stacks.sources.part import Asks, Part, Provenance, Related, get, text

KAS_SERVICE = "kube-apiserver"  # HyperShift's Service of the hosted kube-apiserver, in the control-plane namespace
KAS_SERVICE_PORT = 6443  # its port (HyperShift's config.KASSVCPort)
CONTROL_PLANE_LABEL = "hypershift.openshift.io/hosted-control-plane"  # on every control-plane namespace
CLUSTER_LINK = "hypershift.openshift.io/cluster"  # on a HostedControlPlane: its HostedCluster's namespace/name
# The guests' kube-apiserver-proxy (a static pod on every node) is HyperShift's: it writes it through the NodePool's
# ignition payload, so hubwright's install answer never carries one for a HostedCluster's HubCluster.
GUEST_PROXY_WRITER = "HyperShift (kube-apiserver-proxy, through the NodePool's ignition)"
ENDPOINT_ACCESS = "spec.platform.aws.endpointAccess"
RESOURCE_TAGS = "spec.platform.aws.resourceTags"
SHARED_VPC = "spec.platform.aws.sharedVPC"  # newer HyperShift: the VPC is another account's
HYPERSHIFT_PRIVATELINK = ("Private", "PublicAndPrivate")


def control_plane_namespace(namespace: str, name: str) -> str:
    """The namespace HyperShift runs a HostedCluster's control plane in (its manifests.HostedControlPlaneNamespace)."""
    return f"{namespace}-{name.replace('.', '-')}"


def reads(hosted: Mapping[str, Any]) -> list[tuple[SourceKind, str, str]]:
    """Its control-plane namespace and the HostedControlPlane in it (read when it asks for shared ingress)."""
    namespace, name = source_namespace(hosted), text(get(hosted, "metadata.name"))
    if namespace is None or name is None:
        return []
    cpns = control_plane_namespace(namespace, name)
    return [(NAMESPACE, "", cpns), (HOSTED_CONTROL_PLANE, cpns, name)]


def _machine_cidrs(hosted: Mapping[str, Any]) -> tuple[list[Any], str]:
    """The machine network's CIDRs as written, and the field they came from."""
    listed = get(hosted, "spec.networking.machineNetwork")
    found = [get(entry, "cidr") for entry in listed if isinstance(entry, Mapping)] if isinstance(listed, list) else []
    unique: list[Any] = []  # as written, without repeats, whatever they are (a value the model refuses is named)
    for cidr in found:  # a dual-stack cluster's IPv6 machine network is not a VPC CIDR block hubwright routes
        if cidr is not None and cidr not in unique and not (isinstance(cidr, str) and ":" in cidr):
            unique.append(cidr)
    if unique:
        return unique, "spec.networking.machineNetwork[].cidr"
    single = get(hosted, "spec.networking.machineCIDR")  # v1alpha1 only
    return ([single], "spec.networking.machineCIDR") if single is not None else ([], "")


def _network(hosted: Mapping[str, Any], ref: SourceRef, provenance: Provenance) -> dict[str, Any]:
    network: dict[str, Any] = {}
    vpc = get(hosted, "spec.platform.aws.cloudProviderConfig.vpc")
    if vpc is not None:
        network["vpcID"] = vpc
        provenance["spec.network.vpcID"] = (ref, "spec.platform.aws.cloudProviderConfig.vpc")
    cidrs, field = _machine_cidrs(hosted)
    if cidrs:
        network["cidr"] = cidrs[0]
        provenance["spec.network.cidr"] = (ref, field)
    if cidrs[1:]:
        network["secondaryCIDRs"] = cidrs[1:]
        provenance["spec.network.secondaryCIDRs"] = (ref, field)
    return network


def _tags(hosted: Mapping[str, Any], ref: SourceRef) -> dict[str, Any] | Refused:
    """resourceTags as a map (the model checks AWS's rules and refuses the keys it sets itself, by name)."""
    listed = get(hosted, RESOURCE_TAGS)
    tags: dict[str, Any] = {}
    for entry in listed if isinstance(listed, list) else []:
        key = get(entry, "key") if isinstance(entry, Mapping) else None
        if not isinstance(key, str) or key in tags:
            return Refused.one(ref, ref, RESOURCE_TAGS, f"holds {entry!r}: every entry needs a key of its own")
        tags[key] = entry.get("value")
    return tags


def _api_server_publishing(hosted: Mapping[str, Any]) -> str | None:
    services = get(hosted, "spec.services")
    for entry in services if isinstance(services, list) else []:
        if isinstance(entry, Mapping) and entry.get("service") == "APIServer":
            return text(get(entry, "servicePublishingStrategy.type"))
    return None


def _private_link(hosted: Mapping[str, Any], ref: SourceRef) -> Refused:
    access = text(get(hosted, ENDPOINT_ACCESS)) or "Public"  # the CRD's default
    asked = f"metadata.annotations[{PRIVATELINK_ANNOTATION}]"
    if access in HYPERSHIFT_PRIVATELINK:
        return Refused.one(ref, ref, ENDPOINT_ACCESS,
                           f"is {access}, and {asked} asks hubwright for PrivateLink too: HyperShift builds its own "
                           "(an AWSEndpointService and the private zone of the API host), and Route 53 refuses two "
                           "private zones of one name on one VPC; keep one of the two")
    return Refused.one(ref, ref, asked,
                       f"asks for PrivateLink, but {ENDPOINT_ACCESS} is {access}: a hosted control plane's API server "
                       "runs on this hub and is published by the hub's load balancer, not by one in the cluster's "
                       "VPC, so there is nothing of the cluster's to publish; HyperShift's own PrivateLink is "
                       "endpointAccess PublicAndPrivate or Private")


def _control_plane(related: Related, ref: SourceRef) -> str | Refused | Pending:
    """The control-plane namespace of the HostedCluster `ref`, once proven its (module docstring)."""
    cpns = control_plane_namespace(ref.namespace, ref.name)
    asked = f"metadata.annotations[{SHARED_INGRESS_ANNOTATION}]"
    namespace = related(NAMESPACE, "", cpns)
    if namespace is None:
        return Pending(ref, FieldError(str(ref), asked, f"HyperShift has not made its control-plane namespace "
                                                        f"{cpns} yet"))
    labels, account = get(namespace, "metadata.labels"), _annotation(namespace, OWNER_ACCOUNT_ANNOTATION)
    if account is not None:
        return Refused.one(ref, ref, asked,
                           f"asks for a route to its control plane, but namespace {cpns}, where HyperShift would "
                           f"run it (<namespace>-<name>), is a tenant's namespace: it owns account {account} "
                           f"({OWNER_ACCOUNT_ANNOTATION}); rename the HostedCluster")
    if not isinstance(labels, Mapping) or labels.get(CONTROL_PLANE_LABEL) != "true":
        return Refused.one(ref, ref, asked,
                           f"asks for a route to its control plane, but namespace {cpns} is not a HyperShift "
                           f"control-plane namespace (it has no label {CONTROL_PLANE_LABEL}: \"true\")")
    hcp = related(HOSTED_CONTROL_PLANE, cpns, ref.name)
    hcp_ref = SourceRef(HOSTED_CONTROL_PLANE.group, HOSTED_CONTROL_PLANE.kind, cpns, ref.name)
    if hcp is None:
        return Pending(ref, FieldError(str(ref), asked, f"HyperShift has not made its {hcp_ref} yet"))
    link = _annotation(hcp, CLUSTER_LINK)
    if link != f"{ref.namespace}/{ref.name}":
        return Refused.one(ref, hcp_ref, f"metadata.annotations[{CLUSTER_LINK}]",
                           f"is {link!r}, not {ref.namespace}/{ref.name}: namespace {cpns} holds another "
                           "HostedCluster's control plane, so this one is not routed there")
    return cpns


def _annotation(doc: Mapping[str, Any], key: str) -> Any:
    annotations = get(doc, "metadata.annotations")
    return annotations.get(key) if isinstance(annotations, Mapping) else None


def _platform(hosted: Mapping[str, Any], ref: SourceRef) -> Refused | None:
    if isinstance(get(hosted, "spec.platform.aws"), Mapping):
        return None
    shown = text(get(hosted, "spec.platform.type")) or "not AWS"
    return Refused.one(ref, ref, "spec.platform.aws", f"is not set (the platform is {shown}): only AWS clusters are "
                                                      "connected")


def hypershift_part(hosted: Mapping[str, Any], related: Related, *, hub: HubConfig, asks: Asks,
                    ref: SourceRef) -> Part | Refused | Pending:
    """The HubCluster inputs of a HostedCluster (see the table above), or why not (yet)."""
    refused = _platform(hosted, ref)
    if refused is not None:
        return refused
    if asks.privatelink:
        return _private_link(hosted, ref)
    if get(hosted, SHARED_VPC) is not None:
        return Refused.one(ref, ref, SHARED_VPC,
                           "is set: the cluster's VPC belongs to another account than its namespace's, and hubwright "
                           "builds a cluster's routes, rules and peerings in its namespace's account only")
    region = text(get(hosted, "spec.platform.aws.region"))
    if region is None:
        return Refused.one(ref, ref, "spec.platform.aws.region", "is not set")
    zone = text(get(hosted, "spec.platform.aws.cloudProviderConfig.zone"))
    if zone is not None and not zone.startswith(region):
        return Refused.one(ref, ref, "spec.platform.aws.cloudProviderConfig.zone",
                           f"is {zone}, which is not a zone of spec.platform.aws.region {region}")
    infra_id = text(get(hosted, "spec.infraID"))
    if infra_id is None:
        return Pending(ref, FieldError(str(ref), "spec.infraID", "HyperShift has not set it yet"))
    host, port = get(hosted, "status.controlPlaneEndpoint.host"), get(hosted, "status.controlPlaneEndpoint.port")
    if not text(host):
        published = _api_server_publishing(hosted)
        how = f" (its APIServer is published as {published})" if published else ""
        return Pending(ref, FieldError(str(ref), "status.controlPlaneEndpoint",
                                       f"HyperShift has not reported the API endpoint yet{how}"))
    owned = aws_domain_of(str(host))
    if owned is not None:
        return Refused.one(ref, ref, "status.controlPlaneEndpoint.host",
                           f"is {host}, the load balancer's own name under {owned}: the API host "
                           "names the hub's private zone for the cluster, and one under AWS's domain would shadow AWS's "
                           "endpoints; publish the APIServer under a name of yours (its servicePublishingStrategy's "
                           "route.hostname or loadBalancer.hostname: HyperShift's --external-dns-domain)")
    provenance: Provenance = {"spec.infraID": (ref, "spec.infraID"), "spec.region": (ref, "spec.platform.aws.region"),
                              "spec.apiURL": (ref, "status.controlPlaneEndpoint"), "metadata.name": (ref, "metadata.name")}
    spec: dict[str, Any] = {"region": region, "infraID": infra_id,
                            "apiURL": f"https://{host}:{port if isinstance(port, int) else KAS_SERVICE_PORT}",
                            "network": _network(hosted, ref, provenance)}
    tags = _tags(hosted, ref)
    if isinstance(tags, Refused):
        return tags
    if tags:
        spec["tags"] = tags
        provenance["spec.tags"] = (ref, RESOURCE_TAGS)
    if asks.shared_ingress:
        cpns = _control_plane(related, ref)
        if isinstance(cpns, (Refused, Pending)):
            return cpns
        spec["sharedIngress"] = {"enabled": True, "backend": f"{KAS_SERVICE}.{cpns}.svc:{KAS_SERVICE_PORT}",
                                 "nodeProxy": "External"}  # HyperShift writes its guests' kube-apiserver-proxy
        provenance["spec.sharedIngress"] = (ref, f"metadata.annotations[{SHARED_INGRESS_ANNOTATION}]")
    return Part(spec, provenance)
