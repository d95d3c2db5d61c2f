"""Incremental resolution (stacks.incremental) equals a full resolve_all after any sequence of changes.

A small universe where every coupling bites: clusters sharing accounts (FirstClaim), regions (a VPC inventory
one endpoint short), API hosts, shared-ingress IDs (explicit, recorded when routed, prefixes granted or not),
mesh groups (peering, a Transit Gateway with its recorded
state and gateways, auto with a threshold of 2), overlapping CIDRs and one VPC twice; namespaces that own,
conflict, own nothing or cap their clusters and endpoints; stacks that exist; role maps, endpoint census counts
and HubConfig statuses that come and go.
"""
from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stacks.incremental import FleetResolver
from stacks.model.cluster import Cluster
from stacks.model.loading import parse
from stacks.names import (CLUSTER_ID_PREFIXES_ANNOTATION, INGRESS_STATUS_KEY, JOIN_STATUS_KEY, MESH_ENABLED_ANNOTATION,
                          MESH_LABEL)
from stacks.resolve import Fleet, Resolved, resolve_all
from stacks.transit import GroupState, MeshStatus, TransitOutputs, TransitRegionOutputs, transit_stack
from doubles.factories import HUB_ACCOUNT, INGRESS, OWNER_ANNOTATION, cluster_doc, hub
from tests.tiers import examples

KEYS = [("acme", "c0"), ("acme", "c1"), ("globex", "c2"), ("free", "c3"), ("free", "c4"), ("open", "c5"),
        ("open", "c6")]
ACCOUNTS = ["222222222222", "333333333333", "444444444444", "444444444444", HUB_ACCOUNT]

HUBS = [
    hub(sharedIngress=INGRESS, tenancy={"unownedNamespaces": "FirstClaim"}, privateLink={"endpointsPerVPC": 2},
        mesh={"groups": {"core": {"namespaces": ["acme", "globex", "free"]}}}),
    hub(sharedIngress=INGRESS, tenancy={"unownedNamespaces": "FirstClaim", "reservedDomains": ["c.example.com"]},
        privateLink={"endpointsPerVPC": 2},
        mesh={"groups": {"core": {"topology": "transitGateway", "summaryCIDRs": ["10.0.0.0/8"]},
                         "edge": {"topology": "auto", "autoThreshold": 2}}}),
    hub(privateLink={"endpointsPerVPC": 1}, tenancy={"unownedNamespaces": "FirstClaim"},
        mesh={"peeringsPerVPC": 1, "groups": {"core": {"namespaces": ["acme", "free"], "topology": "auto",
                                                       "autoThreshold": 3}}}),
    hub(sharedIngress=INGRESS, privateLink={"endpointsPerVPC": 2}, mesh={"groups": {"core": {}}},
        tenancy={"unownedNamespaces": "FirstClaim", "maxClustersPerNamespace": 1, "maxEndpointsPerNamespace": 1}),
]
NAMESPACES = {
    "acme": [{OWNER_ANNOTATION: "222222222222", CLUSTER_ID_PREFIXES_ANNOTATION: "x"},
             {OWNER_ANNOTATION: "222222222222", "hubwright.io/allowed-domains": "a.example.com"}, None,
             {OWNER_ANNOTATION: "222222222222", "hubwright.io/max-endpoints": "1"}],
    "globex": [{OWNER_ANNOTATION: "333333333333", CLUSTER_ID_PREFIXES_ANNOTATION: "x,y"},
               {OWNER_ANNOTATION: "222222222222"}, {"hubwright.io/tenant": "g"},
               {OWNER_ANNOTATION: "333333333333", "hubwright.io/max-clusters": "0"}],
    "free": [None, {"hubwright.io/tenant": "free-tenant"}, {OWNER_ANNOTATION: "444444444444"},
             {"hubwright.io/max-endpoints": "many"}],
    "open": [None, {"hubwright.io/allowed-domains": "b.example.com"}, {"hubwright.io/tenant": "o"},
             {"hubwright.io/max-clusters": "1", "hubwright.io/max-endpoints": "2"}],
}
ROLE_MAPS = [{"444444444444": "arn:aws:iam::444444444444:role/hubwright"}, None]
FOREIGN = [{}, {"vpc-0hub1": 1}]
GATEWAYS = TransitOutputs(regions={r: TransitRegionOutputs(transit_gateway_id=f"tgw-{r}")
                                   for r in ("us-east-1", "eu-west-1")})
