"""HubConfig: the hub (its account and region, how to reach it, its endpoint VPCs and role map, mesh groups, shared
ingress, tenancy rules and registry limits), and the spec parts it is made of."""
from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from stacks.model.fields import (INT32_MAX, AccountID, DeletionPolicy, Bind, BackendRule, Domain, Duration, HostPort, NamespaceName,
                                 PrincipalARN, Region, RoleARN, SourceCidr, Spec, SubnetID, VpcCidr, VpcID)
from stacks.model.resource import Resource
from stacks.names import MAX_CLUSTERS_ANNOTATION, MAX_ENDPOINTS_ANNOTATION


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
    # Accounts the administrator lets several namespaces own (each names it in its owner-account annotation).
    # Such namespaces are kept apart only by the fleet's claims (stacks.claims). An account two namespaces own that
    # is not listed refuses new clusters in both (AccountShared); clusters whose stack exists keep running.
    shared_accounts: list[AccountID] = Field(default_factory=list, alias="sharedAccounts", max_length=10000,
        description="Accounts that several namespaces may own (each naming it in its owner-account annotation). "
                    "An account two namespaces own that is not listed here refuses new clusters in both "
                    "(AccountShared); clusters whose stack exists keep running.")


class HubRegistry(Spec):
    """The hub administrator's limits on the registry's credentials (docs/registry.md)."""

    # The longest a bootstrap token (a Cluster's spec.tokenLifetime) or an agent's hub token may live: issuing
    # one for longer is refused, and the agent's token is capped to it (stacks.registry.token_lifetime).
    max_token_lifetime: Duration = Field("168h",
        description="The longest a bootstrap token or an agent's hub token may live (a duration: 168h, 1h30m, 90s). "
                    "Longer is refused; an agent's token is capped to it.")


class TagMatch(Spec):
    """A tag to match: key and value; "{infraID}" in the value stands for the cluster's infra ID."""

    key: str = Field(min_length=1, max_length=128, description="The tag's key.")
    value: str = Field(min_length=1, max_length=256,
        description="The tag's value; {infraID} stands for the cluster's infra ID.")


def _default_node_groups() -> list[TagMatch]:
    # CAPA tags its node group with the role; OpenShift installers name it <infraID>-node (4.x) or
    # <infraID>-worker-sg (4.16+, CAPA-based).
    return [TagMatch(key="sigs.k8s.io/cluster-api-provider-aws/role", value="node"),
            TagMatch(key="Name", value="{infraID}-node"), TagMatch(key="Name", value="{infraID}-worker-sg")]


class Discovery(Spec):
    """How discovery reads a cluster's network from its account (docs/sources.md): which route tables and
    security groups are the cluster's."""

    route_tables: Literal["all", "private"] = Field("all", alias="routeTables",
        description="The route tables a cluster's network takes: all of its VPC's, or only those of subnets "
                    "tagged private (privateSubnetTag).")
    private_subnet_tag: str = Field("kubernetes.io/role/internal-elb", alias="privateSubnetTag", min_length=1,
                                    max_length=128,
        description="The subnet tag that marks a private subnet (any value but \"0\" and \"false\").")
    node_security_groups: list[TagMatch] = Field(default_factory=_default_node_groups,
                                                 alias="nodeSecurityGroups", max_length=10,
        description="A security group of the cluster's VPC is a node group when it has any of these tags.")
    interval: Duration = Field("10m",
        description="How often the network is read again (a duration); a new subnet's route table is meshed "
                    "within one interval.")


class Sources(Spec):
    """Which namespaces' Cluster API and Hive objects may opt in (docs/sources.md)."""

    namespaces: list[NamespaceName] | None = Field(None, max_length=10000,
        description="Take source objects only in these namespaces. Unset: in any namespace that owns an account.")
    release_after: Duration = Field("1h", alias="releaseAfter",
        description="The longest our finalizer holds a source object that is not taken any more (deleted, opted "
                    "out) for its own and its mesh group's stacks to converge (a duration: 1h, 30m, 90s); then it "
                    "is released with a Warning Event naming what had not converged.")


class Deletion(Spec):
    """What deleting a HubCluster does to its stack, hub-wide (the hub administrator's: docs/service.md "Deletion
    policy")."""

    default_policy: DeletionPolicy = Field("Delete", alias="defaultPolicy",
        description="The deletionPolicy of a HubCluster that sets none: Delete (default: destroy its stack) or "
                    "Retain (needs allowRetain).")
    allow_retain: bool = Field(False, alias="allowRetain",
        description="Whether a HubCluster may be retained at all. A retained stack keeps its claims and its "
                    "place under its namespace's caps until the hub administrator releases it; false refuses "
                    "deletionPolicy Retain (the cluster is Stalled, and a deleted one waits for Delete).")

    @model_validator(mode="after")
    def _default_allowed(self) -> "Deletion":
        if self.default_policy == "Retain" and not self.allow_retain:
            raise ValueError("defaultPolicy Retain needs allowRetain: true")
        return self


class HubConfigSpec(Spec):
    """The hub: its account and region, how to reach it, its endpoint VPCs and role map, mesh groups,
    shared ingress, tenancy rules and registry limits."""

    account_id: AccountID = Field(alias="accountID",
        description="The hub account: where the endpoint VPCs are (12 digits, quoted in YAML).")
    region: Region = Field(description="The hub's AWS region, and the default of clusters that name none.")
    region_precedence: Literal["Explicit", "Legacy"] = Field("Explicit",
        description="Which wins where a HubCluster's spec.region and its namespace's hubwright.io/default-region "
                    "differ. Explicit: the cluster's spec.region (a default applies only where nothing explicit is "
                    "set). Legacy: the namespace default, as earlier releases did, with a RegionOverridden Warning condition "
                    "and Event on each cluster it overrides; for the upgrade only (docs/security.md).")
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
    discovery: Discovery = Field(default_factory=lambda: Discovery(),
        description="How a cluster's network is read from its account.")
    sources: Sources = Field(default_factory=lambda: Sources(),
        description="Which namespaces' Cluster API and Hive objects may opt in.")
    deletion: Deletion = Field(default_factory=lambda: Deletion(),
        description="What deleting a HubCluster does to its stack: the default policy, and whether Retain is "
                    "allowed.")


class HubConfig(Resource):
    kind: Literal["HubConfig"] = "HubConfig"
    spec: HubConfigSpec

    @property
    def ref(self) -> str:
        return f"HubConfig {self.metadata.name}"
