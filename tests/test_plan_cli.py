"""`python -m automation plan` as a user runs it: bundled examples, JSON and tree, bad input."""
import json
import subprocess
import sys

import pytest
import yaml

from doubles.factories import cluster_doc, namespace_doc

pytestmark = pytest.mark.live  # starts processes (tests/tiers.py)


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
        network = {"vpcID": f"vpc-0c{i}", "cidr": "10.1.0.0/16"}  # a VPC each: one VPC is one cluster's
        (tmp_path / f"c{i}.yaml").write_text(yaml.safe_dump(cluster_doc(f"c{i}", network=network)))
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


# --------------------------------------------------------------------------- what a plan error says

CLUSTER_YAML = """\
apiVersion: hubwright.io/v1alpha1
kind: HubCluster
metadata: {{name: {name}, namespace: acme{annotations}}}
spec:
  accountID: {account}
  region: us-east-1
  infraID: {name}-x7k2p
  apiURL: https://api.{name}.example.com:6443
  {network}: {{vpcID: vpc-0c1, cidr: 10.1.0.0/16, routeTableIDs: [rtb-01, rtb-02, {third}]}}
"""


def cluster_yaml(name="prod-1", account='"222222222222"', network="network", third="rtb-03", annotations=""):
    return CLUSTER_YAML.format(name=name, account=account, network=network, third=third, annotations=annotations)


def refused(tmp_path, files: dict[str, str], *extra: str, hub: str = "examples/hub.yaml") -> str:
    folder = tmp_path / "clusters"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    done = run("plan", "--hub", hub, "--clusters", str(folder), *extra)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    for placeholder in ("(key)", "(path)", "(file)", "(object)", "[key]"):
        assert placeholder not in done.stderr, done.stderr
    return done.stderr


def test_errors_name_the_real_field_path_with_map_keys_and_list_items_in_brackets(tmp_path):
    err = refused(tmp_path, {"a.yaml": cluster_yaml(third="rt-3", annotations=", annotations: {hubwright.io/region: 7}")
                             + "  facts: {'bad key!': x}\n"})
    where = f"HubCluster acme/prod-1 ({tmp_path / 'clusters' / 'a.yaml'})"
    assert f"{where}: spec.network.routeTableIDs[2]: 'rt-3' is not a route table ID" in err
    assert f"{where}: metadata.annotations[hubwright.io/region]: Input should be a valid string" in err
    assert f"{where}: spec.facts[bad key!]: not a valid key: String should match pattern" in err


def test_file_and_option_errors_name_the_file_or_the_option_with_no_placeholder(tmp_path):
    missing = tmp_path / "nowhere"
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", str(missing))
    assert done.returncode == 2 and f"{missing}: no such file or folder" in done.stderr
    assert "(path)" not in done.stderr
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", "examples/clusters", "--cluster", "acme/nope")
    assert done.returncode == 2 and "--cluster acme/nope: no such cluster in the fleet" in done.stderr
    assert "(key)" not in done.stderr
    err = refused(tmp_path, {"broken.yaml": "kind: [unclosed\n"})
    assert f"{tmp_path / 'clusters' / 'broken.yaml'}: not valid YAML" in err


def test_an_object_defined_twice_names_both_files_and_documents_and_every_other_problem(tmp_path):
    err = refused(tmp_path, {"one.yaml": cluster_yaml("prod-2") + "---\n" + cluster_yaml("prod-3"),
                             "two.yaml": cluster_yaml("prod-3"),
                             "three.yaml": cluster_yaml("prod-4", third="rt-3")})
    one, two = tmp_path / "clusters" / "one.yaml", tmp_path / "clusters" / "two.yaml"
    assert f"HubCluster acme/prod-3: metadata.name: defined 2 times: in {one}, document 2 and in {two}, document 1" \
        in err
    assert "HubCluster acme/prod-4" in err and "routeTableIDs[2]" in err  # not hidden behind the duplicate
    assert "prod-2" not in err


def test_a_namespace_defined_twice_with_different_annotations_names_both_files(tmp_path):
    def namespace(owner):
        return yaml.safe_dump(namespace_doc("acme", owner))

    same = {"a.yaml": cluster_yaml(), "ns1.yaml": namespace("222222222222"), "ns2.yaml": namespace("222222222222")}
    for name, text in same.items():
        (tmp_path / name).write_text(text)
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", str(tmp_path), "--format", "json")
    assert done.returncode == 0, done.stderr  # the same twice is no ambiguity
    err = refused(tmp_path, {"a.yaml": cluster_yaml(), "ns1.yaml": namespace("222222222222"),
                             "ns2.yaml": namespace("333333333333")})
    folder = tmp_path / "clusters"
    assert f"Namespace acme: metadata.name: defined 2 times: in {folder / 'ns1.yaml'}, document 1 and in " \
           f"{folder / 'ns2.yaml'}, document 1" in err


@pytest.mark.parametrize("typo, meant", [("netwrok", "spec.network"), ("netWork", "spec.network"),
                                         ("sharedIngres", "spec.sharedIngress"), ("accountId", "spec.accountID")])