STATUSES = [({}, {}),
            ({"core": GroupState(topology="transitGateway")}, {transit_stack(HUB_ACCOUNT): GATEWAYS}),
            ({"acme/edge": GroupState(topology="peering", migrating_to="transitGateway", step="routes")},
             {transit_stack(HUB_ACCOUNT): GATEWAYS})]


@st.composite
def clusters(draw, key: tuple[str, str] | None = None) -> tuple[Cluster, str | None, str | None, bool]:
    namespace, name = key or draw(st.sampled_from(KEYS))
    group = draw(st.sampled_from([None, "core", "edge"]))
    labels = {MESH_LABEL: group} if group else {}
    annotations = {MESH_ENABLED_ANNOTATION: "true"} if group and draw(st.booleans()) or draw(st.booleans()) else {}
    spec: dict[str, Any] = {
        "accountID": draw(st.sampled_from(ACCOUNTS)),
        "region": draw(st.sampled_from(["us-east-1", "eu-west-1"])),
        "apiURL": f"https://api.{draw(st.sampled_from(['a', 'b', 'c']))}.example.com:6443",
        "privateLink": {"enabled": draw(st.booleans())},
        "network": {"vpcID": draw(st.sampled_from(["vpc-0a", "vpc-0b", f"vpc-0{name}"])),
                    "cidr": draw(st.sampled_from(["10.1.0.0/16", "10.2.0.0/16", "10.1.4.0/24", f"10.5{name[1]}.0.0/16",
                                                  "192.168.0.0/24"])),
                    "routeTableIDs": draw(st.sampled_from([[], [f"rtb-{name}"]])),
                    "nodeSecurityGroupIDs": draw(st.sampled_from([[], [f"sg-{name}"]])),
                    "transitSubnets": draw(st.sampled_from(
                        [[], [{"subnetID": f"subnet-{name}", "availabilityZone": "us-east-1a"}]]))},
    }
    if draw(st.booleans()):
        spec["sharedIngress"] = {"enabled": True, "clusterID": draw(st.sampled_from([None, "x", "y", f"{namespace}.c0"])),
                                 "backend": draw(st.sampled_from(["10.1.2.3:6443", "169.254.169.254:80"]))}
    doc = cluster_doc(name, namespace, labels=labels, annotations=annotations, **spec)
    if draw(st.integers(0, 9)) == 0:
        doc["spec"] = {"facts": {"team": "x"}}  # registered only: no stack
    meta = doc["metadata"]
    meta["creationTimestamp"] = draw(st.sampled_from(["2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z", None]))
    if draw(st.integers(0, 5)) == 0:
        meta["deletionTimestamp"] = "2025-02-01T00:00:00Z"
    stamp = draw(st.sampled_from([None, {"group": "core", "order": 1}, {"group": "core", "order": 2},
                                  {"group": "edge", "order": 1}]))
    routed = draw(st.sampled_from([None, "x", "acme.c0", f"{namespace}.{name}"]))  # status.sharedIngress: recorded
    doc["status"] = {**({JOIN_STATUS_KEY: stamp} if stamp else {}),
                     **({INGRESS_STATUS_KEY: {"clusterID": routed}} if routed else {})} or None
    placement = draw(st.sampled_from([None, "vpc-0hub1", "vpc-0hubeu", "vpc-0gone"]))
    attachment = draw(st.sampled_from([None, f"tgw-attach-{name}"]))
    return parse(doc), placement, attachment, draw(st.booleans())  # the last: its stack exists


CHANGES = st.one_of(
    st.tuples(st.just("put"), clusters()),
    st.tuples(st.just("remove"), st.sampled_from(KEYS)),
    st.tuples(st.just("namespace"), st.sampled_from(sorted(NAMESPACES)), st.integers(0, 3)),
    st.tuples(st.just("hub"), st.integers(0, len(HUBS) - 1)),
    st.tuples(st.just("roles"), st.integers(0, len(ROLE_MAPS) - 1)),
    st.tuples(st.just("foreign"), st.integers(0, len(FOREIGN) - 1)),
    st.tuples(st.just("status"), st.integers(0, len(STATUSES) - 1)),
)


