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
    assert "Cluster strays/bad: spec.accountID: account 444444444444 has no role" in done.stderr
    assert "Cluster acme/worse" in done.stderr and "spec.apiURL" in done.stderr


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