def test_a_mistyped_field_gets_the_near_miss(tmp_path, typo, meant):
    text = cluster_yaml() + f"  {typo}: {{}}\n" if typo != "netwrok" else cluster_yaml(network="netwrok")
    err = refused(tmp_path, {"a.yaml": text})
    assert f"spec.{typo}: unknown field; did you mean {meant}?" in err


def test_a_mistyped_top_level_field_gets_the_near_miss_and_a_hopeless_one_the_known_fields(tmp_path):
    err = refused(tmp_path, {"a.yaml": cluster_yaml() + "spce: {}\n", "b.yaml": cluster_yaml("prod-2") + "  zzz: 1\n"})
    assert "spce: unknown field; did you mean spec?" in err
    assert "spec.zzz: unknown field (known here: accountID, region, infraID, apiURL, network," in err


@pytest.mark.parametrize("written, hint", [
    ("222222222222", 'YAML read 222222222222 as a number; quote it: "222222222222"'),
    ("012345670123", 'YAML read 012345670123 as the octal number 1402433619; quote it: "012345670123"'),
])
def test_an_unquoted_account_id_gets_the_hint_to_quote_it(tmp_path, written, hint):
    err = refused(tmp_path, {"a.yaml": cluster_yaml(account=written)})
    assert f"spec.accountID: Input should be a valid string: {hint}" in err


def test_an_unquoted_account_id_in_the_hubs_role_map_gets_the_hint_too(tmp_path):
    hub = yaml.safe_load(open("examples/hub.yaml"))
    text = yaml.safe_dump(hub).replace("roleAccountMap:", "roleAccountMap:\n    012345670123: arn:aws:iam::012345670123:role/x", 1)
    (tmp_path / "hub.yaml").write_text(text)
    done = run("plan", "--hub", str(tmp_path / "hub.yaml"), "--clusters", "examples/clusters")
    assert done.returncode == 2, done.stderr
    assert 'spec.roleAccountMap[1402433619]: not a valid key: Input should be a valid string: YAML read ' \
           '012345670123 as the octal number 1402433619; quote it: "012345670123"' in done.stderr


@pytest.mark.parametrize("precedence", ["Explicit", "Legacy"])
def test_the_plan_builds_in_the_explicit_spec_region_and_under_legacy_lists_each_override(tmp_path, precedence):
    """The trial's reproduction: a namespace defaulting to us-east-1, a PrivateLink cluster with spec.region
    eu-west-1. Its endpoint service was planned in us-east-1 without a word; now it is in eu-west-1, and under
    regionPrecedence Legacy (the upgrade's setting) it stays in us-east-1 and the plan says so on stderr."""
    hub_doc = yaml.safe_load(open("examples/hub.yaml"))
    if precedence == "Legacy":
        hub_doc["spec"]["regionPrecedence"] = "Legacy"
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc))
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    ns = namespace_doc("acme")
    ns["metadata"]["annotations"]["hubwright.io/default-region"] = "us-east-1"
    (clusters / "acme.yaml").write_text(yaml.safe_dump_all([ns, cluster_doc("prod-1", "acme", region="eu-west-1")]))
    done = run("plan", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(clusters), "--format", "json",
               "--no-cache")
    assert done.returncode == 0, done.stderr
    [stack] = json.loads(done.stdout)["stacks"]
    [service] = [r for r in stack["resources"] if r["type"] == "aws:ec2/vpcEndpointService:VpcEndpointService"]
    warned = [line for line in done.stderr.splitlines() if "RegionOverridden" in line]
    if precedence == "Explicit":
        assert service["region"] == "eu-west-1" and warned == [], done.stderr
    else:
        assert service["region"] == "us-east-1"
        assert len(warned) == 1 and warned[0].startswith("plan: warning: HubCluster acme/prod-1: RegionOverridden: "
                                                         "spec.region is eu-west-1 but the cluster is in us-east-1")


def test_a_misspelled_hubwright_key_is_named_with_the_key_it_was_meant_to_be(tmp_path):
    """The trial: `hubwright.io/mesh-enable: "true"` dropped a cluster out of its mesh with exit 0 and no word."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    ns = namespace_doc("acme")
    ns["metadata"]["annotations"]["hubwright.io/default-regoin"] = "eu-west-1"
    doc = cluster_doc("prod-1", "acme", labels={"hubwright.io/mesh": "core"},
                      annotations={"hubwright.io/mesh-enable": "true"})
    (clusters / "acme.yaml").write_text(yaml.safe_dump_all([ns, doc]))
    done = run("plan", "--hub", "examples/hub.yaml", "--clusters", str(clusters), "--format", "json", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert ("plan: warning: HubCluster acme/prod-1: metadata.annotations[hubwright.io/mesh-enable]: not a key "
            "hubwright reads, so it is ignored; did you mean hubwright.io/mesh-enabled?") in done.stderr, done.stderr
    assert ("plan: warning: Namespace acme: metadata.annotations[hubwright.io/default-regoin]: not a key hubwright "
            "reads, so it is ignored; did you mean hubwright.io/default-region?") in done.stderr, done.stderr
    assert "hubwright.io/mesh]" not in done.stderr  # a key it reads is not named
