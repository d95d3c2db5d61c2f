"""The Kubernetes-style resources hubwright reads: HubConfig and Cluster.

Field names (camelCase aliases) are the API contract; Python attributes are
snake_case. Every check that needs only one object lives here; checks that
need several objects (role map, inventory, mesh) live in `stacks.resolve`.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from stacks.errors import FieldError, InvalidSpec
from stacks.names import (API_VERSION, CLUSTER_ID, CLUSTER_ID_MAX, LABEL_MAX, PRINCIPAL_ARN, ROLE_ARN,
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


# Partitions by region prefix, most specific first (the ARN partition a region's roles live in).
_PARTITIONS = (("us-gov-", "aws-us-gov"), ("cn-", "aws-cn"), ("us-isob-", "aws-iso-b"), ("us-isof-", "aws-iso-f"),
               ("eu-isoe-", "aws-iso-e"), ("us-iso-", "aws-iso"), ("eusc-", "aws-eusc"))


def partition_of(region: str) -> str:
    return next((partition for prefix, partition in _PARTITIONS if region.startswith(prefix)), "aws")


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
    role_arn: RoleARN | None = Field(None, alias="roleARN")
    external_id: str | None = Field(None, alias="externalID", min_length=2, max_length=1224)
    session_duration_seconds: int | None = Field(None, ge=900, le=43200)


class Subnet(Spec):
    subnet_id: SubnetID = Field(alias="subnetID")
    availability_zone: str = Field(min_length=1, max_length=32)


class EndpointVPC(Spec):
    region: Region
    vpc_id: VpcID = Field(alias="vpcID")
    cidr: VpcCidr
    subnets: list[Subnet] = Field(min_length=1, max_length=32)


class AssociatedVPC(Spec):
    region: Region
    vpc_id: VpcID = Field(alias="vpcID")
    cidr: VpcCidr | None = None  # looked up in the hub account when absent


class HubPrivateLink(Spec):
    # "Alias": an A ALIAS record to the endpoint's regional DNS name.
    # "ARecord": plain A records with the endpoint's IPs, for partitions without ALIAS (GovCloud).
    dns_record_type: Literal["Alias", "ARecord"] = "Alias"
    # Interface endpoints per VPC (AWS default quota: 50); a full VPC is never chosen.
    endpoints_per_vpc: int = Field(50, ge=1, le=INT32_MAX, alias="endpointsPerVPC")


class MeshRule(Spec):
    protocol: Literal["tcp", "udp", "icmp", "-1"] = "-1"
    from_port: int = Field(0, ge=-1, le=65535)
    to_port: int = Field(0, ge=-1, le=65535)

    @model_validator(mode="after")
    def _ports(self) -> "MeshRule":
        if self.protocol in ("tcp", "udp") and not 0 < self.from_port <= self.to_port:
            raise ValueError(f"fromPort {self.from_port}..toPort {self.to_port} is not a port range")
        return self


class TransitGatewayRef(Spec):
    """Where a group's Transit Gateways live: one per member region, in this (network) account."""

    account_id: AccountID | None = Field(None, alias="accountID")  # None: the hub account
    # Amazon side ASN of the gateways: a 16-bit private ASN (the API server stores int32, too small for the
    # 32-bit private range). Groups on one network account share its gateways, so they must agree on it.
    asn: int = Field(64512, ge=64512, le=65534)


Topology = Literal["peering", "transitGateway"]


class MeshGroup(Spec):
    # Empty: all traffic from peer CIDRs (the design's default).
    rules: list[MeshRule] = Field(default_factory=list, max_length=60)  # AWS: 60 inbound rules per group
    # "nodes": rules go on each cluster's node security groups; "dedicated": a group of its own per cluster.
    security_group: Literal["nodes", "dedicated"] = "nodes"
    # Unset: the group is namespace-local (clusters of one namespace with this label; these settings apply
    # in every namespace). Set: one group spanning exactly these namespaces; a cluster of any other
    # namespace with the label is refused (NotInMeshGroup).
    namespaces: list[NamespaceName] | None = Field(None, max_length=1000)
    # How members reach each other (stacks.transit): VPC peerings, a Transit Gateway, or peering below
    # autoThreshold members and a Transit Gateway from there on (back to peering below autoPeeringBelow).
    topology: Literal["peering", "transitGateway", "auto"] = "peering"
    auto_threshold: int = Field(40, ge=2, le=5000)
    auto_peering_below: int | None = Field(None, ge=1, le=5000)  # default: three quarters of autoThreshold
    transit_gateway: TransitGatewayRef = Field(default_factory=TransitGatewayRef)
    # Transit Gateway mode: each member routes only these to the gateway (one route per table, whatever the
    # group's size) instead of one route per other member. Each must contain every member CIDR.
    summary_cidrs: list[SourceCidr] = Field(default_factory=list, alias="summaryCIDRs", max_length=50)
    # The ranges a member's spec.network.cidr must lie in (empty: any CIDR that is not the hub's).
    member_cidrs: list[SourceCidr] = Field(default_factory=list, alias="memberCIDRs", max_length=50)

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

    peerings_per_vpc: int | None = Field(None, ge=1, le=125, alias="peeringsPerVPC")
    routes_per_table: int | None = Field(None, ge=1, le=1000)
    rules_per_security_group: int | None = Field(None, ge=1, le=1000)
    attachments_per_transit_gateway: int | None = Field(None, ge=1, le=10000)
    route_tables_per_transit_gateway: int | None = Field(None, ge=1, le=1000)
    routes_per_transit_gateway: int | None = Field(None, ge=1, le=100000)
    peering_attachments_per_transit_gateway: int | None = Field(None, ge=1, le=500)
    transit_gateways_per_vpc: int | None = Field(None, ge=1, le=20, alias="transitGatewaysPerVPC")


