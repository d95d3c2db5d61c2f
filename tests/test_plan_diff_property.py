"""The fleet diff is exact: for random fleets and random changes, a stack the diff (warm: cache and baseline reused)
marks unchanged is byte for byte the same in a full cold plan of the change (its plan key aside), and one it marks
changed differs; and the whole diff is what comparing the two full plans gives (stacks.plandiff.compare_plans)."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from automation.adapters.engine.baseline import Baseline
from automation.cli import main
from doubles.factories import cluster_doc, hub_doc, namespace_doc
from tests.tiers import examples
from stacks.plandiff.compare import compare_plans

PLAN_KEY = re.compile(r'\n      "planKey": "[0-9a-f]{64}",')

clusters_st = st.lists(st.tuples(st.sampled_from(["acme", "globex"]),  # namespace
                                 st.booleans(),  # in mesh group g1
                                 st.booleans()),  # PrivateLink
                       min_size=2, max_size=5)
change_st = st.sampled_from(["none", "api host", "mesh off", "mesh on", "remove", "add", "hub vpc", "privatelink"])


def cluster(i: int, namespace: str, mesh: bool, privatelink: bool, host: str = "api") -> dict:
    name = f"c{i}"
    doc = cluster_doc(name, namespace, labels={"hubwright.io/mesh": "g1"} if mesh else {},
                      annotations={"hubwright.io/mesh-enabled": "true"} if mesh else {},
                      accountID="222222222222" if namespace == "acme" else "333333333333",
                      apiURL=f"https://{host}.{name}.example.com:6443",
                      privateLink={"enabled": privatelink})
    doc["spec"]["network"].update(cidr=f"10.{20 + i}.0.0/16", routeTableIDs=[f"rtb-0{i}a", f"rtb-0{i}b"],
                                  nodeSecurityGroupIDs=[f"sg-0{i}"])  # a VPC's own
    return doc


def write(root: Path, hub: dict, clusters: dict[int, dict]) -> None:
    (root / "hub.yaml").write_text(yaml.safe_dump(hub))
    folder = root / "clusters"
    for old in folder.glob("c*.yaml"):
        old.unlink()
    (folder / "namespaces.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("globex")]))
    for i, doc in clusters.items():
        (folder / f"c{i}.yaml").write_text(yaml.safe_dump(doc))


def plan(capsys, root: Path, *args: str) -> str:
    code = main(["plan", "--hub", str(root / "hub.yaml"), "--clusters", str(root / "clusters"), "--jobs", "1",
                 "--policy", "off", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def changed(hub: dict, clusters: dict[int, dict], change: str, target: int) -> tuple[dict, dict[int, dict]]:
    clusters = {i: json.loads(json.dumps(doc)) for i, doc in clusters.items()}
    hub = json.loads(json.dumps(hub))
    i = sorted(clusters)[target % len(clusters)]
    doc = clusters[i]
    if change == "api host":
        doc["spec"]["apiURL"] = doc["spec"]["apiURL"].replace("https://api.", "https://api2.")
    elif change in ("mesh off", "mesh on"):
        on = change == "mesh on"
        doc["metadata"]["labels"] = {"hubwright.io/mesh": "g1"} if on else {}
        doc["metadata"]["annotations"] = {"hubwright.io/mesh-enabled": "true"} if on else {}
    elif change == "remove" and len(clusters) > 1:
        del clusters[i]
    elif change == "add":
        clusters[max(clusters) + 1] = cluster(max(clusters) + 1, doc["metadata"]["namespace"], True, True)
    elif change == "hub vpc":
        hub["spec"]["associatedVPCs"].append({"region": "us-east-1", "vpcID": "vpc-0new", "cidr": "10.9.0.0/16"})
    elif change == "privatelink":
        doc["spec"]["privateLink"] = {"enabled": not doc["spec"]["privateLink"]["enabled"]}
    return hub, clusters


def stack_texts(document: str) -> dict[str, str]:
    baseline = Baseline(document)
    return {name: PLAN_KEY.sub("", baseline.text(name)) for name in baseline.names}


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleet=clusters_st, change=change_st, target=st.integers(min_value=0, max_value=10))
def test_unchanged_means_byte_identical_and_changed_means_different(capsys, fleet, change, target):
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp), str(Path(tmp) / "cache")
        (root / "clusters").mkdir()
        hub = hub_doc()
        clusters = {i: cluster(i, *spec) for i, spec in enumerate(fleet)}
        write(root, hub, clusters)
        base = plan(capsys, root, "--format", "json", "--cache", cache)
        (root / "base.json").write_text(base)

        hub, clusters = changed(hub, clusters, change, target)
        write(root, hub, clusters)
        diff = json.loads(plan(capsys, root, "--baseline", str(root / "base.json"), "--format", "json",
                               "--cache", cache))
        full = plan(capsys, root, "--format", "json", "--no-cache")

        before, after = stack_texts(base), stack_texts(full)
        marks = {s["stack"]: s["change"] for s in diff["stacks"]}
        assert set(marks) == set(before) | set(after)
        for name, mark in marks.items():
            if mark == "unchanged":
                assert before[name] == after[name], name
            elif mark == "changed":
                assert before[name] != after[name], name
            elif mark == "new":
                assert name not in before and name in after
            else:
                assert name in before and name not in after
        assumed = diff.pop("joinOrder", None)  # what the diff assumed of the mesh's order, said when there is one
        assert (assumed is not None) == bool(json.loads(base)["mesh"] or json.loads(full)["mesh"])
        assert diff == compare_plans(json.loads(base), json.loads(full))
        if change == "none":
            assert set(marks.values()) == {"unchanged"}


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.integers(min_value=2, max_value=4), joiner=st.sampled_from(["a0", "c1x", "m5", "zz"]))
def test_in_a_git_repository_a_join_shows_the_joiners_stack_alone_wherever_its_name_sorts(capsys, members, joiner):
    """A GitOps repository's files carry no creationTimestamp and no status.meshJoin: the old order fell back to
    the alphabet, and a joiner named before the members took over their pairs (the trial: 4 changed stacks for
    1 join). The baseline's clusters now join first, as the hub's stamps would have them: the joiner's stack
    alone is new and every member's is unchanged, as the live service would run it."""
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp), str(Path(tmp) / "cache")
        (root / "clusters").mkdir()
        hub = hub_doc()
        clusters = {i: cluster(i, "acme", True, False) for i in range(1, members + 1)}
        assert not any("creationTimestamp" in doc["metadata"] or "status" in doc for doc in clusters.values())
        write(root, hub, clusters)
        base = plan(capsys, root, "--format", "json", "--cache", cache)
        (root / "base.json").write_text(base)

        doc = cluster(9, "acme", True, False)
        doc["metadata"]["name"] = joiner
        (root / "clusters" / "c-joiner.yaml").write_text(yaml.safe_dump(doc))
        diff = json.loads(plan(capsys, root, "--baseline", str(root / "base.json"), "--format", "json",
                               "--cache", cache))
        marks = {s["stack"]: s["change"] for s in diff["stacks"]}
        assert {name: mark for name, mark in marks.items() if mark != "unchanged"} == {f"acme.{joiner}": "new"}


