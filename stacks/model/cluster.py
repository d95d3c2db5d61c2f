"""Cluster (kind HubCluster): one cluster's AWS account, region, install and VPC (or none of them: registered
only), what to connect (PrivateLink, shared ingress) and its registry fields; the spec parts it is made of."""
from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import Field, model_validator

from stacks.model.fields import (AccountID, ApiURL, DeletionPolicy, DisplayName, Duration, Facts, HostPort, InfraID, Region,
                                 RouteTableID, SecurityGroupID, SourceCidr, Spec, Tags, VpcCidr, VpcID)
from stacks.model.hub import Subnet
from stacks.model.resource import Resource
from stacks.names import CLUSTER_ID, CLUSTER_ID_MAX, cluster_key, stack_name


class Network(Spec):
    """The cluster's VPC, as the hub connects it. Every fact may be left out: discovery reads it from the cluster's
    account (status.network). What is declared is compared with what discovery finds, and a disagreement is
    refused by name (stacks.network.merge); the stack is built from the merged network."""

    vpc_id: VpcID | None = Field(None, alias="vpcID",
        description="The cluster's VPC (vpc-...). Unset: the VPC tagged kubernetes.io/cluster/<infraID> "
                    "(owned or shared) in the cluster's account.")
    cidr: VpcCidr | None = Field(None,
        description="The cluster VPC's primary CIDR block (/16 to /28). Unset: discovered. Declared: must be one "
                    "of the VPC's blocks.")
    secondary_cidrs: list[VpcCidr] = Field(default_factory=list, alias="secondaryCIDRs", max_length=5,
        description="The VPC's other associated IPv4 CIDR blocks (AWS allows 5 per VPC by default); discovery "
                    "fills them.")
    # AWS: 200 route tables per VPC, 5 security groups per network interface (16 at most by quota).
    route_table_ids: list[RouteTableID] = Field(default_factory=list, alias="routeTableIDs", max_length=200,
        description="The route tables that get routes to the hub and to mesh peers (at most 200, AWS's per VPC). "
                    "Empty: the VPC's tables, as HubConfig spec.discovery.routeTables chooses.")
    node_security_group_ids: list[SecurityGroupID] = Field(default_factory=list, alias="nodeSecurityGroupIDs",
                                                           max_length=16,
                                                           description="The nodes' security groups, which get the "
                                                                       "mesh rules (at most 16). Empty: found by "
                                                                       "tag.")
    # Transit Gateway mode: the subnets its attachment uses, at most one per availability zone.
    transit_subnets: list[Subnet] = Field(default_factory=list, alias="transitSubnets", max_length=32,
        description="Transit Gateway mode: the subnets the attachment uses, at most one per availability zone. "
                    "Empty: one discovered subnet per zone.")

    @property
    def vpc(self) -> str:
        """The VPC ID, declared or discovered (stacks.network.merge fills it before anything plans)."""
        if self.vpc_id is None:
            raise ValueError("the network is not resolved yet: no VPC declared or discovered")
        return self.vpc_id

    @property
    def cidrs(self) -> tuple[str, ...]:
        """Every IPv4 CIDR block of the VPC, the primary first (declared, or filled by stacks.network.merge)."""
        if self.cidr is None:
            raise ValueError("the network is not resolved yet: no CIDR declared or discovered")
        return tuple(dict.fromkeys([self.cidr, *self.secondary_cidrs]))

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
    # CAPA names its control-plane NLB itself (status.networkStatus.apiServerElb.name); installers use <infraID>-int.
    load_balancer_name: str | None = Field(None, alias="loadBalancerName", min_length=1, max_length=32,
                                           pattern=r"^[A-Za-z0-9]([-A-Za-z0-9]{0,30}[A-Za-z0-9])?$",
        description="The internal network load balancer in front of the API server. Unset: <infraID>-int, the "
                    "installer's.")


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
    node_proxy: Literal["Hubwright", "External"] = Field("Hubwright", alias="nodeProxy",
        description="Who writes the guests' node-side proxy: Hubwright (the stack's manifests and the install "
                    "answer carry it), or External (another project writes it, as HyperShift does for a "
                    "HostedCluster through the NodePool's ignition: hubwright only routes the ID).")
    # Matched against the client address carried in the PROXY header (the guest's pods and nodes).
    allowed_source_cidrs: list[SourceCidr] = Field(default_factory=list, alias="allowedSourceCIDRs", max_length=100,
        description="Client addresses (from the PROXY header: the guest's pods and nodes) that may connect.")

    @model_validator(mode="after")
    def _backend(self) -> "ClusterSharedIngress":
        if self.enabled and not self.backend:
            raise ValueError("backend (host:port of the API server) is required when enabled")
        return self


# The AWS part of a Cluster: all of it or none. None: registered only (an inventory entry, no stack).
AWS_FIELDS = ("account_id", "infra_id", "api_url", "network")


class ClusterSpec(Spec):
    """A cluster: its AWS account, region, install and VPC (or none of them: registered only), and what to
    connect (PrivateLink, shared ingress)."""

    account_id: AccountID | None = Field(None, alias="accountID",
        description="The AWS account of the cluster's VPC (12 digits, quoted in YAML). With infraID, apiURL and "
                    "network, or none of them.")
    region: Region | None = Field(None,
        description="The cluster's AWS region. It beats the namespace's default region (hubwright.io/default-region) "
                    "and the hub's, which apply only where it is unset; the cluster's hubwright.io/region annotation "
                    "beats it, and a namespace's hubwright.io/pinned-region refuses any other (docs/accounts.md).")
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
    tags: Tags = Field(default_factory=dict,
        description="Tags for what hubwright builds in the cluster's account, beside its own (at most 25; AWS's "
                    "rules; never aws:*, hubwright.io/* or Name). From a HostedCluster: its "
                    "spec.platform.aws.resourceTags.")
    facts: Facts = Field(default_factory=dict,
        description="Static facts about the cluster (key: value), kept by the registry; never read by the planner.")
    token_lifetime: Duration = Field("24h",
        description="How long a bootstrap token issued for this cluster stays valid (a duration, e.g. 24h).")
    deletion_policy: DeletionPolicy | None = Field(None, alias="deletionPolicy",
        description="What deleting the HubCluster does to its stack: Delete destroys it; Retain keeps what lives in "
                    "the cluster's own account (its endpoint service, its dedicated mesh security group) and removes "
                    "everything it holds elsewhere (its mesh pairs, its Transit Gateway attachment, the hub's "
                    "endpoint and zone), then records the stack as a HubRetainedStack. Unset: HubConfig "
                    "spec.deletion.defaultPolicy (Delete unless the hub administrator says otherwise). Retain needs "
                    "HubConfig spec.deletion.allowRetain.")

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
