"""Generated fleets for the plan benchmarks: a hub and clusters spread over two accounts and two regions."""
from __future__ import annotations

from typing import Any

from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.names import API_VERSION, OWNER_ACCOUNT_ANNOTATION

REGIONS = ("us-east-1", "eu-west-1")
ACCOUNTS = ("222222222222", "333333333333")


def hub(**spec: Any) -> HubConfig:
    return parse({
        "apiVersion": API_VERSION, "kind": "HubConfig", "metadata": {"name": "bench"},
        "spec": {"accountID": "111111111111", "region": "us-east-1",
                 "credentials": {"roleARN": "arn:aws:iam::111111111111:role/hubwright-hub"},
                 "roleAccountMap": {a: f"arn:aws:iam::{a}:role/hubwright" for a in ACCOUNTS}, **spec},
    })


def cluster(i: int, name: str, namespace: str, *, account: str, vpc: str, route_tables: list[str],
            security_group: str, metadata: dict | None = None, transit_subnets: list[dict] | None = None,
            **spec: Any) -> Cluster:
    """Cluster number i: its CIDR is 10.(i/256).(i%256).0/24, so no two of a fleet overlap."""
    return parse({
        "apiVersion": API_VERSION, "kind": "HubCluster",
        "metadata": {"name": name, "namespace": namespace, **(metadata or {})},
        "spec": {"accountID": account, "region": REGIONS[(i // 2) % 2], "infraID": f"{name}-abcde",
                 "apiURL": f"https://api.{name}.example.com:6443",
                 "network": {"vpcID": vpc, "cidr": f"10.{i // 256}.{i % 256}.0/24", "routeTableIDs": route_tables,
                             "nodeSecurityGroupIDs": [security_group], "transitSubnets": transit_subnets or []},
                 **spec},
    })


def owners(tenants: int) -> dict[str, dict[str, str]]:
    """Namespaces tenant-0 … tenant-(n-1), each owning one of the two accounts."""
    return {f"tenant-{k}": {OWNER_ACCOUNT_ANNOTATION: ACCOUNTS[k % 2]} for k in range(tenants)}
