"""The central proxy component under the mock runtime: the Kubernetes resources and the load balancer's address."""
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from stacks.haproxy import Route, parse_map
from automation.adapters.engine.plan import record
from automation.adapters.engine.standins import StandIns
from components.ingress import CONFIG_DIR, MASTER_SOCKET, CentralProxy, CentralProxyArgs
from stacks.model.hub import HubSharedIngress

LB_HOST = "a1b2c3.elb.us-east-1.amazonaws.com"
ROUTES = [Route("prod-1", "10.0.1.10:6443", cluster="acme/prod-1"), Route("eu-1", "10.0.3.10:6443")]


class CloudStandIns(StandIns):
    """A cloud that hands every LoadBalancer Service an address."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        rid, state = super().new_resource(args)
        if args.typ == "kubernetes:core/v1:Service" and state.get("spec", {}).get("type") == "LoadBalancer":
            state = {**state, "status": {"loadBalancer": {"ingress": [{"hostname": LB_HOST}]}}}
        return rid, state


def deploy(ingress=None, routes=ROUTES, standins=None, **overrides):
    ingress = ingress or HubSharedIngress(bind=":6443", replicas=3)

    def build():
        provider = k8s.Provider("mgmt", kubeconfig="{}")
        proxy = CentralProxy("shared-ingress", CentralProxyArgs.from_hub(ingress, routes, **overrides), provider)
        return {"address": proxy.address, "endpoint": proxy.endpoint}

    return record(build, stack="hub", standins=standins or CloudStandIns())


def pod_spec(plan):
    return plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]


def test_the_load_balancers_address_is_the_output_guests_dial():
    plan = deploy()
    assert plan.outputs == {"address": LB_HOST, "endpoint": f"{LB_HOST}:6443"}
    service = plan.one("kubernetes:core/v1:Service").inputs
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [{"name": "kube-api", "port": 6443, "protocol": "TCP", "targetPort": "kube-api"}]
    assert service["spec"]["selector"] == plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["selector"][
        "matchLabels"]


def test_no_address_until_the_cloud_assigns_one():
    assert deploy(standins=StandIns()).outputs == {"address": None, "endpoint": None}


def test_config_map_holds_the_rendered_config_and_map_where_haproxy_reads_them():
    plan = deploy()
    data = plan.one("kubernetes:core/v1:ConfigMap").inputs["data"]
    assert parse_map(data["clusters.map"]) == {"eu-1": "cluster_eu-1", "prod-1": "cluster_prod-1"}
    assert f"map({CONFIG_DIR}/clusters.map)" in data["haproxy.cfg"]
    assert "bind :6443 accept-proxy" in data["haproxy.cfg"] and "bind :8404" in data["haproxy.cfg"]
    spec = pod_spec(plan)
    [haproxy] = spec["containers"]
    assert haproxy["command"][-1] == f"{CONFIG_DIR}/haproxy.cfg"
    assert {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True} in haproxy["volumeMounts"]
    assert spec["volumes"][0] == {"name": "config", "configMap": {"name": "shared-ingress"}}


def test_deployment_is_highly_available():
    plan = deploy()
    deployment = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert deployment["replicas"] == 3
    anti = pod_spec(plan)["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"] == \
        deployment["selector"]["matchLabels"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == \
        "topology.kubernetes.io/zone"
    pdb = plan.one("kubernetes:policy/v1:PodDisruptionBudget").inputs["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": deployment["selector"]["matchLabels"]}}
    haproxy = pod_spec(plan)["containers"][0]
    assert haproxy["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert {"name": "healthz", "containerPort": 8404, "protocol": "TCP"} in haproxy["ports"]


def test_without_a_reloader_a_config_change_rolls_the_pods():
    one, two = deploy(), deploy(routes=ROUTES[:1])
    annotations = lambda plan: plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["metadata"][  # noqa: E731
        "annotations"]
    assert annotations(one)["hubwright.io/config-hash"] != annotations(two)["hubwright.io/config-hash"]
    assert annotations(one) == annotations(deploy())  # unchanged inputs: no rollout


def test_with_a_reloader_the_pods_stay_and_the_sidecar_applies_changes():
    ingress = HubSharedIngress(reloader_image="registry.example.com/hubwright:1")
    one, two = deploy(ingress), deploy(ingress, routes=ROUTES[:1])
    template = lambda plan: plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]  # noqa: E731
    assert yaml.safe_dump(template(one)) == yaml.safe_dump(template(two))
    haproxy, reloader = template(one)["spec"]["containers"]
    assert "-W" in haproxy["command"] and f"{MASTER_SOCKET},mode,666" in haproxy["command"]
    assert reloader["image"] == "registry.example.com/hubwright:1"
    assert reloader["command"][:3] == ["python", "-m", "automation.adapters.files.haproxy"]
    assert reloader["command"][reloader["command"].index("--master-socket") + 1] == MASTER_SOCKET
    assert {m["mountPath"] for m in reloader["volumeMounts"]} == {CONFIG_DIR, "/var/run/haproxy"}
    assert (one.one("kubernetes:core/v1:ConfigMap").inputs["data"]
            != two.one("kubernetes:core/v1:ConfigMap").inputs["data"])


def test_every_resource_is_in_the_namespace_and_parented_under_the_component():
    plan = deploy(HubSharedIngress(namespace="edge"))
    [top] = plan.of_type("hubwright:ingress:CentralProxy")
    kube = [r for r in plan.resources if r.type.startswith("kubernetes:")]
    assert sorted(r.type for r in kube) == [
        "kubernetes:apps/v1:Deployment", "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:Service", "kubernetes:policy/v1:PodDisruptionBudget"]
    assert all(r.parent == top.urn for r in kube)
    assert all(r.provider and r.provider.endswith("::mgmt") for r in kube)
    assert plan.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == "edge"
    assert {r.inputs["metadata"].get("namespace") for r in kube if "Namespace" not in r.type} == {"edge"}


def test_fewer_than_two_replicas_is_refused():
    with pytest.raises(ValueError, match="at least two"):
        CentralProxyArgs(config="", map="", port=6443, replicas=1)
