"""The Kubernetes-style resources hubwright reads: HubConfig and Cluster.

Field names (camelCase aliases) are the API contract; Python attributes are
snake_case. Every check that needs only one object lives here; checks that
need several objects (role map, inventory, mesh) live in `stacks.resolve`.
"""
from __future__ import annotations

import difflib
import ipaddress
import re
from types import UnionType
from typing import Annotated, Any, Literal, Mapping, NamedTuple, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from stacks.errors import FieldError, InvalidSpec
from stacks.names import (API_VERSION, PARTITIONS, CLUSTER_ID, CLUSTER_ID_MAX, LABEL_MAX, MAX_CLUSTERS_ANNOTATION,
                          MAX_ENDPOINTS_ANNOTATION, PRINCIPAL_ARN, ROLE_ARN,
                          INGRESS_STATUS_KEY, JOIN_STATUS_KEY, RECONCILE_REQUEST_ANNOTATION, cluster_key, hostname_error,
                          parse_api_url, parse_host_port, stack_name)

# AWS region names: <geography>[-gov|-iso<x>]-<direction>-<number> (us-east-1, us-gov-west-1, cn-northwest-1,
# us-isob-east-1, ap-southeast-7, mx-central-1), and the European Sovereign Cloud's eusc-<country>-<direction>-<n>.
# A pattern, not a list: a region AWS opens tomorrow needs no release, and a typo (us-east1, useast-1,
# us-est-1) is still refused. The one place both the model and the CRD (stacks.crds) take it from.
REGION_PATTERN = (r"^(?:[a-z]{2}(?:-gov|-iso[a-z]?)?|eusc-[a-z]{2})"
                  r"-(?:central|north|south|east|west|northeast|northwest|southeast|southwest)-[1-9][0-9]?$")
REGION_RE = re.compile(REGION_PATTERN)


def region_error(value: str) -> str | None:
    """Why `value` is not an AWS region name, or None when it is one."""
    if REGION_RE.fullmatch(value):
        return None
    return f"{value!r} is not an AWS region name (<area>-<direction>-<number>, like us-east-1 or ap-southeast-7)"


def partition_of(region: str) -> str:
    return next((partition for prefix, partition in PARTITIONS if region.startswith(prefix)), "aws")


# --- field types -------------------------------------------------------------

