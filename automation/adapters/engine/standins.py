"""Deterministic stand-in answers for the offline plan (Pulumi's mock runtime).

Lookups (the NLB, the caller identity, the endpoint service's AZs, VPC CIDRs,
ENI addresses) and computed outputs (IDs, service names, DNS names) are derived
from hashes of the request, so the same inputs always give the same plan.
"""
from __future__ import annotations

import hashlib
import json
import ipaddress
from typing import Any, Mapping

import pulumi


def _h(*parts: Any, n: int = 17) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


class StandIns(pulumi.runtime.Mocks):
    def __init__(self, zones: Mapping[str, list[str]] | None = None):
        """zones: region → the AZs an endpoint service supports as seen from the hub (default: a, b, c)."""
        self.zones = dict(zones or {})
        self.where: dict[str, tuple[str | None, str | None]] = {}  # provider id → (account, region)

    def location(self, provider_ref: str | None) -> tuple[str | None, str | None]:
        if not provider_ref:
            return None, None
        return self.where.get(provider_ref.rsplit("::", 1)[-1], (None, None))

    # -- resources --------------------------------------------------------------
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        inputs = dict(args.inputs)
        if args.typ == "pulumi:providers:aws":
            pid = f"provider-{_h(args.name, n=8)}"
            self.where[pid] = provider_location(inputs)
            return pid, inputs
        account, region = self.location(args.provider)
        make = _COMPUTED.get(args.typ)
        rid, extra = make(args.name, inputs, account, region, self) if make else (f"{_h(args.typ, args.name, n=12)}", {})
        return rid, {**inputs, **extra}

    # -- lookups ----------------------------------------------------------------
    def call(self, args: pulumi.runtime.MockCallArgs):
        account, region = self.location(args.provider)
        a = args.args
        if args.token == "aws:lb/getLoadBalancer:getLoadBalancer":
            name = a.get("name")
            return {"name": name, "loadBalancerType": "network", "internal": True,
                    "arn": f"arn:aws:elasticloadbalancing:{region}:{account}:loadbalancer/net/{name}/{_h(name, n=16)}"}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": account, "userId": f"AROA{_h(account, n=16).upper()}:hubwright",
                    "arn": f"arn:aws:sts::{account}:assumed-role/hubwright-hub/hubwright"}
        if args.token == "aws:iam/getSessionContext:getSessionContext":
            arn = a["arn"]
            if ":assumed-role/" in arn:
                acct = arn.split(":")[4]
                role = arn.split(":assumed-role/")[1].split("/")[0]
                return {"arn": arn, "issuerArn": f"arn:aws:iam::{acct}:role/{role}", "issuerName": role}
            return {"arn": arn, "issuerArn": arn}
        if args.token == "aws:ec2/getVpcEndpointService:getVpcEndpointService":
            zones = self.zones.get(region or "", [f"{region}a", f"{region}b", f"{region}c"])
            return {"serviceName": a.get("serviceName"), "availabilityZones": list(zones), "serviceType": "Interface"}
        if args.token == "aws:ec2/getVpc:getVpc":
            return {"id": a.get("id"), "cidrBlock": _cidr_for(str(a.get("id")))}
        if args.token == "aws:ec2/getSecurityGroup:getSecurityGroup":
            # The same ID the SecurityGroup stand-in gives a group whose resource name is its AWS name.
            return {"id": f"sg-{_h(a.get('name'), account)}", "name": a.get("name"), "vpcId": a.get("vpcId")}
        if args.token == "aws:ec2/getNetworkInterface:getNetworkInterface":
            octets = bytes.fromhex(_h(a.get("id"), n=4))
            return {"id": a.get("id"), "privateIp": f"10.{octets[0]}.{octets[1]}.10"}
        raise NotImplementedError(f"the offline plan has no stand-in for lookup {args.token}")


