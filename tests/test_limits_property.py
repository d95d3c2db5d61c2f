"""Property: for any fleet a tenant can write, the plan either refuses a cluster (InvalidSpec, naming it) or every
resource it produces fits AWS's and Pulumi's limits and stays inside the cluster's own account and CIDRs.

Hypothesis generates Clusters with hostile values (long and odd names and hosts, wide CIDRs, other tenants'
accounts, mesh labels); examples are bounded so the test takes seconds.
"""
from __future__ import annotations

import ipaddress
import json
import re

from hypothesis import HealthCheck, event, given, settings, strategies as st

from automation.adapters.engine.plan import plan_stack
from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.model.loading import parse
from stacks.resolve import resolve_fleet
from doubles.factories import OWNERS, cluster_doc, fleet, hub
from tests.tiers import examples
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL

STACK = re.compile(r"[A-Za-z0-9_.-]{1,100}")
HUB = hub()
ACCOUNT_OF = {**OWNERS, "evil": "444444444444"}  # evil owns an account the role map lacks

label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,70}[a-z0-9])?", fullmatch=True)
hosts = st.one_of(
    label.map(lambda name: f"api.{name}.example.com"),
    label.map(lambda name: f"api.{name}.example.com"),
    st.lists(label, min_size=1, max_size=6).map(".".join),
    st.sampled_from(["amazonaws.com", "s3.amazonaws.com", "ec2.internal", "10.0.0.1", "api.prod-1.example.com"]),
    st.text(min_size=1, max_size=40),
)
cidrs = st.tuples(st.integers(0, 255), st.one_of(st.integers(16, 28), st.integers(0, 32))).map(
    lambda t: str(ipaddress.ip_network(f"10.{t[0]}.0.0/{t[1]}", strict=False)))


@st.composite
def cluster_docs(draw, index: int) -> dict:
    namespace = draw(st.sampled_from(sorted(ACCOUNT_OF)))
    name = draw(st.one_of(st.from_regex(r"[a-z0-9]{1,20}", fullmatch=True),
                          st.from_regex(r"[a-z0-9]([-a-z0-9]{0,110}[a-z0-9])?", fullmatch=True)))
    account = draw(st.one_of(st.just(ACCOUNT_OF[namespace]),
                             st.sampled_from([*ACCOUNT_OF.values(), "111111111111"])))
    meshed = draw(st.booleans())
    doc = cluster_doc(
        name, namespace, accountID=account,
        labels={MESH_LABEL: "core"} if meshed else {},
        annotations={MESH_ENABLED_ANNOTATION: "true"} if meshed else {},
        apiURL=f"https://{draw(hosts)}:6443",
        network={"vpcID": f"vpc-0c{index}", "cidr": draw(cidrs), "routeTableIDs": [f"rtb-0{index}"],
                 "nodeSecurityGroupIDs": [f"sg-0{index}"]},
        privateLink={"enabled": draw(st.booleans())},
    )
    doc["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{index:02d}Z"
    return doc


fleets = st.integers(1, 3).flatmap(lambda n: st.tuples(*(cluster_docs(i) for i in range(n))))


def _tags(resource) -> dict[str, str]:
    tags = dict(resource.inputs.get("tags") or {})
    default = resource.inputs.get("defaultTags")
    if default:
        tags.update(json.loads(default)["tags"])
    return tags


def within_limits(inputs: StackInputs) -> None:
    assert STACK.fullmatch(inputs.stack), inputs.stack
    plan = plan_stack(inputs)
    for resource in plan.resources:
        for key, value in _tags(resource).items():
            assert len(key) <= 128 and len(value) <= 256, (resource.urn, key, value)
        for field, limit in (("name", 255), ("description", 255)):
            value = resource.inputs.get(field)
            assert value is None or len(str(value)) <= limit, (resource.urn, field, value)
        if resource.account is not None:  # a cloud resource lives in the cluster's account or the hub's
            assert resource.account in {inputs.cluster.account_id, inputs.hub.account_id,
                                        *(p.peer.target.account_id for p in (inputs.mesh.pairs if inputs.mesh else ()))}
        for field in ("destinationCidrBlock", "cidrIpv4"):
            if field in resource.inputs:
                net = ipaddress.ip_network(resource.inputs[field])
                assert 16 <= net.prefixlen <= 28, (resource.urn, field, net)
        if resource.type == "aws:route53/zone:Zone":
            assert len(resource.inputs["name"]) <= 255


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets)
def test_every_plan_refuses_or_fits_the_limits(docs):
    clusters, refused = [], []
    for doc in docs:
        try:
            clusters.append(parse(doc))
        except InvalidSpec as exc:
            refused.append(exc)
    keys = [c.key for c in clusters]
    clusters = [c for c in clusters if keys.count(c.key) == 1]  # the same name twice is a file error
    for exc in refused:
        assert exc.errors and all(e.obj.startswith("HubCluster ") and e.field and e.reason for e in exc.errors)
    resolved = resolve_fleet(fleet(HUB, clusters))
    for key, value in resolved.items():
        if isinstance(value, InvalidSpec):
            assert value.errors and all(e.obj.startswith(("HubCluster ", "Namespace ")) for e in value.errors), value
            continue
        namespace = key.split("/")[0]
        assert value.cluster.account_id == ACCOUNT_OF[namespace]  # never another tenant's account or the hub's
        within_limits(value)
        event("planned")  # hypothesis's statistics show how many examples got this far
