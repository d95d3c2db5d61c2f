"""Tenant isolation as deployed: the real kube-apiserver with the project's CRDs and deploy/'s RBAC, the service
watching every namespace. A tenant may create Clusters; each attack leaves it Stalled with the reason, runs
nothing, and leaves the other tenant's stacks and status exactly as they were (docs/security.md).
"""
from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.haproxy import MAP_FILE
from components.controlplane import TENANT_RULES
from doubles.engine import RecordingEngine
from tests.envtest import TENANT_USER, kube_apiserver_alone  # noqa: F401 - fixture
from doubles.factories import OWNER_ANNOTATION, cluster_doc, hub_doc
from doubles.service_env import ServiceEnv, wait_until
from stacks.names import FINALIZER, GROUP, MESH_ENABLED_ANNOTATION, MESH_LABEL, VERSION

MESH = {"labels": {MESH_LABEL: "payments"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}}


@pytest.fixture
def env(kube_apiserver_alone):  # noqa: F811 - the fixture
    suffix = uuid.uuid4().hex[:6]
    env = ServiceEnv(kube_apiserver_alone.api_client(), namespace=f"acme-{suffix}", system_namespace=f"sys-{suffix}",
                     hub_name=f"hub-{suffix}")
    env.suffix = suffix
    env.namespace(env.ns)  # owns 222222222222
    env.namespace(env.system_namespace, owner=None)
    env.hub()
    yield env
    # Leave nothing behind for the next test's all-namespace service: remove every Cluster (finalizers too).
    for item in env.custom.list_cluster_custom_object(GROUP, VERSION, "hubclusters")["items"]:
        meta = item["metadata"]
        env.patch(meta["name"], {"metadata": {"finalizers": []}}, meta["namespace"])
        env.delete(meta["name"], meta["namespace"])
    env.api_client.close()


def settle(env, service) -> None:
    """Let the service catch up and prove it then stays idle."""
    wait_until(lambda: service.pipeline is not None and service.pipeline.queue.idle(), 20, what="an idle queue")


def mesh_cluster(env, name: str, namespace: str, cidr: str, **spec):
    return env.create(name, namespace, **MESH, privateLink={"enabled": False},
                      network={"vpcID": f"vpc-0{name.replace('-', '')}", "cidr": cidr, "routeTableIDs": ["rtb-01"],
                               "nodeSecurityGroupIDs": ["sg-01"]}, **spec)


# --------------------------------------------------------------------------- the API server and RBAC

def test_a_tenant_creates_clusters_but_cannot_write_their_status_its_namespace_or_the_hub(kube_apiserver_alone, env):  # noqa: F811
    rbac = client.RbacAuthorizationV1Api(env.api_client)
    role = f"hubwright-tenant-{env.suffix}"
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": TENANT_RULES})
    rbac.create_namespaced_role_binding(env.ns, {
        "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": role},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": "rbac.authorization.k8s.io"}]})
    tenant = client.ApiClient(kube_apiserver_alone.configuration(kube_apiserver_alone.tenant_token))
    custom, core = client.CustomObjectsApi(tenant), client.CoreV1Api(tenant)

    created = wait_until(lambda: _try(lambda: custom.create_namespaced_custom_object(
        GROUP, VERSION, env.ns, "hubclusters", cluster_doc("mine", env.ns))), 10, what="RBAC to take effect")
    assert created["metadata"]["name"] == "mine"
    forged = {"status": {"meshJoin": {"group": "payments", "order": 0},
                         "outputs": {"endpointVPC": "vpc-0hub2", "transitAttachment": "tgw-attach-0theirs"}}}
    # The hub's status.mesh feeds every member's gateway and each group's migration step: the service's alone.
    forged_hub = {"status": {"mesh": {"transit": {"_tgw_111111111111": {"outputs": {"regions": {
        "us-east-1": {"transitGatewayId": "tgw-0attacker"}}}}}}}}
    refusals = [
        lambda: custom.patch_namespaced_custom_object_status(GROUP, VERSION, env.ns, "hubclusters", "mine", forged),
        lambda: core.patch_namespace(env.ns, {"metadata": {"annotations": {OWNER_ANNOTATION: "111111111111"}}}),
        lambda: custom.create_cluster_custom_object(GROUP, VERSION, "hubconfigs", hub_doc()),
        lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "hubconfigs", env.hub_name, {"spec": {}}),
        lambda: custom.patch_cluster_custom_object_status(GROUP, VERSION, "hubconfigs", env.hub_name, forged_hub),
        lambda: core.read_namespaced_config_map("hubwright-role-account-map", env.system_namespace),
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, env.system_namespace, "hubclusters",
                                                       cluster_doc("elsewhere", env.system_namespace)),
    ]
    for attempt in refusals:
        with pytest.raises(ApiException) as denied:
            attempt()
        assert denied.value.status == 403
    assert "status" not in env.get("mine")
    tenant.close()