def test_values_known_only_after_apply_are_shown_so_in_the_diff_and_the_markdown(capsys, tmp_path):
    """The trial: a join's diff showed made-up IDs (`pcx-55fd6525a85df26f5`) as if they were the hub's. The plan
    JSON keeps its stand-ins and lists them (`afterApply`); the diff and the Markdown say "(known after apply)"
    wherever one is, whole or inside an ARN or a name, and never print one."""
    (tmp_path / "clusters").mkdir()
    cache = str(tmp_path / "cache")
    clusters = {1: cluster(1, "acme", True, True), 2: cluster(2, "acme", True, False)}
    write(tmp_path, hub_doc(), clusters)
    (tmp_path / "base.json").write_text(plan(capsys, tmp_path, "--format", "json", "--cache", cache))
    clusters[3] = cluster(3, "acme", True, True)  # a join: a new stack
    clusters[2] = cluster(2, "acme", True, True)  # PrivateLink on: a changed stack, its new inputs shown
    write(tmp_path, hub_doc(), clusters)
    head = json.loads(plan(capsys, tmp_path, "--format", "json", "--cache", cache))
    [joiner] = [s for s in head["stacks"] if s["stack"] == "acme.c3"]
    made_up = [v for s in head["stacks"] for v in s.get("afterApply", ())]
    assert any(v.startswith("pcx-") for v in made_up) and any("vpce-svc-" in v for v in made_up), made_up
    accepter = next(r for r in joiner["resources"] if r["type"].endswith("VpcPeeringConnectionAccepter"))
    assert accepter["inputs"]["vpcPeeringConnectionId"] in made_up  # the plan JSON keeps it, marked
    for fmt in ("diff", "markdown"):
        shown = plan(capsys, tmp_path, "--baseline", str(tmp_path / "base.json"), "--format", fmt, "--cache", cache)
        if fmt == "diff":
            assert "vpcPeeringConnectionId: (known after apply)" in shown, shown[:3000]
        assert "serviceName |  | `(known after apply)`" in shown if fmt == "markdown" else \
            "serviceName: (known after apply)" in shown, shown[-3000:]
        leaked = [v for v in made_up if v in shown]
        assert not leaked, (fmt, leaked)