def _pattern(regex: str | re.Pattern, what: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


def _region(value: str) -> str:
    problem = region_error(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _ipv4_network(value: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
    if net.version != 4:
        raise ValueError(f"{value!r} is not an IPv4 CIDR block")
    return net


# AWS VPC CIDR blocks are /16 to /28; anything wider in a route or a rule reaches beyond one VPC.
VPC_PREFIX_MIN, VPC_PREFIX_MAX = 16, 28


def _vpc_cidr(value: str) -> str:
    net = _ipv4_network(value)
    if not VPC_PREFIX_MIN <= net.prefixlen <= VPC_PREFIX_MAX:
        raise ValueError(f"{value!r} is not a VPC CIDR block (a VPC is /{VPC_PREFIX_MIN} to /{VPC_PREFIX_MAX})")
    return value


def _source_cidr(value: str) -> str:
    if _ipv4_network(value).prefixlen == 0:
        raise ValueError(f"{value!r} admits every address; list the networks that may connect")
    return value


def _api_url(value: str) -> str:
    parse_api_url(value)
    return value


def _domain(value: str) -> str:
    problem = hostname_error(value, min_labels=1)  # a top-level domain ("internal") is one label
    if problem is not None:
        raise ValueError(f"domain {value!r} {problem}")
    return value.lower()


def _host_port(value: str) -> str:
    parse_host_port(value)
    return value


def _bind(value: str) -> str:
    parse_host_port(value, bind=True)
    return value


def backend_rule(value: str) -> str:
    """A CIDR block (IPv4 or IPv6) or a domain suffix: where the shared proxy may send a cluster's traffic."""
    if "/" in value:
        try:
            return str(ipaddress.ip_network(value, strict=True))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a CIDR block ({exc})") from None
    return _domain(value)


AccountID = Annotated[str, Field(max_length=12), _pattern(r"\d{12}", "a 12-digit AWS account ID")]
Region = Annotated[str, Field(max_length=20), AfterValidator(_region)]
VpcCidr = Annotated[str, Field(max_length=18), AfterValidator(_vpc_cidr)]
SourceCidr = Annotated[str, Field(max_length=18), AfterValidator(_source_cidr)]
Domain = Annotated[str, Field(max_length=253), AfterValidator(_domain)]
NamespaceName = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=LABEL_MAX)]
# Integers the API server stores as int32; strict (Spec), so `true` or "5" is refused, not coerced.
INT32_MAX = 2**31 - 1
RoleARN = Annotated[str, Field(max_length=2048), _pattern(ROLE_ARN, "an IAM role ARN")]
PrincipalARN = Annotated[
    str, Field(max_length=2048),
    _pattern(PRINCIPAL_ARN, "an IAM principal ARN"),
]
VpcID = Annotated[str, Field(max_length=32), _pattern(r"vpc-[0-9a-z]+", "a VPC ID (vpc-...)")]
SubnetID = Annotated[str, Field(max_length=32), _pattern(r"subnet-[0-9a-z]+", "a subnet ID (subnet-...)")]
RouteTableID = Annotated[str, Field(max_length=32), _pattern(r"rtb-[0-9a-z]+", "a route table ID (rtb-...)")]
SecurityGroupID = Annotated[str, Field(max_length=32), _pattern(r"sg-[0-9a-z]+", "a security group ID (sg-...)")]
ApiURL = Annotated[str, Field(max_length=300), AfterValidator(_api_url)]
# host:port (stacks.names.parse_host_port): a DNS name, IPv4 or [IPv6], and a port; Bind may omit the host.
HostPort = Annotated[str, Field(max_length=300), AfterValidator(_host_port)]
Bind = Annotated[str, Field(max_length=300), AfterValidator(_bind)]
BackendRule = Annotated[str, Field(max_length=253), AfterValidator(backend_rule)]
# The installer's NLB is "{infraID}-int"; load balancer names stop at 32 characters.
InfraID = Annotated[str, Field(max_length=28), _pattern(r"[a-z0-9]([-a-z0-9]{0,26}[a-z0-9])?", "an infra ID (lowercase DNS label, at most 28 characters)")]


class Spec(BaseModel):
    """Base for every spec part: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
                              strict=True)


# --- HubConfig ----------------------------------------------------------------

class Credentials(Spec):
    """How the service reaches the hub account."""

    role_arn: RoleARN | None = Field(None, alias="roleARN",
        description="The role the service assumes for the hub account. Unset: its own identity (IRSA, instance "
                    "profile, environment).")
    external_id: str | None = Field(None, alias="externalID", min_length=2, max_length=1224,
        description="The external ID the role's trust policy requires, if any.")
    session_duration_seconds: int | None = Field(None, ge=900, le=43200,
        description="How long an assumed session lasts, in seconds (900 to 43200). Unset: the AWS default.")


class Subnet(Spec):
    """A subnet and its availability zone."""

    subnet_id: SubnetID = Field(alias="subnetID", description="The subnet's ID (subnet-...).")
    availability_zone: str = Field(min_length=1, max_length=32,
        description="The subnet's availability zone (e.g. us-east-1a).")


class EndpointVPC(Spec):
    """A hub VPC interface endpoints may be placed in."""

    region: Region = Field(description="The VPC's AWS region.")
    vpc_id: VpcID = Field(alias="vpcID", description="The VPC's ID (vpc-...) in the hub account.")
    cidr: VpcCidr = Field(description="The VPC's CIDR block (/16 to /28).")
    subnets: list[Subnet] = Field(min_length=1, max_length=32,
        description="The subnets the interface endpoints are placed in, at least one.")


class AssociatedVPC(Spec):
    """A hub VPC the clusters' private DNS zones are associated with."""

    region: Region = Field(description="The VPC's AWS region.")
    vpc_id: VpcID = Field(alias="vpcID", description="The VPC's ID (vpc-...) in the hub account.")
    cidr: VpcCidr | None = Field(None, description="The VPC's CIDR block. Unset: looked up in the hub account.")


class HubPrivateLink(Spec):
    """PrivateLink settings for every cluster."""

    # "Alias": an A ALIAS record to the endpoint's regional DNS name.
    # "ARecord": plain A records with the endpoint's IPs, for partitions without ALIAS (GovCloud).
    dns_record_type: Literal["Alias", "ARecord"] = Field("Alias",
        description="Alias: an A ALIAS record to the endpoint's regional DNS name. ARecord: plain A records with "
                    "the endpoint's IPs, for partitions without ALIAS (GovCloud).")
    # Interface endpoints per VPC (AWS default quota: 50); a full VPC is never chosen.
    endpoints_per_vpc: int = Field(50, ge=1, le=INT32_MAX, alias="endpointsPerVPC",
        description="Interface endpoints per endpoint VPC (AWS default quota: 50); a full VPC is never chosen.")


class MeshRule(Spec):
    """Traffic a mesh member admits from its peers."""

    protocol: Literal["tcp", "udp", "icmp", "-1"] = Field("-1",
        description="The protocol the rule admits: tcp, udp, icmp, or -1 for all.")
    from_port: int = Field(0, ge=-1, le=65535, description="First port of the range (tcp and udp), or the ICMP type.")
    to_port: int = Field(0, ge=-1, le=65535, description="Last port of the range (tcp and udp), or the ICMP code.")

    @model_validator(mode="after")
    def _ports(self) -> "MeshRule":
        if self.protocol in ("tcp", "udp") and not 0 < self.from_port <= self.to_port:
            raise ValueError(f"fromPort {self.from_port}..toPort {self.to_port} is not a port range")
        return self


class TransitGatewayRef(Spec):
    """Where a group's Transit Gateways live: one per member region, in this (network) account."""

    account_id: AccountID | None = Field(None, alias="accountID",
        description="The (network) account the group's Transit Gateways live in, one per member region. Unset: the "
                    "hub account.")
    # Amazon side ASN of the gateways: a 16-bit private ASN (the API server stores int32, too small for the
    # 32-bit private range). Groups on one network account share its gateways, so they must agree on it.
    asn: int = Field(64512, ge=64512, le=65534,
        description="Amazon side ASN of the gateways: a 16-bit private ASN (64512 to 65534). Groups on one network "
                    "account must agree on it.")


Topology = Literal["peering", "transitGateway"]


class MeshGroup(Spec):
    """A mesh group: clusters labelled with its name reach each other."""

    # Empty: all traffic from peer CIDRs (the design's default).
    rules: list[MeshRule] = Field(default_factory=list, max_length=60,
        description="The traffic members admit from each other (at most 60, AWS's inbound rules per group). Empty: "
                    "all traffic from peer CIDRs.")
    # "nodes": rules go on each cluster's node security groups; "dedicated": a group of its own per cluster.
    security_group: Literal["nodes", "dedicated"] = Field("nodes",
        description="Where the rules go: nodes (each cluster's node security groups) or dedicated (a group of its "
                    "own per cluster).")
    # Unset: the group is namespace-local (clusters of one namespace with this label; these settings apply
    # in every namespace). Set: one group spanning exactly these namespaces; a cluster of any other
    # namespace with the label is refused (NotInMeshGroup).
    namespaces: list[NamespaceName] | None = Field(None, max_length=1000,
        description="Unset: the group is namespace-local (clusters of one namespace with the label). Set: one group "
                    "spanning exactly these namespaces; a cluster of any other namespace with the label is refused "
                    "(NotInMeshGroup).")
    # How members reach each other (stacks.transit): VPC peerings, a Transit Gateway, or peering below
    # autoThreshold members and a Transit Gateway from there on (back to peering below autoPeeringBelow).
    topology: Literal["peering", "transitGateway", "auto"] = Field("peering",
        description="How members reach each other: peering (VPC peerings), transitGateway, or auto (peering below "
                    "autoThreshold members, a Transit Gateway from there on).")
    auto_threshold: int = Field(40, ge=2, le=5000,
        description="auto: the member count from which the group uses a Transit Gateway.")
    auto_peering_below: int | None = Field(None, ge=1, le=5000,
        description="auto: the member count below which the group goes back to peering (default: three quarters of "
                    "autoThreshold).")
    transit_gateway: TransitGatewayRef = Field(default_factory=TransitGatewayRef,
        description="Where the group's Transit Gateways live, and their ASN.")
    # Transit Gateway mode: each member routes only these to the gateway (one route per table, whatever the
    # group's size) instead of one route per other member. Each must contain every member CIDR.
    summary_cidrs: list[SourceCidr] = Field(default_factory=list, alias="summaryCIDRs", max_length=50,
        description="Transit Gateway mode: each member routes only these to the gateway, instead of one route per "
                    "other member. Each must contain every member CIDR.")
    # The ranges a member's spec.network.cidr must lie in (empty: any CIDR that is not the hub's).
    member_cidrs: list[SourceCidr] = Field(default_factory=list, alias="memberCIDRs", max_length=50,
        description="The ranges a member's spec.network.cidr must lie in. Empty: any CIDR that is not the hub's.")

    @model_validator(mode="after")
    def _hysteresis(self) -> "MeshGroup":
        if self.auto_peering_below is not None and self.auto_peering_below >= self.auto_threshold:
            raise ValueError(f"autoPeeringBelow {self.auto_peering_below} must be below autoThreshold "
                             f"{self.auto_threshold}, or the group would switch back and forth")
        return self

    @property
    def peering_below(self) -> int:
        return self.auto_peering_below if self.auto_peering_below is not None else self.auto_threshold * 3 // 4


class MeshQuotas(Spec):
    """One account's raised AWS quotas (HubConfig spec.mesh.accountQuotas); unset fields: spec.mesh's."""

    peerings_per_vpc: int | None = Field(None, ge=1, le=125, alias="peeringsPerVPC",
        description="This account's spec.mesh.peeringsPerVPC (unset: spec.mesh's).")
    routes_per_table: int | None = Field(None, ge=1, le=1000,
        description="This account's spec.mesh.routesPerTable (unset: spec.mesh's).")
    rules_per_security_group: int | None = Field(None, ge=1, le=1000,
        description="This account's spec.mesh.rulesPerSecurityGroup (unset: spec.mesh's).")
    attachments_per_transit_gateway: int | None = Field(None, ge=1, le=10000,
        description="This account's spec.mesh.attachmentsPerTransitGateway (unset: spec.mesh's).")
    route_tables_per_transit_gateway: int | None = Field(None, ge=1, le=1000,
        description="This account's spec.mesh.routeTablesPerTransitGateway (unset: spec.mesh's).")
    routes_per_transit_gateway: int | None = Field(None, ge=1, le=100000,
        description="This account's spec.mesh.routesPerTransitGateway (unset: spec.mesh's).")
    peering_attachments_per_transit_gateway: int | None = Field(None, ge=1, le=500,
        description="This account's spec.mesh.peeringAttachmentsPerTransitGateway (unset: spec.mesh's).")
    transit_gateways_per_vpc: int | None = Field(None, ge=1, le=20, alias="transitGatewaysPerVPC",
        description="This account's spec.mesh.transitGatewaysPerVPC (unset: spec.mesh's).")


class HubMesh(Spec):
    """Mesh groups and the AWS quotas they are planned within."""

    groups: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")], MeshGroup] = \
        Field(default_factory=dict, max_length=1000,
            description="The mesh groups, by name: clusters labelled with a group's name join it.")
    # AWS default quotas; raise them here (or per account, accountQuotas) once AWS has raised them for you.
    peerings_per_vpc: int = Field(50, ge=1, le=125, alias="peeringsPerVPC",
        description="AWS quota: active VPC peerings per VPC (default 50). Raise it once AWS has raised it for you.")
    routes_per_table: int = Field(50, ge=1, le=1000, description="AWS quota: routes per route table (default 50).")
    rules_per_security_group: int = Field(60, ge=1, le=1000,
        description="AWS quota: inbound rules per security group (default 60).")
    attachments_per_transit_gateway: int = Field(5000, ge=1, le=10000,
        description="AWS quota: attachments per Transit Gateway (default 5000).")
    route_tables_per_transit_gateway: int = Field(20, ge=1, le=1000,
        description="AWS quota: route tables per Transit Gateway (default 20).")
    routes_per_transit_gateway: int = Field(10000, ge=1, le=100000,
        description="AWS quota: routes per Transit Gateway, across its route tables (default 10000).")
    peering_attachments_per_transit_gateway: int = Field(50, ge=1, le=500,
        description="AWS quota: peering attachments per Transit Gateway (default 50).")
    transit_gateways_per_vpc: int = Field(5, ge=1, le=20, alias="transitGatewaysPerVPC",
        description="AWS quota: Transit Gateways attached per VPC (default 5).")
    account_quotas: dict[AccountID, MeshQuotas] = Field(default_factory=dict, max_length=10000,
        description="Per-account quotas, by account ID, for accounts where AWS raised them.")
    # Member accounts and the network account are in one AWS Organization with RAM sharing enabled: the
    # gateways are shared without invitations. Otherwise each member account accepts the share.
    organization: bool = Field(False,
        description="Member accounts and the network account are in one AWS Organization with RAM sharing enabled: "
                    "gateways are shared without invitations. Otherwise each member account accepts the share.")
    # Ranges the hub owns besides its endpoint and associated VPCs (on-premises, shared services): no member
    # CIDR may overlap them, as none may overlap those VPCs' (stacks.mesh.hub_cidrs.hub_cidrs).
    reserved_cidrs: list[SourceCidr] = Field(default_factory=list, alias="reservedCIDRs", max_length=1000,
        description="Ranges the hub owns besides its endpoint and associated VPCs (on-premises, shared services): "
                    "no member CIDR may overlap them.")

    def quota(self, account: str, name: str) -> int:
        """The quota `name` (a field of MeshQuotas) for `account`: its override, else spec.mesh's."""
        override = self.account_quotas.get(account)
        value = getattr(override, name) if override is not None else None
        return value if value is not None else getattr(self, name)