def _try(call):
    try:
        return call()
    except ApiException as exc:
        if exc.status == 403:
            return None
        raise


@pytest.mark.parametrize("change, complaint", [
    ({"apiURL": "https://admin@api.evil.example.com"}, "spec.apiURL"),
    ({"apiURL": "https://api.evil.example.com/?next=/"}, "spec.apiURL"),
    ({"network": {"vpcID": "vpc-0e", "cidr": "128.0.0.0/1"}}, "spec.network.cidr"),
    ({"sharedIngress": {"enabled": True, "backend": "kas:6443", "allowedSourceCIDRs": ["0.0.0.0/0"]}},
     "spec.sharedIngress.allowedSourceCIDRs[0]"),
    ({"sharedIngress": {"enabled": True, "backend": "10.9.9.9 x:6443"}}, "spec.sharedIngress.backend"),
    ({"sharedIngress": {"enabled": True, "backend": "10.0.0.1:6443\nprogram x"}}, "spec.sharedIngress.backend"),
    ({"sharedIngress": {"enabled": True, "backend": "kas.svc:6443#"}}, "spec.sharedIngress.backend"),
    ({"network": {"vpcID": "vpc-0e", "cidr": "10.0.0.0/16", "routeTableIDs": [f"rtb-{i}" for i in range(201)]}},
     "spec.network.routeTableIDs"),
])
def test_the_api_server_refuses_what_the_schema_can_check(env, change, complaint):
    with pytest.raises(ApiException) as refused:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters",
                                                   cluster_doc("bad", env.ns, **change))
    assert refused.value.status == 422
    assert complaint in json.loads(refused.value.body)["message"]


def test_the_api_server_refuses_a_name_too_long_for_a_stack_and_hub_integers_past_int32(env):
    with pytest.raises(ApiException) as refused:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", cluster_doc("x" * 120, env.ns))
    assert refused.value.status == 422 and "metadata.name" in json.loads(refused.value.body)["message"]
    for replicas in (True, 2**31):
        with pytest.raises(ApiException) as refused:
            env.hub(f"too-many-{replicas}".lower(), sharedIngress={"replicas": replicas})
        assert refused.value.status == 422 and "spec.sharedIngress.replicas" in refused.value.body


# --------------------------------------------------------------------------- the service

