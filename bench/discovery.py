"""What discovery costs per cluster, and per drift interval at 1,000 clusters: `python -m bench.discovery`.

A moto server (server mode, real HTTP on 127.0.0.1) holds --clusters cluster networks, each as an installer
leaves it: a VPC tagged kubernetes.io/cluster/<infraID>=owned with a secondary CIDR, three zones with a private
(tagged kubernetes.io/role/internal-elb) and a public subnet each, a route table per private subnet and the main
table, a tagged node security group and the default one, and the internal NLB <infraID>-int. The clusters are
spread over --accounts accounts, each reached through its role (AssumeRole), as the service does.

automation.adapters.aws.discovery.AwsDiscovery then reads every cluster's network twice with --workers threads,
as the service's discovery would for clusters that ask for PrivateLink: a cold pass (one AssumeRole per cluster,
since each cluster has its own session name) and a warm one (the credentials cached, as at the next drift interval
within their lifetime). --by vpc gives each query its VPC ID instead of the installer's tag (same calls).

Prints one JSON object: per pass the AWS API calls (and AssumeRoles) per cluster, the milliseconds per discovery
(median and p95 of each discover(), and wall time / clusters), and the extrapolation to --fleet clusters (default
1,000) per drift interval (--interval, default HubConfig's 10m): calls, seconds at the measured rate with
--workers threads, and the EC2 Describe calls per account per second that needs (AWS refills an account's
non-mutating EC2 bucket at 20 calls per second, per region).

moto answers from memory on this machine: real AWS adds a network round trip (tens of milliseconds) per call, so
the seconds here are a floor; the call counts are exact.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import time
from typing import Any, Iterator

import boto3

from automation.adapters.aws.discovery import AwsDiscovery, NetworkLookup, discover_all
from automation.adapters.aws.sessions import AwsSessions
from automation.sandbox.aws import MotoMissing, start_moto, stop_moto
from stacks.network.found import FoundNetwork
from stacks.network.query import NetworkQuery, query_of
from stacks.resolve import fleet_targets
from stacks.targets import AwsTarget

from doubles.factories import cluster, fleet, hub, owned

REGION = "us-east-1"
ZONES = ("a", "b", "c")
EC2_DESCRIBE_REFILL_PER_S = 20  # AWS's non-mutating EC2 actions: bucket 100, refill 20/s, per account and region


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """The sandbox's moto (automation.sandbox.aws.start_moto) on a free port; its URL."""
    try:
        url, process = start_moto()
    except MotoMissing as exc:
        raise SystemExit(str(exc)) from None
    try:
        yield url
    finally:
        stop_moto(process)


def _base() -> boto3.Session:
    return boto3.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name=REGION)


def _in_account(url: str, account: str) -> boto3.Session:
    creds = _base().client("sts", endpoint_url=url).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/setup", RoleSessionName="bench-setup")["Credentials"]
    return boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                         aws_session_token=creds["SessionToken"], region_name=REGION)


def make_network(ec2: Any, elb: Any, index: int, infra: str) -> str:
    """One cluster's network as an installer leaves it; its VPC ID."""
    def tags(kind: str, **values: str) -> list[dict]:
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in values.items()]}]

    block = f"10.{index // 256 % 256}.{index % 256}"  # a /24 per cluster, and a secondary /24 in 100.64.0.0/10
    vpc = ec2.create_vpc(CidrBlock=f"{block}.0/24", TagSpecifications=tags(
        "vpc", Name=infra, **{f"kubernetes.io/cluster/{infra}": "owned"}))["Vpc"]["VpcId"]
    ec2.associate_vpc_cidr_block(VpcId=vpc, CidrBlock=f"100.{64 + index // 256 % 64}.{index % 256}.0/24")
    private = []
    for n, zone in enumerate(ZONES):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"{block}.{n * 32}/28", AvailabilityZone=f"{REGION}{zone}",
                                   TagSpecifications=tags("subnet", **{"kubernetes.io/role/internal-elb": "1"})
                                   )["Subnet"]["SubnetId"]
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"{block}.{n * 32 + 16}/28", AvailabilityZone=f"{REGION}{zone}",
                          TagSpecifications=tags("subnet", **{"kubernetes.io/role/elb": "1"}))
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
        private.append(subnet)
    ec2.create_security_group(GroupName=f"{infra}-node", Description="nodes", VpcId=vpc, TagSpecifications=tags(
        "security-group", **{"sigs.k8s.io/cluster-api-provider-aws/role": "node"}))
    elb.create_load_balancer(Name=f"{infra}-int", Subnets=private, Scheme="internal", Type="network")
    return vpc


