"""A transit stack's gateway tables as dynamic resources, for the live upgrade test (test_transit_upgrade_live.py).

The stand-ins carry the names, types (module and name, so the policy pack checks them as the AWS types) and props of
what components.transit.TransitNetwork registers for the members' routing, taken from its mock-runtime plan. Their
"cloud" is a directory per gateway route table, one file per route entry (`<cidr>~<static|propagated>~<resource>`),
and `ops.log`, to which each create and delete appends one JSON line: the operation and, right after it, every CIDR
each table routes. A propagation enters every CIDR of its VPC, declared or not, as AWS does; a static route its own.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider

from stacks.transit import GROUP_TAG


class GatewayTableProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        for cidr in props.get("entries") or []:
            _entry(props, cidr).write_text(props["name"])
        _log(props, "create")
        return CreateResult(id_=props["name"], outs={**props, "id": props["name"]})

    def delete(self, _id: str, props: dict) -> None:
        for cidr in props.get("entries") or []:
            _entry(props, cidr).unlink(missing_ok=True)
        _log(props, "delete")


def _entry(props: Mapping[str, Any], cidr: str) -> Path:
    table = Path(props["cloud"]) / props["table"]
    table.mkdir(parents=True, exist_ok=True)
    return table / f"{cidr}~{props['source']}~{props['name']}".replace('/', '_')


def routed(cloud: Path) -> dict[str, list[str]]:
    """Every CIDR each table routes now (static or propagated)."""
    return {table.name: sorted({f.name.split("~")[0].replace("_", "/") for f in table.iterdir()})
            for table in sorted(cloud.iterdir()) if table.is_dir()}


def _log(props: Mapping[str, Any], op: str) -> None:
    cloud = Path(props["cloud"])
    line = json.dumps({"op": op, "kind": props["kind"], "name": props["name"], "routed": routed(cloud)}) + "\n"
    fd = os.open(cloud / "ops.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # one write per line: whole lines
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


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