# Minimum HAProxy version of each wire mode: the receiving fetch and the sending keyword.
#   unique-id : fc_pp_unique_id + proxy-v2-options unique-id      (2.2)
#   custom-tlv: fc_pp_tlv(<type>) + set-proxy-v2-tlv-fmt(<type>)  (2.9)
WIRE_MODE_MIN_HAPROXY = {"unique-id": (2, 2), "custom-tlv": (2, 9)}
_HAPROXY_TAG = re.compile(r"haproxy[^/:@]*:v?(\d+)\.(\d+)")


class HubSharedIngress(Spec):
    """The shared ingress: one central proxy that reaches each cluster's API server."""

    bind: Bind = Field(":6443", description="The central proxy's listener ([host]:port).")
    address: HostPort | None = Field(None, description="What guests dial (host:port): the central load balancer.")
    # Where the central proxy may send a cluster's traffic (spec.sharedIngress.backend): CIDR blocks for
    # addresses, domain suffixes for names. Empty: nowhere. Loopback, link-local, the proxy's own address
    # and names, and the management cluster's API server are refused whatever this lists (stacks.ingress).
    allowed_backends: list[BackendRule] = Field(default_factory=list, max_length=1000,
        description="Where the central proxy may send a cluster's traffic: CIDR blocks for addresses, domain "
                    "suffixes for names. Empty: nowhere. Loopback, link-local, the proxy's own address and the "
                    "management API server are refused whatever this lists.")
    # "unique-id": ID in the PROXY v2 UNIQUE_ID TLV (HAProxy >= 2.2);
    # "custom-tlv": ID in a custom TLV of type `tlvType` (HAProxy >= 2.9).
    wire_mode: Literal["unique-id", "custom-tlv"] = Field("unique-id",
        description="unique-id: the cluster ID in the PROXY v2 UNIQUE_ID TLV (HAProxy >= 2.2). custom-tlv: in a "
                    "custom TLV of type tlvType (HAProxy >= 2.9).")
    # PROXY v2 reserves 0xE0-0xEF for application-specific (custom) TLVs; lower types have
    # meanings of their own (0x05 UNIQUE_ID, 0x20 SSL, ...) that receivers would misparse.
    tlv_type: int = Field(0xE0, ge=0xE0, le=0xEF, alias="tlvType",
        description="custom-tlv: the TLV type, in PROXY v2's application range 0xE0-0xEF (224-239).")
    namespace: NamespaceName = Field("hubwright-ingress", description="The namespace the central proxy runs in.")
    image: str = Field("haproxy:2.6", max_length=512,
        description="The HAProxy image of the central proxy and the node-side proxies.")
    replicas: int = Field(2, ge=2, le=INT32_MAX, description="Central proxy replicas (at least 2).")
    # The hubwright image: runs `python -m automation.adapters.files.haproxy` beside HAProxy so config
    # changes apply without dropping connections. Without it a change rolls the pods.
    reloader_image: str | None = Field(None, max_length=512,
        description="The hubwright image, run beside HAProxy so config changes apply without dropping connections. "
                    "Unset: a change rolls the pods.")

    @model_validator(mode="after")
    def _image_supports_wire_mode(self) -> "HubSharedIngress":
        found = _HAPROXY_TAG.search(self.image)
        need = WIRE_MODE_MIN_HAPROXY[self.wire_mode]
        if found and (int(found[1]), int(found[2])) < need:
            raise ValueError(
                f"image {self.image!r}: wireMode {self.wire_mode} needs HAProxy >= {need[0]}.{need[1]}"
            )
        return self


