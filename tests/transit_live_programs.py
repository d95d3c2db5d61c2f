"""A transit stack's gateway tables as dynamic resources, for the live upgrade test (test_transit_upgrade_live.py).

The stand-ins carry the names, types (module and name, so the policy pack checks them as the AWS types) and props of
what components.transit.TransitNetwork registers for the members' routing, taken from its mock-runtime plan. Their
"cloud" is a directory per gateway route table, one file per route entry (`<cidr>~<static|propagated>~<resource>`),
and `ops.log`, to which each create and delete appends one JSON line: the operation and, right after it, every CIDR
each table routes. A propagation enters every CIDR of its VPC, declared or not, as AWS does; a static route its own.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pulumi
from pulumi.dynamic import Resource

from doubles.providers import GatewayTableProvider
from stacks.transit import GROUP_TAG


def ops(cloud: Path) -> list[dict[str, Any]]:
    path = cloud / "ops.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class RouteTable(Resource, module="ec2transitgateway", name="RouteTable"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(GatewayTableProvider(), name, props, opts)


class RouteTableAssociation(Resource, module="ec2transitgateway", name="RouteTableAssociation"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(GatewayTableProvider(), name, props, opts)


class RouteTablePropagation(Resource, module="ec2transitgateway", name="RouteTablePropagation"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(GatewayTableProvider(), name, props, opts)


class Route(Resource, module="ec2transitgateway", name="Route"):
    def __init__(self, name: str, props: dict, opts: pulumi.ResourceOptions | None = None):
        super().__init__(GatewayTableProvider(), name, props, opts)


def gateway_tables(_inputs: Any, *, cloud: str, tables: list[dict], members: list[dict], version: str,
                   extra_routes: list[dict] = ()) -> Mapping[str, Any]:
    """The members' routing in the transit stack. `version` "propagation": each member's association and the
    RouteTablePropagation of before issue 31; "static": its association and the static Route of now.
    `tables`: {name, group}; `members`: {association, propagation, route, table, attachment, cidr, vpcCidrs}
    (names and values from TransitNetwork's plan); `extra_routes`: more static routes {name, table, cidr,
    attachment}, as a bug would add them."""
    Path(cloud).mkdir(parents=True, exist_ok=True)
    made = {t["name"]: RouteTable(t["name"], {"cloud": cloud, "kind": "RouteTable", "name": t["name"],
                                              "table": t["name"], "source": "table", "entries": [],
                                              "tags": {GROUP_TAG: t["group"]}}) for t in tables}

    def common(kind: str, name: str, table: str, attachment: str, source: str, entries: list[str]) -> dict:
        return {"cloud": cloud, "kind": kind, "name": name, "table": table, "source": source, "entries": entries,
                "transitGatewayAttachmentId": attachment, "transitGatewayRouteTableId": made[table].id}

    for m in members:
        RouteTableAssociation(m["association"], common("RouteTableAssociation", m["association"], m["table"],
                                                       m["attachment"], "association", []))
        if version == "propagation":
            RouteTablePropagation(m["propagation"], common("RouteTablePropagation", m["propagation"], m["table"],
                                                           m["attachment"], "propagated", m["vpcCidrs"]))
        else:
            Route(m["route"], {**common("Route", m["route"], m["table"], m["attachment"], "static", [m["cidr"]]),
                               "destinationCidrBlock": m["cidr"]})
    for r in extra_routes:
        Route(r["name"], {**common("Route", r["name"], r["table"], r["attachment"], "static", [r["cidr"]]),
                          "destinationCidrBlock": r["cidr"]})
    return {"tables": len(made), "members": len(members)}
