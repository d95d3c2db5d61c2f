"""FoundNetwork: what discovery read in a cluster's account, as status.network holds it. Pure.

Written by the service's discovery (automation.adapters.aws.discovery, or its stand-in in the offline plan);
read by stacks.network.merge. `observedAt` says when it was read, and is the one field resolve() ignores: reading
the same network again changes no stack.
"""
from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.names import NETWORK_STATUS_KEY


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class FoundSubnet(_Wire):
    """A subnet of the VPC: its zone, the route table it uses (explicit, or the VPC's main table) and whether it
    is tagged private (HubConfig spec.discovery.privateSubnetTag)."""

    subnet_id: str = Field(alias="subnetID")
    availability_zone: str
    route_table_id: str | None = Field(None, alias="routeTableID")
    private: bool = False


class FoundLoadBalancer(_Wire):
    """The internal load balancer the cluster's API server is behind (PrivateLink's)."""

    name: str
    arn: str = ""
    type: str = ""  # "network", "application", "gateway"; classic ELBs are not listed by elbv2
    scheme: str = ""
    vpc_id: str = Field("", alias="vpcID")


class FoundNetwork(_Wire):
    """Everything discovery read about one cluster's VPC, in the cluster's own account and region."""

    account_id: str = Field(alias="accountID")
    region: str
    vpc_id: str = Field(alias="vpcID")
    cidrs: tuple[str, ...] = ()  # every associated IPv4 block, the primary first
    subnets: tuple[FoundSubnet, ...] = ()
    route_table_ids: tuple[str, ...] = Field((), alias="routeTableIDs")  # every table of the VPC
    # Security groups: every group of the VPC, and those matching HubConfig spec.discovery.nodeSecurityGroups.
    security_group_ids: tuple[str, ...] = Field((), alias="securityGroupIDs")
    node_security_group_ids: tuple[str, ...] = Field((), alias="nodeSecurityGroupIDs")
    load_balancer: FoundLoadBalancer | None = Field(None, alias="loadBalancer")
    observed_at: str | None = Field(None, alias="observedAt")

    def to_status(self) -> dict[str, Any]:
        """The wire form for status.network."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def same_as(self, other: "FoundNetwork | None") -> bool:
        """The same facts (when they were read does not count)."""
        return other is not None and self.model_copy(update={"observed_at": None}) == \
            other.model_copy(update={"observed_at": None})


def found_of(status: Mapping[str, Any] | None) -> FoundNetwork | None:
    """status.network parsed, or None when discovery has not written one (or wrote something unreadable, which
    the next discovery overwrites)."""
    raw = (status or {}).get(NETWORK_STATUS_KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        return FoundNetwork.model_validate(raw)
    except ValueError:
        return None