def queries(count: int, accounts: list[str], by_vpc: dict[str, str] | None) -> list[NetworkQuery]:
    """The queries the service builds (stacks.network.query.query_of over the admitted targets), for clusters
    bench/c0000... whose namespaces own the accounts round-robin."""
    h = hub(roleAccountMap={a: f"arn:aws:iam::{a}:role/hubwright" for a in accounts})
    clusters = []
    for i in range(count):
        infra = f"c{i:04d}-bench"
        network = {"vpcID": by_vpc[infra]} if by_vpc else {}
        clusters.append(cluster(f"c{i:04d}", f"tenant-{i % len(accounts)}", accountID=accounts[i % len(accounts)],
                                infraID=infra, network=network, privateLink={"enabled": True}))
    f = fleet(h, clusters, namespaces={f"tenant-{n}": owned(a) for n, a in enumerate(accounts)})
    targets = fleet_targets(f)
    made = [query_of(c, t, h) for c in clusters if isinstance(t := targets[c.key], AwsTarget)]
    return [q for q in made if q is not None]


@dataclasses.dataclass
class Timed:
    """A NetworkLookup that times each discover()."""

    lookup: NetworkLookup
    seconds: list[float] = dataclasses.field(default_factory=list)

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        start = time.perf_counter()
        try:
            return self.lookup.discover(query, now=now)
        finally:
            self.seconds.append(time.perf_counter() - start)


def one_pass(discovery: AwsDiscovery, sessions: AwsSessions, asked: list[NetworkQuery], workers: int) -> dict:
    calls, assumed = discovery.calls, sessions.assume_role_calls
    timed = Timed(discovery)
    start = time.perf_counter()
    found = discover_all(timed, asked, now="bench", workers=workers)
    wall = time.perf_counter() - start
    failed = {k: str(v) for k, v in found.items() if not isinstance(v, FoundNetwork)}
    if failed:
        raise SystemExit(f"{len(failed)} discoveries failed, e.g. {next(iter(failed.items()))}")
    ms = sorted(s * 1000 for s in timed.seconds)
    return {"calls_per_cluster": (discovery.calls - calls) / len(asked),
            "assume_role_per_cluster": (sessions.assume_role_calls - assumed) / len(asked),
            "ms_per_discovery": {"median": round(statistics.median(ms), 1),
                                 "p95": round(ms[max(0, int(len(ms) * 0.95) - 1)], 1)},
            "wall_s": round(wall, 2), "wall_ms_per_cluster": round(wall * 1000 / len(asked), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.discovery", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=50, help="cluster networks made in moto and discovered")
    parser.add_argument("--accounts", type=int, default=2, help="cluster accounts they are spread over")
    parser.add_argument("--workers", type=int, default=4, help="discoveries side by side (threads)")
    parser.add_argument("--by", choices=["tag", "vpc"], default="tag",
                        help="find each VPC by the installer's tag (default) or by its declared ID")
    parser.add_argument("--fleet", type=int, default=1000, help="clusters to extrapolate to")
    parser.add_argument("--interval", type=float, default=600.0, help="the drift interval, seconds")
    args = parser.parse_args(argv)
    accounts = [f"{222222222222 + 111111111111 * n}" for n in range(max(1, min(args.accounts, 7)))]
    with moto_server() as url:
        setup_start = time.perf_counter()
        vpcs: dict[str, str] = {}
        clients = {a: (_in_account(url, a).client("ec2", endpoint_url=url),
                       _in_account(url, a).client("elbv2", endpoint_url=url)) for a in accounts}
        for i in range(args.clusters):
            ec2, elb = clients[accounts[i % len(accounts)]]
            vpcs[f"c{i:04d}-bench"] = make_network(ec2, elb, i, f"c{i:04d}-bench")
        setup_s = time.perf_counter() - setup_start
        asked = queries(args.clusters, accounts, vpcs if args.by == "vpc" else None)
        sessions = AwsSessions(base=_base(), endpoint_url=url)
        discovery = AwsDiscovery(sessions)
        cold = one_pass(discovery, sessions, asked, args.workers)
        warm = one_pass(discovery, sessions, asked, args.workers)
    per_cluster_s = warm["wall_ms_per_cluster"] / 1000
    ec2_calls = warm["calls_per_cluster"] - 1  # all but DescribeLoadBalancers are EC2's
    print(json.dumps({
        "clusters": args.clusters, "accounts": len(accounts), "workers": args.workers, "by": args.by,
        "setup_s": round(setup_s, 1), "cold": cold, "warm": warm,
        "extrapolated": {
            "clusters": args.fleet, "interval_s": args.interval,
            "calls_per_interval": round(warm["calls_per_cluster"] * args.fleet),
            "assume_role_per_interval_cold": round(cold["assume_role_per_cluster"] * args.fleet),
            "seconds_per_interval": round(per_cluster_s * args.fleet, 1),
            "share_of_interval": round(per_cluster_s * args.fleet / args.interval, 3),
            "ec2_calls_per_s_one_account": round(ec2_calls * args.fleet / args.interval, 1),
            "ec2_describe_refill_per_s": EC2_DESCRIBE_REFILL_PER_S,
        },
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