class Tenancy(Spec):
    """The hub administrator's tenancy rules (docs/security.md). A tenant is a namespace."""

    # A namespace without the owner-account annotation: "Refuse" its clusters (NamespaceNotOwned), or let
    # them claim accounts no namespace owns, first claimant first ("FirstClaim"; never the hub account).
    unowned_namespaces: Literal["Refuse", "FirstClaim"] = Field("Refuse",
        description="A namespace without the owner-account annotation: Refuse its clusters (NamespaceNotOwned), or "
                    "FirstClaim (they may claim accounts no namespace owns, first claimant first; never the hub "
                    "account).")
    # No cluster's API host may be equal to or under these (besides the domains AWS owns, always refused).
    reserved_domains: list[Domain] = Field(default_factory=list, max_length=1000,
        description="No cluster's API host may be equal to or under these (besides the domains AWS owns, always "
                    "refused).")
    # Per-namespace caps (stacks.tenancy.quota_refusals; unset: none): clusters with a stack, and PrivateLink
    # endpoints. A Namespace's annotations hubwright.io/max-clusters and hubwright.io/max-endpoints override
    # them. Over its cap a cluster is refused (QuotaExceeded) and takes no slot; a stack that exists keeps its own.
    max_clusters_per_namespace: int | None = Field(None, ge=0, le=INT32_MAX,
        description="Per-namespace cap on clusters with a stack (unset: none); the namespace annotation "
                    f"{MAX_CLUSTERS_ANNOTATION} overrides it. Over it a cluster is refused (QuotaExceeded).")
    max_endpoints_per_namespace: int | None = Field(None, ge=0, le=INT32_MAX,
        description="Per-namespace cap on PrivateLink endpoints (unset: none); the namespace annotation "
                    f"{MAX_ENDPOINTS_ANNOTATION} overrides it.")


