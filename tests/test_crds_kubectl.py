"""The CRDs as users see them: the real kubectl against the real kube-apiserver.

`kubectl explain` prints each field's description (from the models: stacks.crds), never `<no description>`;
`kubectl get hubclusters` prints the printer columns, and `-o wide` the priority ones too; the API server
itself refuses a mistyped region (a CEL rule on stacks.model.fields.REGION_PATTERN, in the model's words) and takes one AWS opened
after the code was written.
"""
from __future__ import annotations

import json
import time
import uuid

import pytest

from stacks.model.fields import NOT_A_REGION
from stacks.names import CLUSTER, GROUP, HUBCONFIG, TENANT
from tests.envtest import kube_apiserver  # noqa: F401
from doubles.kubectl import Kubectl
from doubles.factories import cluster_doc


@pytest.fixture(scope="module")
def kubectl(kube_apiserver, tmp_path_factory):  # noqa: F811
    run = Kubectl(kube_apiserver.kubeconfig(), tmp_path_factory.mktemp("kubectl-cache"))

    # The API server publishes a new CRD's OpenAPI schema (what explain reads) a moment after installing it.
    deadline = time.monotonic() + 90
    for plural in (CLUSTER.plural, HUBCONFIG.plural, TENANT.plural):
        while run("explain", plural, check=False).returncode != 0:
            assert time.monotonic() < deadline, f"the API server never published the schema of {plural}"
            time.sleep(0.5)
    return run


@pytest.mark.parametrize("field", [f"{CLUSTER.plural}", f"{CLUSTER.plural}.spec", f"{CLUSTER.plural}.spec.network",
                                   f"{CLUSTER.plural}.status", f"{CLUSTER.plural}.status.lastUpdate",
                                   f"{HUBCONFIG.plural}.spec", f"{HUBCONFIG.plural}.spec.mesh.groups",
                                   f"{HUBCONFIG.plural}.status.mesh", f"{TENANT.plural}.spec", f"{TENANT.plural}.status"])
def test_kubectl_explain_prints_a_description_for_every_field(kubectl, field):
    out = kubectl("explain", field).stdout
    assert "<no description>" not in out, out
    assert "FIELDS:" in out or "FIELD:" in out


def test_kubectl_explain_shows_the_models_words(kubectl):
    network = kubectl("explain", f"{CLUSTER.plural}.spec.network").stdout
    assert "routeTableIDs" in network and "route tables that get routes to the hub" in network
    region = kubectl("explain", f"{CLUSTER.plural}.spec.region").stdout
    assert "AWS region" in region and "<no description>" not in region


def test_kubectl_get_prints_the_printer_columns_and_wide_the_priority_ones(kubectl, kube_apiserver):  # noqa: F811
    ns = f"cols-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    kubectl("apply", "-f", "-", stdin=json.dumps(cluster_doc("prod-1", ns)))
    status = {"status": {"account": "222222222222", "region": "us-east-1",
                         "conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec",
                                         "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                         "outputs": {"endpoint": "vpce-1.example"},
                         "lastUpdate": {"operation": "up", "result": "Failed"}}}
    kubectl("patch", CLUSTER.plural, "prod-1", "-n", ns, "--subresource=status", "--type=merge",
            "-p", json.dumps(status))

    plain = kubectl("get", CLUSTER.plural, "-n", ns).stdout.splitlines()
    assert plain[0].split() == ["NAME", "ACCOUNT", "REGION", "READY", "REASON", "AGE"]
    assert plain[1].split()[:5] == ["prod-1", "222222222222", "us-east-1", "False", "InvalidSpec"]

    wide = kubectl("get", CLUSTER.plural, "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "ACCOUNT", "REGION", "READY", "REASON", "ENDPOINT", "LAST-UPDATE", "AGE"]
    assert wide[1].split()[5:7] == ["vpce-1.example", "Failed"]
    assert kubectl("get", CLUSTER.short[0], "-n", ns, "-o", "name").stdout.split() == \
        [f"{CLUSTER.singular}.{GROUP}/prod-1"]


@pytest.mark.parametrize("region, accepted", [("ap-southeast-7", True), ("mx-central-1", True),
                                              ("us-gov-west-1", True), ("us-east1", False), ("useast-1", False)])
def test_the_api_server_checks_regions_by_the_models_pattern(kubectl, region, accepted):
    ns = f"region-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    done = kubectl("apply", "-f", "-", stdin=json.dumps(cluster_doc("r", ns, region=region)), check=False)
    assert (done.returncode == 0) == accepted, done.stderr
    if not accepted:
        # The model's words and the value, not the raw regex (the issue: kubectl printed the pattern).
        assert f"spec.region: Invalid value: \"{region}\": {NOT_A_REGION}" in done.stderr, done.stderr
        assert "should match" not in done.stderr and "[a-z]" not in done.stderr


def code_region_order() -> list[str]:
    """The order stacks.accounts.cluster_region applies (Explicit, the default), found by asking it: with every
    source set to a different region, the winner; then without the winner, the next; and so on."""
    from doubles.factories import cluster, hub
    from stacks.accounts import cluster_region
    from stacks.names import DEFAULT_REGION_ANNOTATION, REGION_ANNOTATION
    sources = {"HubCluster annotation `hubwright.io/region`": "eu-west-1", "HubCluster `spec.region`": "eu-west-2",
               "Namespace annotation `hubwright.io/default-region`": "eu-west-3",
               "HubConfig `spec.region`": "us-east-1"}  # doubles.factories.hub's region
    left, order = dict(sources), []
    while left:
        key = "HubCluster annotation `hubwright.io/region`"
        c = cluster(region=left.get("HubCluster `spec.region`"),
                    annotations={REGION_ANNOTATION: left[key]} if key in left else {})
        ns = {DEFAULT_REGION_ANNOTATION: left[k] for k in left if k.startswith("Namespace")}
        region, _ = cluster_region(c, hub(), ns)
        [won] = [k for k, v in left.items() if v == region]
        order.append(won)
        if won.startswith("HubConfig"):
            break
        del left[won]
    return order


def test_kubectl_explain_the_docs_and_the_code_give_one_region_order(kubectl):
    """The trial found docs/accounts.md and `kubectl explain hubcluster.spec.region` saying opposite orders, and the
    code following the docs: an explicit spec.region lost to a namespace default. All three now say one thing."""
    import re
    from pathlib import Path
    docs = (Path(__file__).resolve().parent.parent / "docs" / "accounts.md").read_text()
    section = docs[docs.index("## Which region"):]
    listed = re.findall(r"^\d\. (.+)$", section[:section.index("\n## ", 3)], re.M)
    assert listed == code_region_order(), (listed, code_region_order())
    explain = " ".join(kubectl("explain", f"{CLUSTER.plural}.spec.region").stdout.split())
    assert "beats the namespace's default region (hubwright.io/default-region) and the hub's" in explain, explain
    assert "the cluster's hubwright.io/region annotation beats it" in explain, explain
    assert "hubwright.io/pinned-region refuses any other" in explain, explain
