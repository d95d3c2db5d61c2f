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

from automation.adapters.plan import plan_stack, raise_invalid
from bench import fleets
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.resolve import Fleet, resolve_fleet

MESH_TYPES = {
    "peerings": "aws:ec2/vpcPeeringConnection:VpcPeeringConnection",
    "routes": "aws:ec2/route:Route",
    "rules": "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
}


def mesh_fleet(members: int, tables: int) -> Fleet:
    if not 1 <= members <= 125 * 256:
        raise SystemExit("--members must be between 1 and 32000")
    # Quotas raised as far as AWS goes, so that the group size is the only variable.
    hub = fleets.hub(mesh={"peeringsPerVPC": 125, "routesPerTable": 1000,
                           "groups": {"bench": {"namespaces": [f"tenant-{k}" for k in range(3)]}}})
    clusters = tuple(
        fleets.cluster(i, f"m{i:03d}", f"tenant-{i % 3}", account=fleets.ACCOUNTS[i % 3 % 2], vpc=f"vpc-0m{i:03d}",
                       route_tables=[f"rtb-0m{i:03d}{t}" for t in range(tables)], security_group=f"sg-0m{i:03d}",
                       metadata={"creationTimestamp": f"2025-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                 "labels": {MESH_LABEL: "bench"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}})
        for i in range(members)
    )
    return Fleet(hub=hub, clusters=clusters, namespaces=fleets.owners(3))


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