class HubConfigSpec(Spec):
    """The hub: its account and region, how to reach it, its endpoint VPCs and role map, mesh groups,
    shared ingress, tenancy rules and registry limits."""

    account_id: AccountID = Field(alias="accountID",
        description="The hub account: where the endpoint VPCs are (12 digits, quoted in YAML).")
    region: Region = Field(description="The hub's AWS region, and the default of clusters that name none.")
    credentials: Credentials = Field(default_factory=Credentials,
        description="How the service reaches the hub account.")
    allowed_principal: PrincipalARN | None = Field(None,
        description="The IAM principal allowed to connect to the clusters' endpoint services. Unset: the hub "
                    "account's root.")
    role_account_map: dict[AccountID, RoleARN] = Field(default_factory=dict, max_length=10000,
        description="The role to assume in each member account, by account ID (a ConfigMap's entries override "
                    "these).")
    endpoint_vpc_inventory: list[EndpointVPC] = Field(default_factory=list, alias="endpointVPCInventory",
                                                      max_length=1000,
                                                      description="The hub VPCs interface endpoints may be placed in.")
    associated_vpcs: list[AssociatedVPC] = Field(default_factory=list, alias="associatedVPCs", max_length=300,
        description="Further hub VPCs the clusters' private DNS zones are associated with.")
    private_link: HubPrivateLink = Field(default_factory=HubPrivateLink,
        description="PrivateLink settings for every cluster.")
    mesh: HubMesh = Field(default_factory=HubMesh,
        description="Mesh groups (clusters that reach each other) and the AWS quotas they are planned within.")
    shared_ingress: HubSharedIngress | None = Field(None,
        description="The shared ingress: one central proxy that reaches each cluster's API server. Unset: off.")
    tenancy: Tenancy = Field(default_factory=Tenancy,
        description="The hub administrator's tenancy rules: namespace ownership, reserved domains, per-namespace "
                    "caps.")
    registry: HubRegistry = Field(default_factory=lambda: HubRegistry(),
        description="Limits on the registry's credentials.")


