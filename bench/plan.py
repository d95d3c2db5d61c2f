"""How long the offline plan takes: `python -m bench.plan --clusters 100` (or `--examples`).

Generates a fleet across two accounts and two regions (or reads the bundled
examples), resolves it and runs every stack program under the mock runtime.
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time

from automation.adapters.files import load_fleet
from automation.adapters.plan import plan_all, raise_invalid
from bench import fleets
from stacks.resolve import Fleet, resolve_fleet

def generated_fleet(n: int) -> Fleet:
    inventory = [
        {"region": region, "vpcID": f"vpc-0hub{r}{i}", "cidr": f"10.{100 + r * 10 + i}.0.0/16",
         "subnets": [{"subnetID": f"subnet-0{r}{i}{z}", "availabilityZone": f"{region}{z}"} for z in "abc"]}
        for r, region in enumerate(fleets.REGIONS) for i in range(max(1, -(-n // (2 * 40))))
    ]
    hub = fleets.hub(endpointVPCInventory=inventory,
                     associatedVPCs=[{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "10.0.0.0/16"}])
    clusters = tuple(
        fleets.cluster(i, f"c{i:04d}", f"tenant-{i % 7}", account=fleets.ACCOUNTS[i % 7 % 2], vpc=f"vpc-0c{i:04d}",
                       route_tables=[f"rtb-0{i:04d}"], security_group=f"sg-0{i:04d}", privateLink={"enabled": True})
        for i in range(n)
    )
    return Fleet(hub=hub, clusters=clusters, namespaces=fleets.owners(7))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=100, help="generated clusters (ignored with --examples)")
    parser.add_argument("--examples", action="store_true", help="plan the bundled examples/ instead")
    args = parser.parse_args()

    started = time.perf_counter()
    fleet = load_fleet("examples/hub.yaml", "examples/clusters") if args.examples else generated_fleet(args.clusters)
    inputs = raise_invalid(resolve_fleet(fleet))
    resolved = time.perf_counter()
    plans = plan_all(inputs)
    done = time.perf_counter()
    print(json.dumps({
        "clusters": len(inputs),
        "resources": sum(len(p.resources) for p in plans),
        "resolve_seconds": round(resolved - started, 3),
        "plan_seconds": round(done - resolved, 3),
        "ms_per_stack": round(1000 * (done - resolved) / max(1, len(plans)), 1),
    }))


if __name__ == "__main__":
    main()