def provider_location(inputs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(account, region) of an aws provider; the engine hands providers non-string inputs as JSON."""
    ids = inputs.get("allowedAccountIds") or []
    if isinstance(ids, str):
        ids = json.loads(ids)
    return (ids[0] if ids else None), inputs.get("region")


def _cidr_for(vpc_id: str) -> str:
    octets = bytes.fromhex(_h(vpc_id, n=4))
    return str(ipaddress.ip_network(f"10.{octets[0]}.0.0/16"))


def _endpoint_service(name, inputs, account, region, _):
    sid = f"vpce-svc-{_h(name, account)}"
    return sid, {"serviceName": f"com.amazonaws.vpce.{region}.{sid}", "state": "Available",
                 "availabilityZones": [f"{region}a", f"{region}b", f"{region}c"]}


def _endpoint(name, inputs, account, region, _):
    eid = f"vpce-{_h(name, account)}"
    svc = inputs.get("serviceName", "").rsplit(".", 1)[-1]
    suffix = _h(eid, n=8)
    regional = {"dnsName": f"{eid}-{suffix}.{svc}.{region}.vpce.amazonaws.com", "hostedZoneId": "Z7HUB3ZWFQ2W0"}
    zonal = [{"dnsName": f"{eid}-{suffix}-{region}{z}.{svc}.{region}.vpce.amazonaws.com", "hostedZoneId": "Z7HUB3ZWFQ2W0"}
             for z in "ab"]
    enis = [f"eni-{_h(eid, s)}" for s in inputs.get("subnetIds", [])]
    return eid, {"dnsEntries": [regional, *zonal], "networkInterfaceIds": enis, "state": "available"}


def _zone(name, inputs, account, region, _):
    zid = "Z" + _h(name, account, n=20).upper()
    return zid, {"zoneId": zid, "nameServers": []}


def _peering(name, inputs, account, region, _):
    pid = f"pcx-{_h(name, account)}"
    return pid, {"acceptStatus": "pending-acceptance"}


def _accepter(name, inputs, account, region, _):
    # The accepter's ID is the peering connection's; acceptance makes the connection active.
    return inputs.get("vpcPeeringConnectionId") or f"pcx-{_h(name, account)}", {"acceptStatus": "active"}


def _prefixed(prefix):
    def make(name, inputs, account, region, _):
        return f"{prefix}-{_h(name, account)}", {}
    return make


def _gateway(name, inputs, account, region, _):
    gid = f"tgw-{_h(name, account)}"
    return gid, {"arn": f"arn:aws:ec2:{region}:{account}:transit-gateway/{gid}", "ownerId": account}


def _share(name, inputs, account, region, _):
    arn = f"arn:aws:ram:{region}:{account}:resource-share/{_h(name, account, n=32)}"
    return arn, {"arn": arn}


def _attachment_accepter(name, inputs, account, region, _):
    # An accepter's ID is the attachment it accepts.
    return inputs.get("transitGatewayAttachmentId") or f"tgw-attach-{_h(name, account)}", {}


# The outputs below that AWS makes up on create, beside the ID: a real preview knows none of them (the plan marks
# them, automation.adapters.engine.plan.after_apply). Not the states, the zones or the account: those are known.
COMPUTED_KEYS = ("arn", "serviceName", "dnsEntries", "zoneId", "networkInterfaceIds")

_COMPUTED = {
    "aws:ec2/vpcEndpointService:VpcEndpointService": _endpoint_service,
    "aws:ec2/vpcEndpoint:VpcEndpoint": _endpoint,
    "aws:route53/zone:Zone": _zone,
    "aws:ec2/vpcPeeringConnection:VpcPeeringConnection": _peering,
    "aws:ec2/vpcPeeringConnectionAccepter:VpcPeeringConnectionAccepter": _accepter,
    "aws:ec2/route:Route": _prefixed("r"),
    "aws:ec2/securityGroup:SecurityGroup": _prefixed("sg"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _prefixed("sgr"),
    "aws:ec2transitgateway/transitGateway:TransitGateway": _gateway,
    "aws:ec2transitgateway/routeTable:RouteTable": _prefixed("tgw-rtb"),
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": _prefixed("tgw-attach"),
    "aws:ec2transitgateway/peeringAttachment:PeeringAttachment": _prefixed("tgw-attach"),
    "aws:ec2transitgateway/vpcAttachmentAccepter:VpcAttachmentAccepter": _attachment_accepter,
    "aws:ec2transitgateway/peeringAttachmentAccepter:PeeringAttachmentAccepter": _attachment_accepter,
    "aws:ram/resourceShare:ResourceShare": _share,
}