# --- Cluster ------------------------------------------------------------------

class Network(Spec):
    """The cluster's VPC, as the hub connects it."""

    vpc_id: VpcID = Field(alias="vpcID", description="The cluster's VPC (vpc-...).")
    cidr: VpcCidr = Field(description="The cluster VPC's CIDR block (/16 to /28).")
    # AWS: 200 route tables per VPC, 5 security groups per network interface (16 at most by quota).
    route_table_ids: list[RouteTableID] = Field(default_factory=list, alias="routeTableIDs", max_length=200,
        description="The route tables that get routes to the hub and to mesh peers (at most 200, AWS's per VPC).")
    node_security_group_ids: list[SecurityGroupID] = Field(default_factory=list, alias="nodeSecurityGroupIDs",
                                                           max_length=16,
                                                           description="The nodes' security groups, which get the "
                                                                       "mesh rules (at most 16).")
    # Transit Gateway mode: the subnets its attachment uses, at most one per availability zone.
    transit_subnets: list[Subnet] = Field(default_factory=list, alias="transitSubnets", max_length=32,
        description="Transit Gateway mode: the subnets the attachment uses, at most one per availability zone.")

    @model_validator(mode="after")
    def _one_subnet_per_zone(self) -> "Network":
        zones = [s.availability_zone for s in self.transit_subnets]
        twice = sorted({z for z in zones if zones.count(z) > 1})
        if twice:
            raise ValueError(f"transitSubnets: a Transit Gateway attachment takes one subnet per availability zone; "
                             f"{', '.join(twice)} has more than one")
        return self


class ClusterPrivateLink(Spec):
    """The cluster's API server, published to the hub over PrivateLink."""

    enabled: bool = Field(False,
        description="Publish the cluster's API server to the hub through a PrivateLink endpoint service.")


class ClusterSharedIngress(Spec):
    """The cluster's API server, reached through the hub's shared ingress."""

    enabled: bool = Field(False,
        description="Route the cluster's API through the hub's shared ingress (needs backend).")
    # The ID the guest sends: stacks.ingress.cluster_id_of (default "<namespace>.<name>"; the hub's rule).
    cluster_id: str | None = Field(None, alias="clusterID", pattern=f"^{CLUSTER_ID.pattern}$",
                                      max_length=CLUSTER_ID_MAX,
                                      description="The ID the guest sends. Unset: <namespace>.<name> (the hub's rule).")
    backend: HostPort | None = Field(None, description="host:port of the API server inside the management cluster.")
    proxy_bind: HostPort = Field("172.31.0.1:6443", description="host:port the node-side proxy listens on.")
    # Matched against the client address carried in the PROXY header (the guest's pods and nodes).
    allowed_source_cidrs: list[SourceCidr] = Field(default_factory=list, alias="allowedSourceCIDRs", max_length=100,
        description="Client addresses (from the PROXY header: the guest's pods and nodes) that may connect.")

    @model_validator(mode="after")
    def _backend(self) -> "ClusterSharedIngress":
        if self.enabled and not self.backend:
            raise ValueError("backend (host:port of the API server) is required when enabled")
        return self


# The registry's fields (docs/registry.md): free-form text and static facts, never read by resolve().
DisplayName = Annotated[str, Field(max_length=256)]
FactKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?$", max_length=63)]
Facts = Annotated[dict[FactKey, Annotated[str, Field(max_length=1024)]], Field(max_length=100)]
# A duration: hours, minutes and seconds as Go writes them ("24h", "1h30m", "90s"); stacks.registry.seconds.
Duration = Annotated[str, Field(pattern=r"^([0-9]{1,4}h)?([0-9]{1,6}m)?([0-9]{1,8}s)?$", min_length=2, max_length=24)]


class HubRegistry(Spec):
    """The hub administrator's limits on the registry's credentials (docs/registry.md)."""

    # The longest a bootstrap token (a Cluster's spec.tokenLifetime) or an agent's hub token may live: issuing
    # one for longer is refused, and the agent's token is capped to it (stacks.registry.token_lifetime).
    max_token_lifetime: Duration = Field("168h",
        description="The longest a bootstrap token or an agent's hub token may live (a duration: 168h, 1h30m, 90s). "
                    "Longer is refused; an agent's token is capped to it.")


