"""FoundNetwork: what discovery read in a cluster's account, as status.network holds it. Pure.

Written by the service's discovery (automation.adapters.aws.discovery, or its stand-in in the offline plan);
read by stacks.network.merge. `observedAt` says when it was read, and is the one field resolve() ignores: reading
the same network again changes no stack.
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.names import NETWORK_ERROR_STATUS_KEY, NETWORK_STATUS_KEY


_Id = Annotated[str, Field(max_length=64)]
_Cidr = Annotated[str, Field(max_length=18)]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class FoundSubnet(_Wire):
    """A subnet of the VPC: its zone, the route table it uses and whether it is tagged private."""

    subnet_id: str = Field(alias="subnetID", max_length=64, description="The subnet's ID.")
    availability_zone: str = Field(max_length=32, description="The subnet's availability zone.")
    route_table_id: str | None = Field(None, alias="routeTableID", max_length=64,
        description="The route table the subnet uses: its explicit association, else the VPC's main table.")
    private: bool = Field(False,
        description="Tagged private (HubConfig spec.discovery.privateSubnetTag, any value but 0 and false).")


class FoundLoadBalancer(_Wire):
    """The internal load balancer in front of the cluster's API server (PrivateLink's)."""

    name: str = Field(max_length=64, description="The load balancer's name.")
    arn: str = Field("", max_length=256, description="Its ARN.")
    type: str = Field("", max_length=16, description="network, application or gateway.")
    scheme: str = Field("", max_length=32, description="internal or internet-facing.")
    vpc_id: str = Field("", alias="vpcID", max_length=64, description="The VPC it is in.")


class _Record(_Wire):
    """A record the discovery writes into a HubCluster's status (status.network, status.networkError)."""

    def to_status(self) -> dict[str, Any]:
        """The wire form for the status."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class FoundNetwork(_Record):
    """What discovery read of the cluster's VPC, in the cluster's own account and region; the stack is built from
    it and from what the spec declares, which must agree with it."""

    account_id: str = Field(alias="accountID", max_length=12, description="The account it was read in.")
    region: str = Field(max_length=20, description="The region it was read in.")
    vpc_id: str = Field(alias="vpcID", max_length=64, description="The cluster's VPC.")
    cidrs: tuple[_Cidr, ...] = Field((), max_length=50,
        description="Every IPv4 CIDR block associated with the VPC, the primary first.")
    subnets: tuple[FoundSubnet, ...] = Field((), max_length=1000, description="The VPC's subnets.")
    route_table_ids: tuple[_Id, ...] = Field((), alias="routeTableIDs", max_length=1000,
        description="Every route table of the VPC.")
    security_group_ids: tuple[_Id, ...] = Field((), alias="securityGroupIDs", max_length=2500,
        description="Every security group of the VPC.")
    node_security_group_ids: tuple[_Id, ...] = Field((), alias="nodeSecurityGroupIDs", max_length=100,
        description="The node security groups: those with a tag of HubConfig spec.discovery.nodeSecurityGroups.")
    load_balancer: FoundLoadBalancer | None = Field(None, alias="loadBalancer",
        description="The API server's internal load balancer (PrivateLink clusters), when it exists.")
    observed_at: str | None = Field(None, alias="observedAt", max_length=40,
        description="When it was read (RFC 3339); the next read is due HubConfig spec.discovery.interval later.")


    def same_as(self, other: "FoundNetwork | None") -> bool:
        """The same facts (when they were read does not count)."""
        return other is not None and self.model_copy(update={"observed_at": None}) == \
            other.model_copy(update={"observed_at": None})


def stale(found: FoundNetwork | None, account_id: str, region: str, vpc_id: str | None) -> str | None:
    """Why `found` does not answer for a cluster now in `account_id` and `region` that names `vpc_id` (None: found
    by the installer's tag), or None when it does. One rule for the merge (such a network counts as not read) and
    for the discovery controller (read it again now)."""
    if found is None:
        return "never read"
    if (found.account_id, found.region) != (account_id, region):
        return f"read in {found.account_id} ({found.region}), the cluster is in {account_id} ({region})"
    if vpc_id is not None and found.vpc_id != vpc_id:
        return f"read for VPC {found.vpc_id}, the cluster names {vpc_id}"
    return None


def found_of(status: Mapping[str, Any] | None) -> FoundNetwork | None:
    """status.network parsed, or None when discovery has not written one (or wrote something unreadable, which
    the next discovery overwrites)."""
    return _parsed(status, NETWORK_STATUS_KEY, FoundNetwork)


R = TypeVar("R", bound="_Record")


def _parsed(status: Mapping[str, Any] | None, key: str, model: type[R]) -> R | None:
    """The discovery's record `key` of a status, parsed; None when absent or unreadable (the next read
    overwrites it)."""
    raw = (status or {}).get(key)
    if not isinstance(raw, Mapping):
        return None
    try:
        return model.model_validate(raw)
    except ValueError:
        return None


class NetworkError(_Record):
    """Why discovery's last read of the network failed, until one succeeds (then it is removed). A cluster with no
    network yet shows it: `refused` (a person must act: NoCredentials, AccessDenied, VpcAmbiguous) stalls it
    with this reason, anything else (throttling, the network) keeps it waiting with the failure in its message."""

    reason: str = Field(max_length=64, description="The failure's reason (NoCredentials, AccessDenied, ...).")
    message: str = Field(max_length=4096, description="What failed, as the lookup said it.")
    refused: bool = Field(False,
        description="A person must act (Stalled, read again every --stalled-recheck); false: retried with backoff.")
    observed_at: str | None = Field(None, alias="observedAt", max_length=40,
        description="When the read failed (RFC 3339).")



def error_of(status: Mapping[str, Any] | None) -> NetworkError | None:
    """status.networkError parsed, or None (none written, or unreadable: the next read overwrites it)."""
    return _parsed(status, NETWORK_ERROR_STATUS_KEY, NetworkError)