@pytest.mark.parametrize("executor", ["local", "runners"])  # runners: the runs are HubStackRuns (doubles.service_env)
def test_every_attack_stalls_the_attacker_and_the_victim_is_untouched(env, executor):
    evil, drifter = f"evil-{env.suffix}", f"drifter-{env.suffix}"
    env.namespace(evil, owner="333333333333")
    env.namespace(drifter, owner=None)  # no owner annotation: refused by default
    long_ns = f"tenant-with-a-rather-long-namespace-name-{env.suffix}"
    env.namespace(long_ns)
    engine = RecordingEngine()
    mesh_cluster(env, "pay-1", env.ns, "10.1.0.0/16")
    mesh_cluster(env, "pay-2", env.ns, "10.2.0.0/16")
    env.create("api", apiURL="https://api.prod.acme.example.com")
    with env.running(engine, executor=executor) as service:
        wait_until(lambda: all(env.ready(n) for n in ("pay-1", "pay-2", "api")), 30, what="the victim's clusters")
        before = {n: env.get(n)["status"] for n in ("pay-1", "pay-2", "api")}
        victim_runs = len(engine.calls)

        mesh_cluster(env, "peer", evil, "10.50.0.0/16", accountID="333333333333")  # acme's group label: its own group in its namespace
        attacks = {
            ("squat", drifter): ({"accountID": "222222222222"}, "NamespaceNotOwned"),
            ("hub", evil): ({"accountID": "111111111111"}, "AccountMismatch"),
            ("shadow", evil): ({"apiURL": "https://amazonaws.com:443"}, "InvalidSpec"),
            ("literal", evil): ({"apiURL": "https://10.0.0.1:6443"}, "InvalidSpec"),
            ("dup", evil): ({"apiURL": "https://API.prod.acme.example.com"}, "APIHostTaken"),
            ("x" * 70, long_ns): ({"apiURL": "https://api.long.example.com"}, "InvalidSpec"),
        }
        for (name, namespace), (spec, _) in attacks.items():
            env.create(name, namespace, **{"accountID": "333333333333", **spec})
        for (name, namespace), (_, reason) in attacks.items():
            wait_until(lambda: env.reason(name, namespace) == reason, 20, what=f"{namespace}/{name} {reason}")
            assert env.condition(name, "Stalled", namespace)["status"] == "True"
            assert FINALIZER not in (env.get(name, namespace)["metadata"].get("finalizers") or [])
        wait_until(lambda: env.ready("peer", evil), 20, what="the intruder's own group")
        settle(env, service)

        assert "Pulumi stack names have at most 100" in env.condition("x" * 70, "Stalled", long_ns)["message"]
        ran = [c.stack for c in engine.calls[victim_runs:]]
        assert ran == [f"{evil}.peer"]  # the attacks ran nothing; the victim's stacks did not move
        assert engine.stacks[f"{evil}.peer"].mesh.pairs == ()
        for name, status in before.items():
            now = env.get(name)["status"]
            assert (now["inputsHash"], now["lastUpdate"]) == (status["inputsHash"], status["lastUpdate"])


def test_a_mesh_member_declaring_the_hubs_cidr_is_refused_and_its_peer_keeps_its_routes(env):
    """The route hijack (issue 31, item 1) through the real API server: in a group the hub spans across acme and
    globex, globex declares 10.0.9.0/24, inside the hub's management VPC 10.0.0.0/16, and another member
    192.168.7.0/24, inside a range the hub reserved. Both are Stalled naming both CIDRs; neither runs, and
    acme's member owns no pair with them."""
    evil = f"evil-{env.suffix}"
    env.namespace(evil, owner="333333333333")
    env.patch_hub({"spec": {"mesh": {"reservedCIDRs": ["192.168.0.0/16"],
                                     "groups": {"payments": {"namespaces": [env.ns, evil]}}}}})
    engine = RecordingEngine()
    mesh_cluster(env, "pay-1", env.ns, "10.1.0.0/16")
    with env.running(engine) as service:
        wait_until(lambda: env.ready("pay-1"), 30, what="the victim's member")
        before = env.get("pay-1")["status"]
        mesh_cluster(env, "hijack", evil, "10.0.9.0/24", accountID="333333333333")
        mesh_cluster(env, "onprem", evil, "192.168.7.0/24", accountID="333333333333")
        for name, cidr, owner in (("hijack", "10.0.9.0/24", f"HubConfig {env.hub_name} spec.associatedVPCs[0] "
                                                             f"(VPC vpc-0mgmt)"),
                                  ("onprem", "192.168.7.0/24", f"HubConfig {env.hub_name} spec.mesh.reservedCIDRs[0]")):
            wait_until(lambda: env.reason(name, evil) == "MeshCIDROverlap", 20, what=f"{evil}/{name} MeshCIDROverlap")
            message = env.condition(name, "Stalled", evil)["message"]
            assert f"HubCluster {evil}/{name}: spec.network.cidr: CIDR {cidr} of HubCluster {evil}/{name} overlaps CIDR " \
                   f"{'10.0.0.0/16' if name == 'hijack' else '192.168.0.0/16'} of {owner}" in message
        settle(env, service)
        assert [c.stack for c in engine.calls] == [f"{env.ns}.pay-1"]  # the refused members ran nothing
        assert engine.stacks[f"{env.ns}.pay-1"].mesh.pairs == ()
        now = env.get("pay-1")["status"]
        assert (now["inputsHash"], now["lastUpdate"]) == (before["inputsHash"], before["lastUpdate"])