# The AWS part of a Cluster: all of it or none. None: registered only (an inventory entry, no stack).
AWS_FIELDS = ("account_id", "infra_id", "api_url", "network")


class ClusterSpec(Spec):
    """A cluster: its AWS account, region, install and VPC (or none of them: registered only), and what to
    connect (PrivateLink, shared ingress)."""

    account_id: AccountID | None = Field(None, alias="accountID",
        description="The AWS account of the cluster's VPC (12 digits, quoted in YAML). With infraID, apiURL and "
                    "network, or none of them.")
    region: Region | None = Field(None,
        description="The cluster's AWS region. Unset: the namespace's default region, then the hub's.")
    infra_id: InfraID | None = Field(None, alias="infraID",
        description="The installer's infra ID (its NLB is <infraID>-int): a lowercase DNS label, at most 28 "
                    "characters.")
    api_url: ApiURL | None = Field(None, alias="apiURL",
        description="The cluster's API server URL (https://host:port).")
    network: Network | None = Field(None,
        description="The cluster's VPC: its CIDR, route tables and security groups.")
    private_link: ClusterPrivateLink = Field(default_factory=ClusterPrivateLink,
        description="Publish the API server to the hub over PrivateLink.")
    shared_ingress: ClusterSharedIngress = Field(default_factory=ClusterSharedIngress,
        description="Reach the API server through the hub's shared ingress.")
    display_name: DisplayName | None = Field(None, description="A name for people; the registry shows it.")
    facts: Facts = Field(default_factory=dict,
        description="Static facts about the cluster (key: value), kept by the registry; never read by the planner.")
    token_lifetime: Duration = Field("24h",
        description="How long a bootstrap token issued for this cluster stays valid (a duration, e.g. 24h).")

    @model_validator(mode="after")
    def _aws_all_or_none(self) -> "ClusterSpec":
        given = [name for name in AWS_FIELDS if getattr(self, name) is not None]
        if given and len(given) < len(AWS_FIELDS):
            missing = [type(self).model_fields[name].alias or name for name in AWS_FIELDS if getattr(self, name) is None]
            raise ValueError(f"{', '.join(missing)} missing: a cluster gives accountID, infraID, apiURL and "
                             "network together, or none of them (registered only, no stack)")
        return self

    @property
    def provisioned(self) -> bool:
        """True when the cluster has its AWS part: only then does it get a stack."""
        return self.network is not None

    @property
    def aws(self) -> "AwsPart":
        """The AWS part of a provisioned cluster, for what only those have (a stack, a placement, a mesh share).
        Raises ValueError on a registered-only one: a caller that reaches it there is wrong."""
        if self.account_id is None or self.infra_id is None or self.api_url is None or self.network is None:
            raise ValueError("a registered-only cluster has no AWS part (accountID, infraID, apiURL, network)")
        return AwsPart(self.account_id, self.infra_id, self.api_url, self.network)


class AwsPart(NamedTuple):
    """ClusterSpec's AWS fields, all given (ClusterSpec.aws)."""

    account_id: str
    infra_id: str
    api_url: str
    network: Network


