"""How long the offline plan of one mesh group takes: `python -m bench.mesh_plan --members 50`.

Generates one group across two accounts and two regions (each member with `--tables` route tables and
one node security group), resolves it (mesh ownership included) and runs every member's stack program
under the mock runtime. Prints one JSON object; `joiner_plan_seconds` is the stack a join runs (the
last joiner owns a pair with every other member). `--topology transitGateway` plans the group over a
Transit Gateway (the transit stack too, as automation.adapters.engine.plan.plan_fleet does); `--summary` gives it
summaryCIDRs. `runs_per_join`: the stacks a join runs (stacks.mesh and stacks.transit say which; the service's
figure is bench.reconcile's mesh_join_runs / tgw_join_runs).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

from automation.adapters.engine.plan import plan_fleet, plan_stack, raise_invalid
from bench import fleets
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.resolve import Fleet, resolve_all, resolve_fleet
from stacks.transit import MeshStatus, TransitOutputs, TransitRegionOutputs

MESH_TYPES = {
    "peerings": "aws:ec2/vpcPeeringConnection:VpcPeeringConnection",
    "attachments": "aws:ec2transitgateway/vpcAttachment:VpcAttachment",
    "routes": "aws:ec2/route:Route",
    "rules": "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
}


def mesh_fleet(members: int, tables: int, topology: str = "peering", summary: bool = False) -> Fleet:
    if not 1 <= members <= 125 * 256:
        raise SystemExit("--members must be between 1 and 32000")
    # Quotas raised as far as AWS goes, so that the group size is the only variable.
    group = {"namespaces": [f"tenant-{k}" for k in range(3)], "topology": topology,
             "summaryCIDRs": ["10.0.0.0/8"] if summary else []}
    hub = fleets.hub(mesh={"peeringsPerVPC": 125, "routesPerTable": 1000, "rulesPerSecurityGroup": 1000,
                           "groups": {"bench": group}})
    clusters = tuple(
        fleets.cluster(i, f"m{i:03d}", f"tenant-{i % 3}", account=fleets.ACCOUNTS[i % 3 % 2], vpc=f"vpc-0m{i:03d}",
                       route_tables=[f"rtb-0m{i:03d}{t}" for t in range(tables)], security_group=f"sg-0m{i:03d}",
                       metadata={"creationTimestamp": f"2025-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                 "labels": {MESH_LABEL: "bench"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}},
                       transit_subnets=[{"subnetID": f"subnet-0m{i:03d}{z}", "availabilityZone": f"{az}{z}"}
                                        for az in [fleets.REGIONS[(i // 2) % 2]] for z in "ab"])
        for i in range(members)
    )
    return Fleet(hub=hub, clusters=clusters, namespaces=fleets.owners(3))


def runs_per_join(fleet: Fleet) -> int:
    """Stacks (clusters' and transit) whose inputs a join changes: the last cluster of `fleet` joins a settled
    group (its gateways made, every earlier member attached)."""
    first = resolve_all(fleet).mesh
    made = {stack: TransitOutputs(regions={r.region: TransitRegionOutputs(transit_gateway_id=f"tgw-{r.region}")
                                           for r in t.regions}) for stack, t in first.transit.items()}
    status = MeshStatus(groups={}, transit=made, attachments={c.key: f"tgw-attach-{c.key}" for c in fleet.clusters})

    def digests(clusters) -> dict[str, str]:
        resolved = resolve_all(dataclasses.replace(fleet, clusters=clusters, mesh_status=status))
        return {**{k: v.digest() for k, v in resolved.inputs.items()},
                **{k: v.digest() for k, v in resolved.mesh.transit.items()}}

    before, after = digests(fleet.clusters[:-1]), digests(fleet.clusters)
    return sum(1 for key, digest in after.items() if before.get(key) != digest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=50, help="members of the group (default 50)")
    parser.add_argument("--tables", type=int, default=2, help="route tables per member (default 2)")
    parser.add_argument("--topology", choices=["peering", "transitGateway"], default="peering")
    parser.add_argument("--summary", action="store_true", help="the group declares summaryCIDRs (10.0.0.0/8)")
    args = parser.parse_args()

    started = time.perf_counter()
    fleet = mesh_fleet(args.members, args.tables, args.topology, args.summary)
    inputs = raise_invalid(resolve_fleet(fleet))
    resolved = time.perf_counter()
    if args.topology == "transitGateway":
        settled, plans = plan_fleet(fleet)  # the members' inputs once the transit stack has made the gateways
        t0 = time.perf_counter()
        plan_stack(settled.inputs[inputs[-1].key])  # the last member is the latest joiner
        joiner_seconds = time.perf_counter() - t0
    else:
        plans, joiner_seconds = [], 0.0
        for one in inputs:
            t0 = time.perf_counter()
            plans.append(plan_stack(one))
            joiner_seconds = time.perf_counter() - t0  # the last member is the latest joiner
    done = time.perf_counter()
    counts = {name: sum(len(p.of_type(t)) for p in plans) for name, t in MESH_TYPES.items()}
    print(json.dumps({
        "members": args.members,
        "topology": args.topology + (" + summaryCIDRs" if args.summary else ""),
        "route_tables_per_member": args.tables,
        "runs_per_join": runs_per_join(fleet),
        **counts,
        "resources": sum(len(p.resources) for p in plans),
        "resolve_seconds": round(resolved - started, 3),
        "plan_seconds": round(done - resolved, 3),
        "joiner_plan_seconds": round(joiner_seconds, 3),
        "total_seconds": round(done - started, 3),
    }))


if __name__ == "__main__":
    main()