class HubMesh(Spec):
    groups: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")], MeshGroup] = \
        Field(default_factory=dict, max_length=1000)
    # AWS default quotas; raise them here (or per account, accountQuotas) once AWS has raised them for you.
    peerings_per_vpc: int = Field(50, ge=1, le=125, alias="peeringsPerVPC")
    routes_per_table: int = Field(50, ge=1, le=1000)
    rules_per_security_group: int = Field(60, ge=1, le=1000)  # inbound rules
    attachments_per_transit_gateway: int = Field(5000, ge=1, le=10000)
    route_tables_per_transit_gateway: int = Field(20, ge=1, le=1000)
    routes_per_transit_gateway: int = Field(10000, ge=1, le=100000)  # across its route tables
    peering_attachments_per_transit_gateway: int = Field(50, ge=1, le=500)
    transit_gateways_per_vpc: int = Field(5, ge=1, le=20, alias="transitGatewaysPerVPC")
    account_quotas: dict[AccountID, MeshQuotas] = Field(default_factory=dict, max_length=10000)
    # Member accounts and the network account are in one AWS Organization with RAM sharing enabled: the
    # gateways are shared without invitations. Otherwise each member account accepts the share.
    organization: bool = False
    # Ranges the hub owns besides its endpoint and associated VPCs (on-premises, shared services): no member
    # CIDR may overlap them, as none may overlap those VPCs' (stacks.mesh.hub_cidrs).
    reserved_cidrs: list[SourceCidr] = Field(default_factory=list, alias="reservedCIDRs", max_length=1000)

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
    bind: Bind = ":6443"  # the central proxy's listener ("[host]:port")
    address: HostPort | None = None  # what guests dial: the central load balancer
    # Where the central proxy may send a cluster's traffic (spec.sharedIngress.backend): CIDR blocks for
    # addresses, domain suffixes for names. Empty: nowhere. Loopback, link-local, the proxy's own address
    # and names, and the management cluster's API server are refused whatever this lists (stacks.ingress).
    allowed_backends: list[BackendRule] = Field(default_factory=list, max_length=1000)
    # "unique-id": ID in the PROXY v2 UNIQUE_ID TLV (HAProxy >= 2.2);
    # "custom-tlv": ID in a custom TLV of type `tlvType` (HAProxy >= 2.9).
    wire_mode: Literal["unique-id", "custom-tlv"] = "unique-id"
    # PROXY v2 reserves 0xE0-0xEF for application-specific (custom) TLVs; lower types have
    # meanings of their own (0x05 UNIQUE_ID, 0x20 SSL, ...) that receivers would misparse.
    tlv_type: int = Field(0xE0, ge=0xE0, le=0xEF, alias="tlvType")
    namespace: NamespaceName = "hubwright-ingress"
    image: str = Field("haproxy:2.6", max_length=512)  # central proxy and node-side proxies
    replicas: int = Field(2, ge=2, le=INT32_MAX)
    # The hubwright image: runs `python -m automation.adapters.haproxy` beside HAProxy so config
    # changes apply without dropping connections. Without it a change rolls the pods.
    reloader_image: str | None = Field(None, max_length=512)

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
    unowned_namespaces: Literal["Refuse", "FirstClaim"] = "Refuse"
    # No cluster's API host may be equal to or under these (besides the domains AWS owns, always refused).
    reserved_domains: list[Domain] = Field(default_factory=list, max_length=1000)
    # Per-namespace caps (stacks.tenancy.quota_refusals; unset: none): clusters with a stack, and PrivateLink
    # endpoints. A Namespace's annotations hubwright.io/max-clusters and hubwright.io/max-endpoints override
    # them. Over its cap a cluster is refused (QuotaExceeded) and takes no slot; a stack that exists keeps its own.
    max_clusters_per_namespace: int | None = Field(None, ge=0, le=INT32_MAX)
    max_endpoints_per_namespace: int | None = Field(None, ge=0, le=INT32_MAX)


