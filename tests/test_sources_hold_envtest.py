"""The hold on a deleted source, on the real service and a real kube-apiserver with Cluster API's and CAPA's real
CRDs (issue #45, finding 3): our finalizer waits only for the admitted members of the source's own mesh group as
the mesh plan keys it, so another tenant's never-converging cluster wearing the same label cannot keep it (and its
namespace) Terminating; and it waits at most HubConfig spec.sources.releaseAfter, then leaves with a Warning Event
naming what had not converged (stacks.sources.hold; the pure rule: tests/test_sources_hold.py)."""
from __future__ import annotations

import time
import uuid

from doubles.engine import RecordingEngine
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL, SOURCE_FINALIZER
from stacks.network.found import FoundNetwork
from stacks.network.query import NetworkQuery
from tests.envtest import kube_apiserver_alone  # noqa: F401 - the fixture
from tests.test_sources_envtest import GROUP_MESH, Cloud, api, capi, delete, get  # noqa: F401 - api: the fixture

GLOBEX_ACCOUNT = "333333333333"  # the tests' second tenant's account (doubles.factories.OWNERS)
FOREVER = 10 ** 6


class Accounts(Cloud):
    """Cloud's VPCs, each in the account it is added to (two tenants: two accounts)."""

    def add_in(self, account: str, vpc: str, cidr: str, tag: str) -> None:
        self.add(vpc, cidr, tag)
        self.vpcs[vpc] = self.vpcs[vpc].model_copy(update={"account_id": account})

    def discover(self, query: NetworkQuery, *, now: str) -> FoundNetwork:
        from automation.adapters.aws.lookups import LookupFailed
        self.reads.append(query.key)
        found = self.vpcs.get(query.vpc_id or "")
        if found is None or found.account_id != query.target.account_id:
            raise LookupFailed(f"no VPC for {query.key}", reason="VpcNotFound")
        return found.model_copy(update={"observed_at": now})


def never_converging(env: ServiceEnv, engine: RecordingEngine, cloud: Accounts, namespace: str, account: str) -> str:
    """A hand-written member of mesh group payments in `namespace` whose every up fails: it never converges."""
    cloud.add_in(account, "vpc-0nd", "10.30.0.0/16", "nd")
    engine.fail("up", f"{namespace}.never-done", times=FOREVER)
    env.create("never-done", namespace, accountID=account, labels={MESH_LABEL: "payments"},
               annotations={MESH_ENABLED_ANNOTATION: "true"}, privateLink={"enabled": False},
               network={"vpcID": "vpc-0nd", "cidr": "10.30.0.0/16", "routeTableIDs": ["rtb-0nd0"],
                        "nodeSecurityGroupIDs": ["sg-0ndnode"]})
    wait_until(lambda: engine.count("up", f"{namespace}.never-done") >= 2, 30, what="never-done failing its ups")
    return f"{namespace}/never-done"


def finalizers(api, ns: str, name: str) -> list[str]:
    return ((get(api, "Cluster", ns, name) or {}).get("metadata") or {}).get("finalizers") or []


def released_unconverged(env: ServiceEnv, ns: str, name: str) -> list[tuple[str, str, str]]:
    return [e for e in env.events(ns, name) if e[1] == "ReleasedUnconverged"]


def test_another_tenants_never_converging_cluster_with_the_same_mesh_label_does_not_hold_a_deleted_source(api):
    """globex's `never-done` (group globex/payments) fails forever; acme deletes its Cluster API `Cluster` web-1
    (group acme/payments): the source goes as soon as acme's own group has converged, with no Warning."""
    env = ServiceEnv.isolated(api)  # a service that watches every namespace: the two tenants'
    acme, globex = env.ns, f"globex-{uuid.uuid4().hex[:6]}"
    env.namespace(globex, owner=GLOBEX_ACCOUNT)
    env.patch_hub({"spec": GROUP_MESH})  # payments: namespace-local (acme/payments and globex/payments)
    cloud, engine = Accounts(), RecordingEngine()
    with env.running(engine, discovery=cloud, sources="capi"):
        held = never_converging(env, engine, cloud, globex, GLOBEX_ACCOUNT)
        capi(api, acme, "web-1", "vpc-0web1", "10.20.0.0/16", "w1", cloud)
        capi(api, acme, "web-2", "vpc-0web2", "10.21.0.0/16", "w2", cloud)
        for name in ("web-1", "web-2"):
            wait_until(lambda n=name: env.ready(n), 30, what=f"HubCluster {name} Ready")
            assert SOURCE_FINALIZER in finalizers(api, acme, name)
        assert not env.ready("never-done", globex)  # globex's stays unconverged throughout

        delete(api, "Cluster", acme, "web-1")
        wait_until(lambda: get(api, "Cluster", acme, "web-1") is None, 30,
                   what=f"acme's Cluster web-1 gone although {held} never converges")
        assert engine.count("destroy", f"{acme}.web-1") == 1 and env.get("web-1") is None
        assert released_unconverged(env, acme, "web-1") == []  # released by the rule, not by the bound
        assert not env.ready("never-done", globex)

        # Clean up for the module's next test (this service watches every namespace).
        delete(api, "Cluster", acme, "web-2")
        env.delete("never-done", globex)
        wait_until(lambda: get(api, "Cluster", acme, "web-2") is None and env.get("never-done", globex) is None,
                   30, what="the rest gone")


def test_a_member_of_the_sources_own_group_that_never_converges_holds_it_only_until_the_bound(api):
    """acme's own `never-done` fails forever: the deleted web-1 is held for it (it may still route to web-1's VPC),
    until HubConfig spec.sources.releaseAfter (3s here), then released with a Warning Event naming never-done."""
    env = ServiceEnv.isolated(api)
    ns = env.ns
    env.patch_hub({"spec": {**GROUP_MESH, "sources": {"releaseAfter": "3s"}}})
    cloud, engine = Accounts(), RecordingEngine()
    with env.running(engine, discovery=cloud, sources="capi", watch_namespace=ns):
        capi(api, ns, "web-1", "vpc-0web1", "10.20.0.0/16", "w1", cloud)
        wait_until(lambda: env.ready("web-1"), 30, what="HubCluster web-1 Ready")
        held = never_converging(env, engine, cloud, ns, "222222222222")

        deleted = time.monotonic()
        delete(api, "Cluster", ns, "web-1")
        (event,) = wait_until(lambda: released_unconverged(env, ns, "web-1"), 30,
                              what="the Warning Event of a release at the bound")
        assert event[0] == "Warning" and held in event[2] and "HubConfig spec.sources.releaseAfter" in event[2]
        # While it was held, the source itself said what it waited for: once, not at every look (issue 47).
        waits = [e for e in env.events(ns, "web-1") if e[1] == "WaitingForPeers"]
        assert waits and all(held in e[2] and "hubwright.io/source" in e[2] for e in waits), waits
        assert len(waits) == len({e[2] for e in waits}), waits
        wait_until(lambda: get(api, "Cluster", ns, "web-1") is None, 30, what="Cluster web-1 gone")
        # Held, not let go at once: the bound counts from the deletionTimestamp (whole seconds), so at least 2s.
        assert time.monotonic() - deleted >= 2
        assert engine.count("destroy", f"{ns}.web-1") == 1 and env.get("web-1") is None
