"""The fourth adversarial review's claims (issue #45): every fleet-level claim is decided inside admission, in one
order (stacks.claims), and a holder keeps what it holds. Each attack is a hostile tenant's, through the offline plan
and the resolvers the service runs (resolve_all and the incremental FleetResolver, which must agree whatever order
the events arrive in)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import yaml

from automation.cli import main
from doubles.factories import cluster_doc, fleet, hub_doc, namespace_doc
from stacks.claims import API_HOST, HOST_TAKEN, LOAD_BALANCER_CLAIMED, VPC, VPC_CLAIMED
from stacks.errors import InvalidSpec
from stacks.incremental import FleetResolver
from stacks.inputs import StackInputs
from stacks.model.loading import parse
from stacks.network.merge import MISMATCH
from stacks.resolve import Fleet, resolve_all
from stacks.tenancy import ACCOUNT_NOT_OWNED, ACCOUNT_SHARED

SHARED = "222222222222"  # acme's account, which the administrator also lets globex own
MESH_LABEL, MESH_ON = "hubwright.io/mesh", "hubwright.io/mesh-enabled"
VICTIM_NET = {"vpcID": "vpc-0victim", "cidr": "10.60.0.0/16", "routeTableIDs": ["rtb-0victim"],
              "nodeSecurityGroupIDs": ["sg-0victim"]}
BOTH_OWN = {"acme": {"hubwright.io/owner-account-id": SHARED}, "globex": {"hubwright.io/owner-account-id": SHARED}}


def shared_hub(**spec: Any) -> dict:
    return hub_doc(tenancy={"sharedAccounts": [SHARED], **spec.pop("tenancy", {})}, **spec)


def doc(name: str, namespace: str, *, created: str, group: str | None = None, network: dict | None = None,
        status: dict | None = None, **spec: Any) -> dict:
    spec.setdefault("accountID", SHARED)
    out = cluster_doc(name, namespace, labels={MESH_LABEL: group} if group else {},
                      annotations={MESH_ON: "true"} if group else {}, **spec)
    if network is not None:
        out["spec"]["network"] = network
    out["metadata"]["creationTimestamp"] = created
    if status is not None:
        out["status"] = status
    return out


def found(vpc: str, cidr: str, *, balancer: dict | None = None) -> dict:
    net = {"accountID": SHARED, "region": "us-east-1", "vpcID": vpc, "cidrs": [cidr],
           "subnets": [{"subnetID": f"subnet-{vpc[4:]}", "availabilityZone": "us-east-1a",
                        "routeTableID": f"rtb-{vpc[4:]}", "private": True}],
           "routeTableIDs": [f"rtb-{vpc[4:]}"], "securityGroupIDs": [f"sg-{vpc[4:]}"],
           "nodeSecurityGroupIDs": [f"sg-{vpc[4:]}"], "observedAt": "2026-11-25T10:00:00Z"}
    if balancer is not None:
        net["loadBalancer"] = balancer
    return net


def write(tmp: Path, docs: list[dict], hub: dict) -> tuple[str, str]:
    folder = tmp / "clusters"
    folder.mkdir(exist_ok=True)
    namespaces = [namespace_doc("acme", SHARED), namespace_doc("globex", SHARED)]
    (folder / "namespaces.yaml").write_text(yaml.safe_dump_all(namespaces))
    for i, one in enumerate(docs):
        (folder / f"{i:02d}.yaml").write_text(yaml.safe_dump(one))
    (tmp / "hub.yaml").write_text(yaml.safe_dump(hub))
    return str(tmp / "hub.yaml"), str(folder)


def plan(capsys, hub: str, folder: str, *more: str) -> tuple[int, Any, str]:
    code = main(["plan", "--hub", hub, "--clusters", folder, "--format", "json", "--no-cache", *more])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def both(clusters: list, hub: dict, *, discovery: bool = True, stacks: frozenset[str] = frozenset(),
         namespaces: dict | None = None) -> dict[str, StackInputs | InvalidSpec]:
    """resolve_all's answer, checked equal to the incremental resolver's, whatever order the clusters arrive in."""
    the_fleet = fleet(parse(hub), [parse(c) if isinstance(c, dict) else c for c in clusters],
                      namespaces=BOTH_OWN if namespaces is None else namespaces, discovery=discovery, stacks=stacks)
    answer = resolve_all(the_fleet)
    for order in itertools.islice(itertools.permutations(the_fleet.clusters), 24):
        resolver = FleetResolver.of(Fleet(**{**the_fleet.__dict__, "clusters": ()}))
        for one in order:
            resolver.put(one, stack=one.key in stacks)
            resolver.resolve()  # one event at a time
        incremental, _ = resolver.resolve()
        assert incremental.inputs == answer.inputs
        assert incremental.claims == answer.claims
    return answer.inputs


# --- High 1 (a): a cluster refused VPCClaimed takes nothing from the fleet ------------------------------------

def spy_fleet() -> list[dict]:
    victim = doc("victim", "acme", created="2026-01-01T00:00:00Z", network=VICTIM_NET)  # PrivateLink: discovered
    spy = doc("spy", "globex", created="2026-04-01T00:00:00Z", group="evil", network=VICTIM_NET,
              privateLink={"enabled": False})
    base = doc("base", "globex", created="2026-05-01T00:00:00Z", group="evil", privateLink={"enabled": False},
               network={"vpcID": "vpc-0base", "cidr": "10.70.0.0/16", "routeTableIDs": ["rtb-0base"],
                        "nodeSecurityGroupIDs": ["sg-0base"]})
    return [victim, spy, base]


def test_a_spy_refused_for_the_victims_vpc_is_no_mesh_member_so_its_peer_builds_nothing_there(capsys, tmp_path):
    hub, folder = write(tmp_path, spy_fleet(), shared_hub())
    code, _, err = plan(capsys, hub, folder)
    assert code == 2 and "HubCluster globex/spy: spec.network.vpcID: VPC vpc-0victim is already held by a cluster " \
                          "in another namespace" in err, err
    code, doc_, err = plan(capsys, hub, folder, "--cluster", "globex/base")
    assert code == 0, err
    [stack] = doc_["stacks"]
    touched = json.dumps(stack)
    assert "vpc-0victim" not in touched and "rtb-0victim" not in touched and "sg-0victim" not in touched
    assert not [r for r in stack["resources"] if r["type"] == "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"]
    code, doc_, err = plan(capsys, hub, folder, "--cluster", "acme/victim")
    assert code == 0 and [s["stack"] for s in doc_["stacks"]] == ["acme.victim"], err


def test_the_gate_refuses_the_spy_before_the_mesh_reads_it_in_both_resolvers():
    docs = spy_fleet()
    for one, (vpc, cidr) in zip(docs, [("vpc-0victim", "10.60.0.0/16")] * 2 + [("vpc-0base", "10.70.0.0/16")]):
        one["status"] = {"network": found(vpc, cidr)}
    answers = both(docs, shared_hub())
    assert isinstance(answers["acme/victim"], StackInputs)
    assert isinstance(answers["globex/spy"], InvalidSpec) and answers["globex/spy"].reason == VPC_CLAIMED
    base = answers["globex/base"]
    assert isinstance(base, StackInputs)
    assert "vpc-0victim" not in repr(base) and "globex.spy" not in repr(base)  # its would-be peer was refused


# --- High 1 (b): a holder keeps what it holds; age decides only among clusters that hold nothing -------------

def test_an_old_placeholder_repointed_at_a_running_clusters_vpc_is_refused_and_the_holder_keeps_it():
    network = {"vpcID": "vpc-0victim"}
    victim = doc("victim", "acme", created="2026-06-01T00:00:00Z", network=network,
                 status={"network": found("vpc-0victim", "10.60.0.0/16"),
                         "claims": {"vpcID": "vpc-0victim", "account": SHARED}})
    placeholder = doc("placeholder", "globex", created="2025-01-01T00:00:00Z", network=network,
                      status={"network": found("vpc-0victim", "10.60.0.0/16")})
    answers = both([victim, placeholder], shared_hub())
    assert isinstance(answers["acme/victim"], StackInputs)
    refusal = answers["globex/placeholder"]
    assert isinstance(refusal, InvalidSpec) and refusal.reason == VPC_CLAIMED
    assert "acme/victim" not in str(refusal)  # another tenant's cluster is never named


def test_an_old_placeholder_repointed_at_a_running_clusters_api_host_is_refused():
    victim = doc("victim", "acme", created="2026-06-01T00:00:00Z", apiURL="https://api.victim.example.com",
                 status={"claims": {"apiHost": "api.victim.example.com"}}, privateLink={"enabled": False})
    placeholder = doc("placeholder", "globex", created="2025-01-01T00:00:00Z", privateLink={"enabled": False},
                      apiURL="https://API.victim.example.com:6443")
    answers = both([victim, placeholder], shared_hub(), discovery=False)
    assert isinstance(answers["acme/victim"], StackInputs)
    assert isinstance(answers["globex/placeholder"], InvalidSpec) and answers["globex/placeholder"].reason == HOST_TAKEN


def test_an_old_placeholder_of_another_namespace_cannot_take_a_first_claimed_account():
    hub = hub_doc(tenancy={"unownedNamespaces": "FirstClaim"}, roleAccountMap={"444444444444": "arn:aws:iam::444444444444:role/hubwright"})
    victim = doc("victim", "team-a", created="2026-06-01T00:00:00Z", accountID="444444444444",
                 status={"claims": {"account": "444444444444"}}, privateLink={"enabled": False})
    placeholder = doc("placeholder", "team-b", created="2025-01-01T00:00:00Z", accountID="444444444444",
                      privateLink={"enabled": False})
    answers = both([victim, placeholder], hub, discovery=False, namespaces={"team-a": {}, "team-b": {}})
    assert isinstance(answers["team-a/victim"], StackInputs)
    refusal = answers["team-b/placeholder"]
    assert isinstance(refusal, InvalidSpec) and refusal.reason == ACCOUNT_NOT_OWNED


def test_a_cluster_refused_at_one_stage_enters_no_later_one():
    """`older` is refused its VPC (the holder's), so it does not claim its API host: `younger` gets it."""
    holder = doc("holder", "acme", created="2025-01-01T00:00:00Z", network={"vpcID": "vpc-0h"},
                 status={"network": found("vpc-0h", "10.61.0.0/16")})
    older = doc("older", "acme", created="2026-01-01T00:00:00Z", network={"vpcID": "vpc-0h"},
                apiURL="https://api.same.example.com", status={"network": found("vpc-0h", "10.61.0.0/16")})
    younger = doc("younger", "acme", created="2026-02-01T00:00:00Z", network={"vpcID": "vpc-0y"},
                  apiURL="https://api.same.example.com", status={"network": found("vpc-0y", "10.62.0.0/16")})
    answers = both([holder, older, younger], shared_hub())
    assert answers["acme/older"].reason == VPC_CLAIMED and len(answers["acme/older"].errors) == 1
    assert isinstance(answers["acme/younger"], StackInputs) and isinstance(answers["acme/holder"], StackInputs)


# --- Medium 4: PrivateLink publishes the cluster's own load balancer only ------------------------------------

def balancer(vpc: str, name: str = "pl-x7k2p-int") -> dict:
    return {"name": name, "type": "network", "scheme": "internal", "vpcID": vpc,
            "arn": f"arn:aws:elasticloadbalancing:us-east-1:{SHARED}:loadbalancer/net/{name}/0123456789abcdef"}


def test_a_load_balancer_outside_the_clusters_vpc_is_refused_in_the_offline_plan(capsys, tmp_path):
    acme_api = balancer("vpc-0acme", "acme-api-int")
    pl = doc("pl", "globex", created="2026-05-01T00:00:00Z", network={"vpcID": "vpc-0pl"},
             privateLink={"enabled": True, "loadBalancerName": "acme-api-int"},
             status={"network": found("vpc-0pl", "10.71.0.0/16", balancer=acme_api)})
    hub, folder = write(tmp_path, [pl], shared_hub())
    code, _, err = plan(capsys, hub, folder)
    assert code == 2, err
    assert "HubCluster globex/pl: spec.privateLink.loadBalancerName: load balancer acme-api-int is in VPC " \
           "vpc-0acme, not the cluster's VPC vpc-0pl" in err, err
    answers = both([pl], shared_hub())
    assert answers["globex/pl"].reason == MISMATCH


def test_one_load_balancer_is_published_for_one_cluster_the_holder_keeps_it():
    lb = balancer("vpc-0one")
    holder = doc("holder", "acme", created="2026-06-01T00:00:00Z", network={"vpcID": "vpc-0one"},
                 status={"network": found("vpc-0one", "10.72.0.0/16", balancer=lb),
                         "claims": {VPC: "vpc-0one", "loadBalancer": lb["arn"]}})
    # An older cluster whose discovery found the same NLB: it can only be in the NLB's VPC (else NetworkMismatch),
    # which the holder holds, so the VPC stage, the first it fails, is the one it is told.
    other = doc("other", "globex", created="2025-01-01T00:00:00Z", network={"vpcID": "vpc-0one"},
                privateLink={"enabled": True, "loadBalancerName": "pl-x7k2p-int"},
                status={"network": found("vpc-0one", "10.72.0.0/16", balancer=lb)})
    answers = both([holder, other], shared_hub())
    assert isinstance(answers["acme/holder"], StackInputs)
    assert answers["globex/other"].reason == VPC_CLAIMED and len(answers["globex/other"].errors) == 1
    # The load balancer stage alone (stacks.claims.claim), as a declared-only VPC would leave it:
    from stacks.claims import LOAD_BALANCER, Claimant, claim
    from stacks.resolve import admit
    the_fleet = fleet(parse(shared_hub()), [parse(holder), parse(other)], namespaces=BOTH_OWN)
    owners = the_fleet.owners()
    refused = claim(LOAD_BALANCER, [Claimant(c, admit(c, owners, the_fleet.hub.spec.role_account_map))
                                    for c in the_fleet.clusters])
    assert list(refused) == ["globex/other"] and refused["globex/other"].reason == LOAD_BALANCER_CLAIMED


# --- two namespaces owning one account: the administrator's explicit choice -----------------------------------

def test_an_account_two_namespaces_own_refuses_new_clusters_in_both_until_listed_but_keeps_running_ones():
    running = doc("running", "acme", created="2026-01-01T00:00:00Z", privateLink={"enabled": False})
    new = doc("new", "globex", created="2026-05-01T00:00:00Z", privateLink={"enabled": False})
    answers = both([running, new], hub_doc(), discovery=False, stacks=frozenset({"acme/running"}))
    assert isinstance(answers["acme/running"], StackInputs)
    refusal = answers["globex/new"]
    assert isinstance(refusal, InvalidSpec) and refusal.reason == ACCOUNT_SHARED
    assert "account 222222222222 is owned by namespaces acme, globex" in str(refusal)
    assert "spec.tenancy.sharedAccounts" in str(refusal)
    listed = both([running, new], shared_hub(), discovery=False, stacks=frozenset({"acme/running"}))
    assert all(isinstance(v, StackInputs) for v in listed.values())


def test_what_admission_granted_is_what_the_service_records():
    victim = parse(doc("victim", "acme", created="2026-06-01T00:00:00Z", network={"vpcID": "vpc-0victim"},
                       status={"network": found("vpc-0victim", "10.60.0.0/16")}))
    answer = resolve_all(fleet(parse(shared_hub()), [victim], namespaces=BOTH_OWN, discovery=True))
    assert answer.claims["acme/victim"] == {VPC: "vpc-0victim", "infraID": f"{SHARED}/victim-x7k2p",
                                            API_HOST: "api.victim.example.com", "account": SHARED}


def test_in_the_offline_plan_a_cluster_its_baseline_planned_keeps_its_claims_before_a_new_one(capsys, tmp_path):
    """A Git repository holds no status.claims: with a baseline, the clusters it planned hold before new ones, so a
    pull request adding an older-looking squatter on a running cluster's VPC is refused, not the running cluster."""
    running = doc("victim", "globex", created="2026-01-01T00:00:00Z", network=VICTIM_NET)
    hub, folder = write(tmp_path, [running], shared_hub())
    code, base, err = plan(capsys, hub, folder)
    assert code == 0, err
    (tmp_path / "base.json").write_text(json.dumps(base))
    squatter = doc("aaa", "acme", created="2025-01-01T00:00:00Z", network=VICTIM_NET)  # older, and sorts first
    hub, folder = write(tmp_path, [running, squatter], shared_hub())
    code, _, err = plan(capsys, hub, folder)
    assert code == 2 and "HubCluster globex/victim: spec.network.vpcID" in err  # no baseline: age decides
    code = main(["plan", "--hub", hub, "--clusters", folder, "--no-cache", "--baseline", str(tmp_path / "base.json"),
                 "--format", "json"])
    _, err = capsys.readouterr()
    assert code == 2 and "HubCluster acme/aaa: spec.network.vpcID: VPC vpc-0victim is already held by a cluster in " \
                         "another namespace" in err and "globex/victim:" not in err, err