class ObjectMeta(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    namespace: NamespaceName | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    finalizers: list[str] = Field(default_factory=list)


class Resource(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    api_version: Literal["hubwright.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta
    status: dict[str, Any] | None = None  # written by the service; see stacks.status


class HubConfig(Resource):
    kind: Literal["HubConfig"] = "HubConfig"
    spec: HubConfigSpec

    @property
    def ref(self) -> str:
        return f"HubConfig {self.metadata.name}"


class Cluster(Resource):
    kind: Literal["HubCluster"] = "HubCluster"
    spec: ClusterSpec

    @property
    def key(self) -> str:
        """namespace/name: the identity of the cluster and of its stack."""
        return cluster_key(self.metadata.namespace, self.metadata.name)

    @property
    def stack(self) -> str:
        """namespace.name: the cluster's Pulumi stack."""
        return stack_name(self.metadata.namespace, self.metadata.name)

    @property
    def ref(self) -> str:
        return f"HubCluster {self.key}"


class Namespace(BaseModel):
    """A core/v1 Namespace, for its owner-account and default-region annotations."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    api_version: Literal["v1"] = Field("v1", alias="apiVersion")
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta

    @property
    def ref(self) -> str:
        return f"Namespace {self.metadata.name}"


# --- loading ------------------------------------------------------------------

def _describe(doc: Any) -> str:
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, ns, kind = meta.get("name"), meta.get("namespace"), doc.get("kind")
        name = name if isinstance(name, str) else "?"  # a document is described before it is validated
        ns = ns if isinstance(ns, str) else None
        return f"{kind if isinstance(kind, str) else 'object'} {ns + '/' if ns else ''}{name}"
    return "object"


def _inner(tp: Any) -> Any:
    """`tp` without Annotated's metadata and without `| None`."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, UnionType) and type(None) in get_args(tp):
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _field_of(model: type[BaseModel], name: str) -> Any:
    """The type of `model`'s field named `name` on the wire (its alias), or None."""
    for attr, info in model.model_fields.items():
        if name in (info.alias, attr):
            return info.annotation
    return None


def _wire_fields(model: type[BaseModel]) -> list[str]:
    return [info.alias or attr for attr, info in model.model_fields.items()]


def _locate(loc: tuple, model: type[BaseModel]) -> tuple[str, Any, bool]:
    """(the field path as people write it, the type that holds the last part, whether the error is in a map key).

    Fields are dotted (spec.network.cidr), list items and map keys in brackets (spec.network.routeTableIDs[2],
    metadata.annotations[hubwright.io/owner-account-id]): walked along the model, so a key with dots is one key.
    """
    path, parent, in_key = "", None, False
    tp: Any = model
    for part in loc:
        tp = _inner(tp)
        if part == "[key]":  # pydantic's marker: the map key itself is wrong, not its value
            in_key = True
            continue
        parent = tp
        if isinstance(part, int):
            path += f"[{part}]"
            args = get_args(tp)
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            path += f".{part}" if path else str(part)
            tp = _field_of(tp, part)
        elif get_origin(tp) in (dict, Mapping) or tp is dict:
            path += f"[{part}]"
            args = get_args(tp)
            tp = args[1] if len(args) == 2 else None
        else:  # a tag of a union member: not a field
            continue
    return path, parent, in_key


def _quote_hint(value: Any) -> str:
    """What to write instead of the number YAML read where text belongs (an account ID, an annotation value)."""
    if isinstance(value, bool):
        return "YAML read a boolean (true, yes, on, ...); quote the value"
    if isinstance(value, int):
        octal = f"0{value:o}"
        if len(str(value)) != 12 and len(octal) == 12:  # 0-prefixed digits 0-7: YAML 1.1 reads them as octal
            return f"YAML read {octal} as the octal number {value}; quote it: \"{octal}\""
        return f"YAML read {value} as a number; quote it: \"{value}\""
    return f"YAML read {value!r} as a number; quote it"


def _reason(err: ErrorDetails, path: str, parent: Any, in_key: bool) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        name = str(err["loc"][-1])
        fields = _wire_fields(parent) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        near = difflib.get_close_matches(name, fields, n=1, cutoff=0.6) or \
            [f for f in fields if f.lower() == name.lower()]
        where = path.rsplit(".", 1)[0] + "." if "." in path else ""
        return f"unknown field; did you mean {where}{near[0]}?" if near else \
            f"unknown field (known here: {', '.join(fields)})" if fields else "unknown field"
    if err["type"] == "string_type" and isinstance(err.get("input"), (int, float)):
        msg = f"{msg}: {_quote_hint(err['input'])}"
    return f"not a valid key: {msg}" if in_key else msg


def _field_error(where: str, err: ErrorDetails, model: type[BaseModel]) -> FieldError:
    path, parent, in_key = _locate(tuple(err["loc"]), model)
    return FieldError(where, path, _reason(err, path, parent, in_key))


# The metadata of a Cluster that resolve() reads. `resolved_part` keeps only these (with the spec and
# status.meshJoin); the service parses that part and re-resolves when it changes, so a field outside it
# (resourceVersion, finalizers, managedFields, the status the service writes) can never change a stack.
RESOLVED_METADATA = ("name", "namespace", "labels", "annotations", "generation", "creationTimestamp",
                     "deletionTimestamp")


def resolved_part(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Cluster document that resolve() reads: what the service parses and watches for change."""
    meta = doc.get("metadata")
    part = {key: value for key, value in doc.items() if key not in ("metadata", "status")}
    part["metadata"] = {k: meta[k] for k in RESOLVED_METADATA if k in meta} if isinstance(meta, Mapping) else meta
    annotations = part["metadata"].get("annotations") if isinstance(part["metadata"], Mapping) else None
    if isinstance(annotations, Mapping) and RECONCILE_REQUEST_ANNOTATION in annotations:  # a request, not an input
        part["metadata"]["annotations"] = {k: v for k, v in annotations.items() if k != RECONCILE_REQUEST_ANNOTATION}
    status = doc.get("status")
    kept = {key: status[key] for key in (JOIN_STATUS_KEY, INGRESS_STATUS_KEY)
            if isinstance(status, Mapping) and status.get(key)}
    if kept:
        part["status"] = kept
    return part


def parse(doc: dict, *, source: str | None = None) -> HubConfig | Cluster | Namespace:
    """Validate one Kubernetes-style document. Raises InvalidSpec naming object, field and reason."""
    where = f"{_describe(doc)}{f' ({source})' if source else ''}"
    kind = doc.get("kind") if isinstance(doc, dict) else None
    models: dict[str, type[HubConfig] | type[Cluster] | type[Namespace]] = {
        "HubConfig": HubConfig, "HubCluster": Cluster, "Namespace": Namespace}
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidSpec.one(where, "kind", f"expected HubConfig, HubCluster or Namespace, got {kind!r}")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        errors = [_field_error(where, err, model) for err in exc.errors()]
        raise InvalidSpec(errors) from None