class HubConfigSpec(Spec):
    account_id: AccountID = Field(alias="accountID")
    region: Region
    credentials: Credentials = Field(default_factory=Credentials)
    allowed_principal: PrincipalARN | None = None
    role_account_map: dict[AccountID, RoleARN] = Field(default_factory=dict, max_length=10000)
    endpoint_vpc_inventory: list[EndpointVPC] = Field(default_factory=list, alias="endpointVPCInventory",
                                                      max_length=1000)
    associated_vpcs: list[AssociatedVPC] = Field(default_factory=list, alias="associatedVPCs", max_length=300)
    private_link: HubPrivateLink = Field(default_factory=HubPrivateLink)
    mesh: HubMesh = Field(default_factory=HubMesh)
    shared_ingress: HubSharedIngress | None = None
    tenancy: Tenancy = Field(default_factory=Tenancy)
    registry: HubRegistry = Field(default_factory=lambda: HubRegistry())


# --- Cluster ------------------------------------------------------------------

class Network(Spec):
    vpc_id: VpcID = Field(alias="vpcID")
    cidr: VpcCidr
    # AWS: 200 route tables per VPC, 5 security groups per network interface (16 at most by quota).
    route_table_ids: list[RouteTableID] = Field(default_factory=list, alias="routeTableIDs", max_length=200)
    node_security_group_ids: list[SecurityGroupID] = Field(default_factory=list, alias="nodeSecurityGroupIDs",
                                                           max_length=16)
    # Transit Gateway mode: the subnets its attachment uses, at most one per availability zone.
    transit_subnets: list[Subnet] = Field(default_factory=list, alias="transitSubnets", max_length=32)

    @model_validator(mode="after")
    def _one_subnet_per_zone(self) -> "Network":
        zones = [s.availability_zone for s in self.transit_subnets]
        twice = sorted({z for z in zones if zones.count(z) > 1})
        if twice:
            raise ValueError(f"transitSubnets: a Transit Gateway attachment takes one subnet per availability zone; "
                             f"{', '.join(twice)} has more than one")
        return self


class ClusterPrivateLink(Spec):
    enabled: bool = False


class ClusterSharedIngress(Spec):
    enabled: bool = False
    # The ID the guest sends: stacks.ingress.cluster_id_of (default "<namespace>.<name>"; the hub's rule).
    cluster_id: str | None = Field(None, alias="clusterID", pattern=f"^{CLUSTER_ID.pattern}$",
                                      max_length=CLUSTER_ID_MAX)
    backend: HostPort | None = None  # the API server inside the management cluster
    proxy_bind: HostPort = "172.31.0.1:6443"
    # Matched against the client address carried in the PROXY header (the guest's pods and nodes).
    allowed_source_cidrs: list[SourceCidr] = Field(default_factory=list, alias="allowedSourceCIDRs", max_length=100)

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
    max_token_lifetime: Duration = "168h"


# The AWS part of a Cluster: all of it or none. None: registered only (an inventory entry, no stack).
AWS_FIELDS = ("account_id", "infra_id", "api_url", "network")


class ClusterSpec(Spec):
    account_id: AccountID | None = Field(None, alias="accountID")
    region: Region | None = None  # falls back to the namespace's default region, then the hub's
    infra_id: InfraID | None = Field(None, alias="infraID")
    api_url: ApiURL | None = Field(None, alias="apiURL")
    network: Network | None = None
    private_link: ClusterPrivateLink = Field(default_factory=ClusterPrivateLink)
    shared_ingress: ClusterSharedIngress = Field(default_factory=ClusterSharedIngress)
    display_name: DisplayName | None = None
    facts: Facts = Field(default_factory=dict)
    token_lifetime: Duration = "24h"  # how long a bootstrap token issued for this cluster stays valid

    @model_validator(mode="after")
    def _aws_all_or_none(self) -> "ClusterSpec":
        given = [name for name in AWS_FIELDS if getattr(self, name) is not None]
        if given and len(given) < len(AWS_FIELDS):
            missing = [type(self).model_fields[name].alias for name in AWS_FIELDS if getattr(self, name) is None]
            raise ValueError(f"{', '.join(missing)} missing: a cluster gives accountID, infraID, apiURL and "
                             "network together, or none of them (registered only, no stack)")
        return self

    @property
    def provisioned(self) -> bool:
        """True when the cluster has its AWS part: only then does it get a stack."""
        return self.network is not None


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
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        name, ns, kind = meta.get("name"), meta.get("namespace"), doc.get("kind")
        name = name if isinstance(name, str) else "?"  # a document is described before it is validated
        ns = ns if isinstance(ns, str) else None
        return f"{kind if isinstance(kind, str) else 'object'} {ns + '/' if ns else ''}{name}"
    return "object"


def _field_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(object)"


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
    model = {"HubConfig": HubConfig, "HubCluster": Cluster, "Namespace": Namespace}.get(kind) \
        if isinstance(kind, str) else None
    if model is None:
        raise InvalidSpec.one(where, "kind", f"expected HubConfig, HubCluster or Namespace, got {kind!r}")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        errors = [
            FieldError(where, _field_path(err["loc"]), err["msg"].removeprefix("Value error, "))
            for err in exc.errors()
        ]
        raise InvalidSpec(errors) from None
