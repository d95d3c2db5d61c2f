"""How long the offline plan of one mesh group takes: `python -m bench.mesh_plan --members 50`.

Generates one group across two accounts and two regions (each member with `--tables` route tables and
one node security group), resolves it (mesh ownership included) and runs every member's stack program
under the mock runtime. Prints one JSON object; `joiner_plan_seconds` is the stack a join runs (the
last joiner owns a pair with every other member).
"""
from __future__ import annotations

import argparse
import json
import time

from automation.plan import plan_stack, raise_invalid
from stacks.mesh import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.model import parse
from stacks.resolve import Fleet, resolve_fleet
from stacks.tenancy import OWNER_ACCOUNT_ANNOTATION

REGIONS = ("us-east-1", "eu-west-1")
ACCOUNTS = ("222222222222", "333333333333")
MESH_TYPES = {
    "peerings": "aws:ec2/vpcPeeringConnection:VpcPeeringConnection",
    "routes": "aws:ec2/route:Route",
    "rules": "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
}


def mesh_fleet(members: int, tables: int) -> Fleet:
    if not 1 <= members <= 125 * 256:
        raise SystemExit("--members must be between 1 and 32000")
    hub = parse({
        "apiVersion": "clusternet.io/v1alpha1", "kind": "HubConfig", "metadata": {"name": "bench"},
        "spec": {"accountID": "111111111111", "region": "us-east-1",
                 "credentials": {"roleARN": "arn:aws:iam::111111111111:role/clusternet-hub"},
                 "roleAccountMap": {a: f"arn:aws:iam::{a}:role/clusternet" for a in ACCOUNTS},
                 # Quotas raised as far as AWS goes, so that the group size is the only variable.
                 "mesh": {"peeringsPerVPC": 125, "routesPerTable": 1000,
                          "groups": {"bench": {"namespaces": [f"tenant-{k}" for k in range(3)]}}}},
    })
    clusters = tuple(
        parse({
            "apiVersion": "clusternet.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": f"m{i:03d}", "namespace": f"tenant-{i % 3}",
                         "creationTimestamp": f"2025-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                         "labels": {MESH_LABEL: "bench"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}},
            "spec": {"accountID": ACCOUNTS[i % 3 % 2], "region": REGIONS[(i // 2) % 2], "infraID": f"m{i:03d}-abcde",
                     "apiURL": f"https://api.m{i:03d}.example.com:6443",
                     "network": {"vpcID": f"vpc-0m{i:03d}", "cidr": f"10.{i // 256}.{i % 256}.0/24",
                                 "routeTableIDs": [f"rtb-0m{i:03d}{t}" for t in range(tables)],
                                 "nodeSecurityGroupIDs": [f"sg-0m{i:03d}"]}},
        })
        for i in range(members)
    )
    owners = {f"tenant-{k}": {OWNER_ACCOUNT_ANNOTATION: ACCOUNTS[k % 2]} for k in range(3)}
    return Fleet(hub=hub, clusters=clusters, namespaces=owners)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=50, help="members of the group (default 50)")
    parser.add_argument("--tables", type=int, default=2, help="route tables per member (default 2)")
    args = parser.parse_args()

    started = time.perf_counter()
    inputs = raise_invalid(resolve_fleet(mesh_fleet(args.members, args.tables)))
    resolved = time.perf_counter()
    plans, joiner_seconds = [], 0.0
    for one in inputs:
        t0 = time.perf_counter()
        plans.append(plan_stack(one))
        joiner_seconds = time.perf_counter() - t0  # the last member is the latest joiner
    done = time.perf_counter()
    counts = {name: sum(len(p.of_type(t)) for p in plans) for name, t in MESH_TYPES.items()}
    print(json.dumps({
        "members": args.members,
        "route_tables_per_member": args.tables,
        **counts,
        "resources": sum(len(p.resources) for p in plans),
        "resolve_seconds": round(resolved - started, 3),
        "plan_seconds": round(done - resolved, 3),
        "joiner_plan_seconds": round(joiner_seconds, 3),
        "total_seconds": round(done - started, 3),
    }))


if __name__ == "__main__":
    main()