def test_the_service_routes_exactly_the_clusters_it_would_run_and_reports_the_others_on_their_own(env):
    """The shared proxy's ConfigMap holds the routes stacks.resolve.resolve_all gives (as `ingress render`):
    refused clusters are not routed and say why on their own conditions; a mesh overlap keeps its route."""
    ingress_ns = f"ingress-{env.suffix}"
    env.namespace(ingress_ns, owner=None)
    env.patch_hub({"spec": {"sharedIngress": {"address": "lb.example.com:6443", "namespace": ingress_ns,
                                              "allowedBackends": ["10.0.0.0/8"]}}})
    env.core.create_namespaced_config_map(ingress_ns, {"metadata": {"name": "shared-ingress"}, "data": {}})

    def opted(name, n, **spec):
        return env.create(name, sharedIngress={"enabled": True, "backend": f"10.0.{n}.10:6443"}, **spec)

    def routes():
        data = env.core.read_namespaced_config_map("shared-ingress", ingress_ns).data or {}
        return {line.split()[0] for line in data.get(MAP_FILE, "").splitlines() if line and line[0] != "#"}

    engine = RecordingEngine()
    with env.running(engine) as service:
        opted("good", 1)
        opted("mismatch", 2, accountID="333333333333")
        opted("nowhere", 3, region="ap-south-1")
        env.create("metadata", sharedIngress={"enabled": True, "backend": "169.254.169.254:80"})
        env.create("self", sharedIngress={"enabled": True, "backend": "lb.example.com:6443"})
        for name, n, cidr in (("mesh-a", 5, "10.60.0.0/16"), ("mesh-b", 6, "10.60.0.0/16")):
            mesh_cluster(env, name, env.ns, cidr, sharedIngress={"enabled": True, "backend": f"10.0.{n}.10:6443"})
        wait_until(lambda: routes() == {f"{env.ns}.{n}" for n in ("good", "mesh-a", "mesh-b")}, 30,
                   what=f"the routes (now {routes()})")
        for name, reason in (("mismatch", "AccountMismatch"), ("nowhere", "NoEndpointVPC"),
                             ("metadata", "BackendNotAllowed"), ("self", "BackendNotAllowed")):
            wait_until(lambda: env.reason(name) == reason, 20, what=f"{name} {reason}")
        assert "link-local" in env.condition("metadata", "Stalled")["message"]
        assert "own load balancer" in env.condition("self", "Stalled")["message"]
        wait_until(lambda: env.ready("good") and env.ready("mesh-a"), 20, what="the good clusters")
        assert "overlap" in env.condition("mesh-b", "Stalled")["message"]

        env.delete("good")  # the routes follow: the removed cluster is unrouted, the others stay
        wait_until(lambda: routes() == {f"{env.ns}.mesh-a", f"{env.ns}.mesh-b"}, 30, what=f"the routes (now {routes()})")
        settle(env, service)
    assert sorted(c.stack for c in engine.calls if c.operation == "up") == [f"{env.ns}.good", f"{env.ns}.mesh-a"]


@pytest.mark.parametrize("executor", ["local", "runners"])
def test_refusing_never_destroys_and_the_fix_costs_no_run(env, executor):
    engine = RecordingEngine()
    env.create("prod-1")
    with env.running(engine, executor=executor) as service:
        wait_until(lambda: env.ready("prod-1"), 20)
        env.core.patch_namespace(env.ns, {"metadata": {"annotations": {OWNER_ANNOTATION: None}}})
        wait_until(lambda: env.reason("prod-1") == "NamespaceNotOwned", 20)
        settle(env, service)
        assert [c.operation for c in engine.calls] == ["up"]  # no destroy: the stack is left as it is
        assert FINALIZER in env.get("prod-1")["metadata"]["finalizers"]
        assert f"{env.ns}.prod-1" in engine.stacks

        env.namespace(env.ns)  # the administrator declares the owner again
        wait_until(lambda: env.ready("prod-1"), 20)
        settle(env, service)
    assert [c.operation for c in engine.calls] == ["up"]
