"""`python -m automation plan` as a user runs it: bundled examples, JSON and tree, bad input."""
import json
import subprocess
import sys

import yaml

from tests.factories import cluster_doc, namespace_doc


def run(*args, cwd="."):
    return subprocess.run([sys.executable, "-m", "automation", *args], capture_output=True, text=True, cwd=cwd)


def test_json_plan_of_the_bundled_examples():
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters", "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    stacks = {s["stack"]: s for s in doc["stacks"]}
    assert set(stacks) >= {"acme.prod-1", "acme.prod-2", "globex.eu-1"}
    for stack in stacks.values():
        urns = {r["urn"] for r in stack["resources"]}
        for res in stack["resources"]:
            assert set(res) >= {"urn", "type", "name", "parent", "dependencies", "account", "region", "inputs"}
            assert set(res["dependencies"]) <= urns
        services = [r for r in stack["resources"] if r["type"] == "aws:ec2/vpcEndpointService:VpcEndpointService"]
        if services:
            assert services[0]["inputs"]["acceptanceRequired"] is False
    eu = [r for r in stacks["globex.eu-1"]["resources"] if r["type"] == "aws:ec2/vpcEndpoint:VpcEndpoint"][0]
    assert (eu["account"], eu["region"], eu["inputs"]["vpcId"]) == ("111111111111", "eu-west-1", "vpc-0hubeu")


def test_tree_plan_is_readable():
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stack ")
    assert "\nstack acme.prod-1  (cluster acme/prod-1, " in done.stdout
    assert "── aws:route53/record:Record acme.prod-1-dns  [111111111111 us-east-1]" in done.stdout
    assert "── aws:ec2/vpcEndpointService:VpcEndpointService acme.prod-1-svc  [222222222222 us-east-1]" in done.stdout


def test_bad_input_exits_non_zero_names_every_problem_and_prints_no_partial_plan(tmp_path):
    (tmp_path / "ns.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("strays", "444444444444")]))
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(cluster_doc("good")))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cluster_doc("bad", "strays", accountID="444444444444")))
    (tmp_path / "worse.yaml").write_text(yaml.safe_dump(cluster_doc("worse", apiURL="ftp://x")))
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", str(tmp_path), "--format", "json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "HubCluster strays/bad: spec.accountID: account 444444444444 has no role" in done.stderr
    assert "HubCluster acme/worse" in done.stderr and "spec.apiURL" in done.stderr


def test_inputs_prints_the_stack_config_that_pulumi_up_reads():
    done = run("inputs", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters", "--cluster", "acme/prod-1")
    assert done.returncode == 0, done.stderr
    inputs = json.loads(done.stdout)
    assert inputs["stack"] == "acme.prod-1"
    assert inputs["private_link"]["nlb_name"] == "prod1-x7k2p-int"


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    (tmp_path / "ns.yaml").write_text(yaml.safe_dump(namespace_doc("acme")))
    for i in range(12):  # about 180 KB of plan: far more than a pipe holds, so the writer must hit the closed end
        (tmp_path / f"c{i}.yaml").write_text(yaml.safe_dump(cluster_doc(f"c{i}")))
    proc = subprocess.Popen([sys.executable, "-m", "automation", "plan", "--hub", "examples/hub.yaml",
                             "--clusters", str(tmp_path), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    stderr = proc.stderr.read().decode()
    assert proc.wait() == 141
    assert "Traceback" not in stderr


def test_a_member_cidr_inside_the_hubs_management_vpc_is_refused_naming_the_member_and_the_hub_cidr(tmp_path):
    """The route hijack (issue 31, item 1): in a group the hub declared across acme and globex, globex declares
    10.0.9.0/24, inside the hub's associated management VPC 10.0.0.0/16. Admitted, its stack would write
    10.0.9.0/24 -> pcx into acme's route tables, more specific than acme's route to the hub: it would win."""
    hub_doc = yaml.safe_load(open("examples/hub.yaml"))
    hub_doc["spec"]["mesh"] = {"groups": {"core": {"namespaces": ["acme", "globex"]}}}
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc))
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "ns.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("globex")]))
    mesh = {"labels": {"hubwright.io/mesh": "core"}, "annotations": {"hubwright.io/mesh-enabled": "true"}}
    (clusters / "victim.yaml").write_text(yaml.safe_dump(cluster_doc("victim", "acme", privateLink={"enabled": False},
                                                                     **mesh)))
    evil = cluster_doc("evil", "globex", accountID="333333333333", privateLink={"enabled": False}, **mesh,
                       network={"vpcID": "vpc-0e1", "cidr": "10.0.9.0/24", "routeTableIDs": ["rtb-0e1"],
                                "nodeSecurityGroupIDs": ["sg-0e1"]})
    (clusters / "evil.yaml").write_text(yaml.safe_dump(evil))
    done = run("plan", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(clusters), "--format", "json")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "HubCluster globex/evil: spec.network.cidr: CIDR 10.0.9.0/24 of HubCluster globex/evil overlaps CIDR " \
           "10.0.0.0/16 of HubConfig default spec.associatedVPCs[0] (VPC vpc-0mgmt)" in done.stderr
    assert "HubCluster acme/victim" not in done.stderr  # the victim is not blamed


def test_reserved_cidrs_and_member_cidrs_refuse_a_member_in_the_plan(tmp_path):
    hub_doc = yaml.safe_load(open("examples/hub.yaml"))
    hub_doc["spec"]["mesh"] = {"reservedCIDRs": ["192.168.0.0/16"],
                               "groups": {"core": {"namespaces": ["acme", "globex"], "memberCIDRs": ["10.0.0.0/8"]}}}
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc))
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / "ns.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("globex")]))
    mesh = {"labels": {"hubwright.io/mesh": "core"}, "annotations": {"hubwright.io/mesh-enabled": "true"}}
    onprem = cluster_doc("onprem", "globex", accountID="333333333333", privateLink={"enabled": False}, **mesh,
                         network={"vpcID": "vpc-0e1", "cidr": "192.168.4.0/24", "routeTableIDs": ["rtb-0e1"],
                                  "nodeSecurityGroupIDs": ["sg-0e1"]})
    outside = cluster_doc("outside", "acme", privateLink={"enabled": False}, **mesh,
                          network={"vpcID": "vpc-0o1", "cidr": "172.20.0.0/16", "routeTableIDs": ["rtb-0o1"],
                                   "nodeSecurityGroupIDs": ["sg-0o1"]})
    (clusters / "c.yaml").write_text(yaml.safe_dump_all([onprem, outside]))
    done = run("plan", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(clusters), "--format", "json")
    assert done.returncode == 2, done.stderr
    assert "HubCluster globex/onprem: spec.network.cidr: CIDR 192.168.4.0/24 of HubCluster globex/onprem overlaps CIDR " \
           "192.168.0.0/16 of HubConfig default spec.mesh.reservedCIDRs[0]" in done.stderr
    assert "HubCluster acme/outside: spec.network.cidr: CIDR 172.20.0.0/16 of HubCluster acme/outside is in none of mesh " \
           "group core's memberCIDRs (10.0.0.0/8)" in done.stderr
