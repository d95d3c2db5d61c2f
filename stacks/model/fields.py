"""The model's field types: validated strings (account IDs, regions, CIDR blocks, ARNs, resource IDs, host:port)
that HubConfig's and Cluster's specs are built of, the registry's free-form fields, and Spec, the base of every spec
part. The validators here are also read by stacks.crds, which turns each rule into a schema keyword.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.names import GROUP, LABEL_MAX, PARTITIONS, PRINCIPAL_ARN, ROLE_ARN, hostname_error, parse_api_url, parse_host_port

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
    return f"{value!r} {NOT_A_REGION}"


# Why a value is refused, after the value: the service's words and the API server's (stacks.crds) are these.
NOT_A_REGION = "is not an AWS region name (<area>-<direction>-<number>, like us-east-1 or ap-southeast-7)"


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


# The registry's fields (docs/registry.md): free-form text and static facts, never read by resolve().
DisplayName = Annotated[str, Field(max_length=256)]
FactKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?$", max_length=63)]
Facts = Annotated[dict[FactKey, Annotated[str, Field(max_length=1024)]], Field(max_length=100)]
# Tags a cluster asks for on what hubwright builds in its account (AWS's rules: a key of 1-128 characters, a value of
# at most 256, of letters, digits, spaces and _.:/=+-@; AWS keeps `aws:` for itself, hubwright `Name` and its own
# prefix). At most 25: AWS allows 50 per resource, and hubwright's own and a provider's default tags need room.
def _tag_key(key: str) -> str:
    if key.lower().startswith("aws:") or key.startswith(f"{GROUP}/") or key == "Name":
        raise ValueError(f"{key!r} is a key AWS or hubwright sets itself (aws:*, {GROUP}/*, Name)")
    return key


TagKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[0-9A-Za-z_.:/=+\-@ ]+$"),
                   AfterValidator(_tag_key)]
Tags = Annotated[dict[TagKey, Annotated[str, Field(max_length=256, pattern=r"^[0-9A-Za-z_.:/=+\-@ ]*$")]],
                 Field(max_length=25)]
# A duration: hours, minutes and seconds as Go writes them ("24h", "1h30m", "90s"); stacks.registry.seconds.
Duration = Annotated[str, Field(pattern=r"^([0-9]{1,4}h)?([0-9]{1,6}m)?([0-9]{1,8}s)?$", min_length=2, max_length=24)]


class Spec(BaseModel):
    """Base for every spec part: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
                              strict=True)

# What deleting an object does to what it made: HubGitRepo (its repository) and HubCluster (its stack) alike.
DeletionPolicy = Literal["Delete", "Retain"]