class World:
    """The same fleet kept two ways: the resolver's changes, and the Fleet a full resolve_all reads."""

    def __init__(self) -> None:
        self.hub = HUBS[0]
        self.namespaces = {ns: variants[0] for ns, variants in NAMESPACES.items() if variants[0] is not None}
        self.roles: dict | None = ROLE_MAPS[0]
        self.foreign: dict = {}
        self.status = STATUSES[0]
        self.clusters: dict[str, tuple[Cluster, str | None, str | None, bool]] = {}
        self.resolver = FleetResolver(self.hub, namespaces=self.namespaces, role_map=self.roles)

    def apply(self, change: tuple) -> None:
        kind, *args = change
        if kind == "put":
            cluster, placement, attachment, stack = args[0]
            self.clusters[cluster.key] = args[0]
            self.resolver.put(cluster, placement, attachment, stack)
        elif kind == "remove":
            key = "/".join(args[0])
            self.clusters.pop(key, None)
            self.resolver.remove(key)
        elif kind == "namespace":
            name, variant = args
            annotations = NAMESPACES[name][variant]
            if annotations is None:
                self.namespaces.pop(name, None)
            else:
                self.namespaces[name] = annotations
            self.resolver.set_namespace(name, annotations)
        elif kind == "hub":
            self.hub = HUBS[args[0]]
            self.resolver.set_hub(self.hub)
        elif kind == "roles":
            self.roles = ROLE_MAPS[args[0]]
            self.resolver.set_role_map(self.roles)
        elif kind == "foreign":
            self.foreign = FOREIGN[args[0]]
            self.resolver.set_foreign_endpoints(self.foreign)
        else:
            self.status = STATUSES[args[0]]
            self.resolver.set_mesh_status(*self.status)

    def fleet(self) -> Fleet:
        entries = list(self.clusters.values())
        return Fleet(hub=self.hub, clusters=tuple(c for c, *_ in entries), namespaces=dict(self.namespaces),
                     role_map=self.roles, foreign_endpoints=self.foreign,
                     placements={c.key: p for c, p, *_ in entries if p},
                     stacks=frozenset(c.key for c, *_, stack in entries if stack),
                     mesh_status=MeshStatus(self.status[0], self.status[1], {c.key: a for c, _, a, _ in entries if a}))


def assert_same(got: Resolved, want: Resolved) -> None:
    assert got.inputs == want.inputs
    assert got.routes == want.routes
    assert got.guests == want.guests
    assert got.unrouted == want.unrouted
    assert dict(got.mesh.shares) == dict(want.mesh.shares)
    assert dict(got.mesh.errors) == dict(want.mesh.errors)
    assert dict(got.mesh.groups) == dict(want.mesh.groups)
    assert dict(got.mesh.stamps) == dict(want.mesh.stamps)
    assert set(got.mesh.unstamp) == set(want.mesh.unstamp)
    assert dict(got.mesh.transit) == dict(want.mesh.transit)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.tuples(*(clusters(key) for key in KEYS)),
       st.lists(st.lists(CHANGES, min_size=1, max_size=3), min_size=1, max_size=15))
def test_incremental_resolution_equals_a_full_resolve_after_any_changes(fleet, batches):
    world = World()
    before: dict = {}
    for batch in [[("put", c) for c in fleet], *batches]:
        for change in batch:
            world.apply(change)
        got, changed = world.resolver.resolve()
        assert_same(got, resolve_all(world.fleet()))
        # It names exactly the clusters whose answer moved (appeared, went or differs).
        moved = {k for k in set(before) | set(got.inputs) if before.get(k) != got.inputs.get(k)}
        assert changed == moved
        before = got.inputs


def test_a_resolver_made_of_a_fleet_answers_as_resolve_all():
    world = World()
    for n, (namespace, name) in enumerate(KEYS):
        doc = cluster_doc(name, namespace, labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"},
                          accountID=ACCOUNTS[namespace == "globex"],
                          network={"vpcID": f"vpc-0{name}", "cidr": f"10.{n + 1}.0.0/16", "routeTableIDs": [f"rtb-{n}"],
                                   "nodeSecurityGroupIDs": [f"sg-{n}"]})
        world.apply(("put", (parse(doc), None, None, False)))
    fleet = world.fleet()
    got, changed = FleetResolver.of(fleet).resolve()
    want = resolve_all(fleet)
    assert_same(got, want)
    assert changed == set(want.inputs)
    assert len(want.mesh.groups["core"].members) == 3  # acme's two and globex's one; free's use acme's account
