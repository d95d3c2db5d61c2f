"""The deploy component under the mock runtime: CRDs, least-privilege RBAC, state, probes."""
import argparse
import re

import pulumi_kubernetes as k8s
import pytest

from automation.adapters.engine.plan import record
from components.console import Console, ConsoleArgs
from components.controlplane import ControlPlane, ControlPlaneArgs
from stacks.crds import crd_manifests
from stacks.install import CONSOLE_NAMESPACE_RULES, CONSOLE_RULES
from stacks.names import CLUSTERS, GROUP, HUBCONFIGS, STACKRUNS


def deploy(**kw):
    def build():
        provider = k8s.Provider("k8s", kubeconfig="{}")
        ControlPlane("hubwright", ControlPlaneArgs(image="registry.example.com/hubwright:1", crds=crd_manifests(), **kw),
                     provider)
    return record(build, stack="deploy")


def test_installs_the_generated_crds():
    groups = {g.name: g for g in deploy().of_type("kubernetes:yaml/v2:ConfigGroup")}
    names = sorted(o["metadata"]["name"] for o in groups["hubwright-crds"].inputs["objs"])
    assert names == ["hubclusters.hubwright.io", "hubconfigs.hubwright.io", "hubgitrepos.hubwright.io", "hubretainedstacks.hubwright.io", "hubstackruns.hubwright.io",
                     "hubtenants.hubwright.io"]


def test_installs_the_tenant_admission_policies_and_the_tenant_admin_role():
    [group] = [g for g in deploy().of_type("kubernetes:yaml/v2:ConfigGroup") if g.name == "hubwright-admission"]
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in group.inputs["objs"])
    assert kinds == [("ClusterRole", "hubwright-tenant-admin"),
                     ("ValidatingAdmissionPolicy", "hubwright-cluster-deletion-protection"),
                     ("ValidatingAdmissionPolicy", "hubwright-hubcluster-placement"),
                     ("ValidatingAdmissionPolicy", "hubwright-source-deletion-protection"),
                     ("ValidatingAdmissionPolicy", "hubwright-stackrun-author"),
                     ("ValidatingAdmissionPolicy", "hubwright-tenant-deletion"),
                     ("ValidatingAdmissionPolicy", "hubwright-tenant-ownership"),
                     ("ValidatingAdmissionPolicy", "hubwright-unknown-keys"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-cluster-deletion-protection"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-hubcluster-placement"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-source-deletion-protection"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-stackrun-author"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-tenant-deletion"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-tenant-ownership"),
                     ("ValidatingAdmissionPolicyBinding", "hubwright-unknown-keys")]
    # Whatever the executor: only the service's own ServiceAccount creates runs.
    [policy] = [o for o in group.inputs["objs"] if o["metadata"]["name"] == "hubwright-stackrun-author"
                and o["kind"] == "ValidatingAdmissionPolicy"]
    assert "system:serviceaccount:hubwright-system:hubwright'" in policy["spec"]["validations"][0]["expression"]


def test_rbac_is_least_privilege():
    plan = deploy()
    roles = {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")}
    rules = roles["hubwright"]["rules"]
    verbs: dict = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    assert verbs[("hubwright.io", "hubclusters/status")] == {"get", "update", "patch"}
    assert verbs[("hubwright.io", "hubconfigs")] == {"get", "list", "watch"}
    assert verbs[("hubwright.io", "hubretainedstacks")] == {"get", "list", "watch", "create", "delete"}
    # Namespaces: read, and create or label a Tenant's; never delete one.
    assert verbs[("", "namespaces")] == {"get", "list", "watch", "create", "patch"}
    deletes = {key for key, v in verbs.items() if "delete" in v}
    assert deletes == {("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
                       ("rbac.authorization.k8s.io", "rolebindings"),  # a gone Cluster's agent; a Tenant's admins
                       ("", "resourcequotas"),  # a Tenant's quota, when its spec.quota goes
                       ("hubwright.io", "hubclusters"),  # the HubCluster of a source that opted out or went
                       ("hubwright.io", "hubgitrepos"),  # the HubGitRepo of a template removed
                       ("hubwright.io", "hubretainedstacks")}  # a retained stack released or adopted
    # Other projects' cluster objects: read, and our finalizer on the sources (update/patch); never more.
    assert verbs[("cluster.x-k8s.io", "clusters")] == verbs[("hive.openshift.io", "clusterdeployments")] == \
        {"get", "list", "watch", "update", "patch"}
    assert verbs[("infrastructure.cluster.x-k8s.io", "awsclusters")] == \
        verbs[("controlplane.cluster.x-k8s.io", "awsmanagedcontrolplanes")] == {"get", "list", "watch"}
    assert all("*" not in v and "escalate" not in v for v in verbs.values())
    [bind] = [rule for rule in rules if "bind" in rule["verbs"]]
    assert bind["resourceNames"] == ["hubwright-tenant-admin"]
    assert not any(r for rule in rules for r in rule["resources"] if r in ("secrets", "configmaps"))
    ns_rules = plan.one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs["rules"]
    configmaps = [r for r in ns_rules if r["resources"] == ["configmaps"]]
    assert configmaps == [{"apiGroups": [""], "resources": ["configmaps"],
                           "resourceNames": ["hubwright-role-account-map"], "verbs": ["get", "list", "watch"]}]
    # --executor runners adds the runs (no update of a spec: that is nobody's) and nothing else cluster-wide.
    with_runners = rule_verbs(by_name(runner_plan(), "rbac.authorization.k8s.io/v1:ClusterRole")["hubwright"]["rules"])
    assert {key: v for key, v in with_runners.items() if verbs.get(key) != v} == {
        ("hubwright.io", "hubstackruns"): {"get", "list", "watch", "create", "delete"},
        ("hubwright.io", "hubstackruns/status"): {"update"}}


def rule_verbs(rules) -> dict:
    verbs: dict = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    return verbs


def runner_plan(**kw):
    return deploy(backend_url="s3://state-bucket/hubwright", executor="runners", **kw)


def by_name(plan, kind: str) -> dict:
    return {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type(f"kubernetes:{kind}")}


def test_the_local_executor_gives_no_one_rights_on_runs_or_secrets():
    plan = deploy()
    assert set(by_name(plan, "apps/v1:Deployment")) == {"hubwright"}
    service = rule_verbs(by_name(plan, "rbac.authorization.k8s.io/v1:ClusterRole")["hubwright"]["rules"])
    assert not [key for key in service if key[1].startswith("hubstackruns")]
    ns_rules = rule_verbs(by_name(plan, "rbac.authorization.k8s.io/v1:Role")["hubwright"]["rules"])
    assert ns_rules[("", "secrets")] == {"get"}  # the HubGitRepos' forge tokens, by name: no run's Secret verbs
    container = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"][0]
    assert "--executor" not in container["args"]


def test_with_runners_each_party_gets_exactly_its_rights_on_runs():
    """The service creates and deletes runs and their Secrets (in its namespace); the runners read runs and write
    only their status, and read and patch the runs' Secrets in the service's namespace only; nothing else."""
    plan = runner_plan()
    roles = by_name(plan, "rbac.authorization.k8s.io/v1:ClusterRole")
    ns_roles = by_name(plan, "rbac.authorization.k8s.io/v1:Role")
    service = rule_verbs(roles["hubwright"]["rules"])
    assert service[("hubwright.io", "hubstackruns")] == {"get", "list", "watch", "create", "delete"}
    assert service[("hubwright.io", "hubstackruns/status")] == {"update"}
    assert rule_verbs(ns_roles["hubwright"]["rules"])[("", "secrets")] == {"get", "list", "create", "delete"}
    assert not any(r for rule in roles["hubwright"]["rules"] for r in rule["resources"] if r == "secrets")

    assert rule_verbs(roles["hubwright-runner"]["rules"]) == {
        ("hubwright.io", "hubstackruns"): {"get", "list", "watch"},
        ("hubwright.io", "hubstackruns/status"): {"update", "patch"}}
    assert rule_verbs(ns_roles["hubwright-runner"]["rules"]) == {("", "secrets"): {"get", "patch"}}
    assert ns_roles["hubwright-runner"]["metadata"]["namespace"] == "hubwright-system"
    bindings = [*by_name(plan, "rbac.authorization.k8s.io/v1:ClusterRoleBinding").values(),
                *by_name(plan, "rbac.authorization.k8s.io/v1:RoleBinding").values()]
    runner_sa = [{"kind": "ServiceAccount", "name": "hubwright-runner", "namespace": "hubwright-system"}]
    # The runner's ServiceAccount is bound to its two roles and nothing else, the service's to its own.
    assert sorted((b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings
                  if b["subjects"] == runner_sa) == [("ClusterRole", "hubwright-runner"), ("Role", "hubwright-runner")]


def test_tenants_read_the_runs_of_their_namespace_and_never_write_them():
    from stacks.admission import tenant_admin_clusterrole

    plan = runner_plan()
    roles = by_name(plan, "rbac.authorization.k8s.io/v1:ClusterRole")
    for role in (tenant_admin_clusterrole(), roles["hubwright-viewer"]):
        verbs = rule_verbs(role["rules"])
        assert verbs[("hubwright.io", "hubstackruns")] == {"get", "list", "watch"}
        assert ("hubwright.io", "hubstackruns/status") not in verbs and ("", "secrets") not in verbs
    assert not [key for key in rule_verbs(roles["hubwright-tenant"]["rules"]) if key[1].startswith("hubstackruns")]


def test_the_runner_deployment_runs_as_the_service_does():
    """Same image, backend, Secret and hardening; its own ServiceAccount (with the service's AWS identity); its
    name and namespace from the downward API; a grace period that covers a drain; probes on its metrics port."""
    from stacks import options

    plan = runner_plan(service_account_annotations={"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"},
                       runner_replicas=5, claim_ttl=45, cancel_grace=90, run_timeout=600)
    deployments = by_name(plan, "apps/v1:Deployment")
    service_pod = deployments["hubwright"]["spec"]["template"]["spec"]
    runners = deployments["hubwright-runner"]
    pod = runners["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert runners["spec"]["replicas"] == 5
    assert pod["serviceAccountName"] == "hubwright-runner"
    accounts = by_name(plan, "core/v1:ServiceAccount")
    assert accounts["hubwright-runner"]["metadata"]["annotations"] == accounts["hubwright"]["metadata"]["annotations"]
    assert pod["securityContext"] == service_pod["securityContext"] and pod["securityContext"]["runAsUser"] == 65532
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"] == service_pod["containers"][0]["image"]
    assert container["envFrom"] == [{"secretRef": {"name": "hubwright-pulumi", "optional": False}}]
    assert pod["terminationGracePeriodSeconds"] == 90 + 30
    assert container["livenessProbe"]["httpGet"]["port"] == container["readinessProbe"]["httpGet"]["port"] == \
        container["ports"][0]["name"] == "metrics"
    assert container["resources"]["limits"] == {"memory": "1Gi"}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The runners' lock hosts: their own pod names, and the service's (locks it left before the switch).
    assert re.fullmatch(env["HUBWRIGHT_RUNNER_HOSTS"]["value"], "hubwright-runner-7d9f8b6c5d-x2x4q")
    assert not re.fullmatch(env["HUBWRIGHT_RUNNER_HOSTS"]["value"], "hubwright-7d9f8b6c5d-x2x4q")
    assert re.fullmatch(env["HUBWRIGHT_LOCK_HOSTS"]["value"], "hubwright-7d9f8b6c5d-x2x4q")
    assert env["PULUMI_HOME"]["value"] == "/var/cache/pulumi"
    # Every path it writes is a volume; none is the service's PersistentVolumeClaim.
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/var/lib/hubwright", "/var/cache/pulumi", "/tmp"}
    assert all("emptyDir" in volumes[m["name"]] for m in container["volumeMounts"])
    # Its flags are the runner's options (the one table, stacks/options.py), with the values they mean.
    assert container["args"][:4] == ["python", "-m", "automation", "runner"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    options.add_options(parser, options.RUNNER, {})
    args = parser.parse_args(container["args"][4:])
    assert (args.backend, args.namespace, args.claim_ttl, args.run_timeout, args.cancel_grace, args.workers) == \
        ("s3://state-bucket/hubwright", "hubwright-system", 45, 600, 90, 1)
    # The service awaits runs instead of running them, with the same claim ttl.
    from automation.cli import build_parser
    from automation.service.command import options_from

    serve = options_from(build_parser().parse_args(service_pod["containers"][0]["args"][3:]))
    assert (serve.executor, serve.claim_ttl, serve.keep_runs) == ("runners", 45, 10)
    # The service's selector does not take the runners' pods.
    selector = deployments["hubwright"]["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= runners["spec"]["template"]["metadata"]["labels"].items()


def test_runners_need_a_shared_backend():
    with pytest.raises(ValueError, match="shared backend_url"):
        ControlPlaneArgs(image="registry.example.com/hubwright:1", crds=[], executor="runners")
    with pytest.raises(ValueError, match="local or runners"):
        ControlPlaneArgs(image="registry.example.com/hubwright:1", crds=[], executor="remote")


def test_tenants_get_clusters_through_edit_and_admin_but_never_their_status():
    """Status fields feed resolution (meshJoin, outputs.endpointVPC): only the service writes them."""
    roles = {r.inputs["metadata"]["name"]: r.inputs
             for r in deploy().of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")}
    tenant, viewer = roles["hubwright-tenant"], roles["hubwright-viewer"]
    assert [r["resources"] for r in tenant["rules"]] == [["hubclusters"]]
    assert {k for k in tenant["metadata"]["labels"] if "aggregate-to" in k} == {
        "rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"}
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in viewer["rules"])
    assert "rbac.authorization.k8s.io/aggregate-to-view" in viewer["metadata"]["labels"]
    writes_status = [name for name, role in roles.items() for rule in role["rules"]
                     if "hubclusters/status" in rule["resources"] and {"update", "patch"} & set(rule["verbs"])]
    assert writes_status == ["hubwright"]  # the service's own role, bound to its ServiceAccount only


def test_file_backend_gets_a_volume_and_one_replica():
    plan = deploy()
    spec = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    container = spec["template"]["spec"]["containers"][0]
    assert container["args"][container["args"].index("--backend") + 1] == "file:///var/lib/hubwright"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert re.fullmatch(env["HUBWRIGHT_LOCK_HOSTS"], "hubwright-7d9f8b6c5d-x2x4q")
    assert env["HUBWRIGHT_POLICY"] == "mandatory"  # the policy pack on every update, unless switched off
    assert plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")


def test_shared_backend_runs_two_replicas_without_a_volume():
    plan = deploy(backend_url="s3://state-bucket/hubwright")
    spec = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    assert not plan.of_type("kubernetes:core/v1:PersistentVolumeClaim")


def test_every_resource_is_parented_under_the_component():
    plan = deploy()
    [top] = plan.of_type("hubwright:deploy:ControlPlane")
    for res in plan.resources:
        if res.type.startswith("kubernetes:") and res.type != "pulumi:providers:kubernetes":
            assert res.parent == top.urn, res.name


def test_the_deploy_program_runs_the_service_and_the_central_proxy(tmp_path):
    import runpy

    import pulumi
    import yaml

    from doubles.factories import hub_doc

    hub_file = tmp_path / "hub.yaml"
    hub_file.write_text(yaml.safe_dump(hub_doc(sharedIngress={"address": "ingress.example.com:6443"})))

    def build():
        pulumi.runtime.set_all_config({"hubwright-deploy:values": '{"image": "registry.example.com/hubwright:1"}',
                                       "hubwright-deploy:hub": str(hub_file)})
        runpy.run_path("deploy/__main__.py")

    plan = record(build, stack="prod", project="hubwright-deploy")
    assert plan.of_type("hubwright:deploy:ControlPlane") and plan.of_type("hubwright:ingress:CentralProxy")
    proxy_cm = [r for r in plan.of_type("kubernetes:core/v1:ConfigMap") if r.name == "shared-ingress-config"]
    assert proxy_cm and proxy_cm[0].options["ignoreChanges"] == ["data"]


def container_of(plan):
    pod = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_the_container_args_are_the_serve_flags_they_mean():
    """Parsed by the service's own CLI: the run limits, the state and the backend reach ServiceOptions."""
    from automation.cli import build_parser
    from automation.service.command import options_from

    _, container = container_of(deploy(run_timeout=900, cancel_grace=45.5))
    assert container["args"][:3] == ["python", "-m", "automation"]
    args = build_parser().parse_args(container["args"][3:])
    options = options_from(args)
    assert (options.run_timeout, options.cancel_grace, options.namespace) == (900, 45.5, "hubwright-system")
    assert (args.state_dir, args.backend) == ("/var/lib/hubwright", "file:///var/lib/hubwright")


def test_the_grace_period_covers_the_cancel_grace():
    """SIGTERM: the service cancels its runs and kills them after --cancel-grace; the kubelet's SIGKILL comes later."""
    pod, _ = container_of(deploy())
    assert pod["terminationGracePeriodSeconds"] == 60 + 30
    pod, container = container_of(deploy(cancel_grace=120.5))
    assert pod["terminationGracePeriodSeconds"] == 121 + 30
    assert container["args"][container["args"].index("--cancel-grace") + 1] == "120.5"


@pytest.mark.parametrize("backend, state", [(None, "persistentVolumeClaim"), ("https://api.pulumi.com", "emptyDir")])
def test_every_path_the_service_writes_is_a_volume(backend, state):
    """Read-only root filesystem: the state dir (workspaces, whatever the backend), PULUMI_HOME and /tmp."""
    pod, container = container_of(deploy(backend_url=backend))
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert set(mounts) == {"/var/lib/hubwright", env["PULUMI_HOME"], "/tmp"}
    assert state in mounts[container["args"][container["args"].index("--state-dir") + 1]]
    assert "emptyDir" in mounts[env["PULUMI_HOME"]] and "emptyDir" in mounts["/tmp"]


# --------------------------------------------------------------------------- the registry API (components/registry.py)

def deploy_registry(**kw):
    from components.registry import RegistryApi, RegistryApiArgs
    from stacks.install import API_RULES

    def build():
        provider = k8s.Provider("k8s", kubeconfig="{}")
        RegistryApi("hubwright-registry", RegistryApiArgs(image="registry.example.com/hubwright:1", rules=API_RULES,
                                                           **kw), provider)
    return record(build, stack="deploy")


def test_the_registry_api_gets_exactly_its_documented_rights():
    from stacks.install import API_RULES
    plan = deploy_registry()
    [role] = plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    assert role.inputs["rules"] == [dict(rule) for rule in API_RULES]
    [binding] = plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
    assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "hubwright-registry",
                                           "namespace": "hubwright-system"}]
    verbs = {verb for rule in API_RULES for verb in rule["verbs"]}
    assert not verbs & {"*", "escalate", "bind", "update", "watch"}
    assert not any("secrets" in rule["resources"] for rule in API_RULES)


def test_the_registry_keeps_sqlite_on_a_volume_with_one_replica():
    plan = deploy_registry()
    spec = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    assert args[:4] == ["python", "-m", "automation", "api"]
    assert args[args.index("--facts-db") + 1] == "sqlite:////var/lib/hubwright-registry/facts.db"
    assert {"name": "facts", "mountPath": "/var/lib/hubwright-registry"} in container["volumeMounts"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert plan.one("kubernetes:core/v1:PersistentVolumeClaim").inputs["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_registry_reads_the_run_history_from_the_backends_bucket_with_its_keys_only():
    """docs/history.md: the API serves the run history from the backend's store. On the file backend that is the
    service pod's volume: off, said. On S3: the backend's URL, and of the backend Secret only the bucket's keys
    (optional: with IRSA there are none), never the stacks' passphrase or a Cloud token."""
    def registry(**kw):
        [container] = deploy_registry(**kw).one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
            "containers"]
        return container["args"], {e["name"]: e for e in container["env"]}
    args, env = registry()
    assert args[args.index("--history-store") + 1] == "off" and env == {}
    url = "s3://state?region=eu-west-1"
    args, env = registry(backend_url=url, backend_secret="hubwright-pulumi")
    assert args[args.index("--backend") + 1] == url and "--history-store" not in args
    assert set(env) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"}
    assert all(e["valueFrom"]["secretKeyRef"] == {"name": "hubwright-pulumi", "key": name, "optional": True}
               for name, e in env.items())


def test_the_registry_on_postgresql_takes_its_url_from_a_secret_and_runs_two_replicas():
    plan = deploy_registry(facts_db_secret="registry-db")
    spec = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert spec["replicas"] == 2
    [container] = spec["template"]["spec"]["containers"]
    assert "--facts-db" not in container["args"]  # the URL holds a password: never in the pod's args
    assert container["env"] == [{"name": "HUBWRIGHT_FACTS_DB",
                                 "valueFrom": {"secretKeyRef": {"name": "registry-db", "key": "url"}}}]
    assert plan.of_type("kubernetes:core/v1:PersistentVolumeClaim") == []


# --------------------------------------------------------------------------- the web console (components/console.py)

def deploy_console(**kw):
    def build():
        provider = k8s.Provider("k8s", kubeconfig="{}")
        Console("hubwright-console", ConsoleArgs(image="registry.example.com/hubwright:1", rules=CONSOLE_RULES, **kw),
                provider)
    return record(build, stack="deploy")


def console_container(plan) -> dict:
    [container] = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"]
    return container


def test_the_console_rules_are_reviews_and_reads_only():
    """Sign-in (TokenReviews), what a viewer may do (SubjectAccessReviews), its cache's reads; nothing else: no
    Secrets, no write but the two reviews' create, no impersonation (a viewer's changes go with their own token)."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in CONSOLE_RULES:
        assert set(rule) == {"apiGroups", "resources", "verbs"}  # no resourceNames, no nonResourceURLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs.setdefault((group, resource), set()).update(rule["verbs"])
    assert verbs == {
        ("authentication.k8s.io", "tokenreviews"): {"create"},
        ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
        (GROUP, CLUSTERS): {"get", "list", "watch"},
        (GROUP, STACKRUNS): {"get", "list", "watch"},
        (GROUP, HUBCONFIGS): {"get", "list", "watch"},
        ("", "namespaces"): {"list", "watch"},
        ("", "events"): {"list", "watch"},
    }
    assert not any("secrets" in resource for _, resource in verbs)
    writes = {"create", "update", "patch", "delete", "deletecollection", "impersonate", "escalate", "bind", "*"}
    assert {key for key, allowed in verbs.items() if allowed & writes} == {
        ("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")}


def test_the_console_gets_exactly_its_rules_bound_to_its_own_service_account():
    plan = deploy_console()
    [role] = plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    assert role.inputs["metadata"]["name"] == "hubwright-console"
    assert role.inputs["rules"] == [dict(rule) for rule in CONSOLE_RULES]
    [binding] = plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
    assert binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                         "name": "hubwright-console"}
    assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "hubwright-console",
                                           "namespace": "hubwright-system"}]
    [account] = plan.of_type("kubernetes:core/v1:ServiceAccount")
    assert account.inputs["metadata"]["name"] == "hubwright-console"
    [component] = plan.of_type("hubwright:deploy:Console")
    children = [r for r in plan.resources if r.type.startswith("kubernetes:")]
    assert sorted(r.type.split(":")[-1] for r in children) == [
        "ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"]
    assert all(r.parent == component.urn for r in children)
    [local] = plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")  # the role map only, in its namespace
    assert local.inputs["rules"] == [dict(rule) for rule in CONSOLE_NAMESPACE_RULES]
    assert local.inputs["metadata"]["namespace"] == "hubwright-system"


def test_the_console_runs_one_hardened_pod_behind_a_service_on_port_80():
    plan = deploy_console()
    spec = plan.one("kubernetes:apps/v1:Deployment").inputs["spec"]
    assert spec["replicas"] == 1
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "hubwright-console" and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    container = console_container(plan)
    assert container["image"] == "registry.example.com/hubwright:1"
    args = container["args"]
    assert args[:4] == ["python", "-m", "automation", "console"]
    assert args[args.index("--console-bind") + 1] == "0.0.0.0:8082"
    assert "--secure-cookies" not in args and "--tls-cert" not in args
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert container["ports"] == [{"name": "http", "containerPort": 8082}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    service = plan.one("kubernetes:core/v1:Service").inputs
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert "--secure-cookies" in console_container(deploy_console(secure_cookies=True))["args"]


def test_the_console_reads_the_run_history_as_the_registry_does():
    """The same flags and keys as the registry API (stacks.deployment.history_args): off on the file backend; on S3
    the backend's URL and of the backend Secret only the bucket's keys, optional."""
    container = console_container(deploy_console())
    args = container["args"]
    assert args[args.index("--history-store") + 1] == "off" and "--backend" not in args
    assert container["env"] == []
    url = "s3://state?region=eu-west-1"
    container = console_container(deploy_console(backend_url=url, backend_secret="hubwright-pulumi"))
    args, env = container["args"], {e["name"]: e for e in container["env"]}
    assert args[args.index("--backend") + 1] == url and "--history-store" not in args
    assert set(env) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION"}
    assert all(e["valueFrom"]["secretKeyRef"] == {"name": "hubwright-pulumi", "key": name, "optional": True}
               for name, e in env.items())
    registry = deploy_registry(backend_url=url, backend_secret="hubwright-pulumi")
    [reg] = registry.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"]
    assert reg["env"] == container["env"] and args[args.index("--backend"):] == reg["args"][reg["args"].index(
        "--backend"):]


def test_the_docs_autoscalers_scale_the_rendered_runner_deployment():
    """docs/service.md's HPA and KEDA examples parse and name the runner Deployment the install makes."""
    from pathlib import Path

    import yaml

    from tests.docblocks import section

    text, _ = section((Path(__file__).resolve().parent.parent / "docs" / "service.md").read_text(), "Runners")
    docs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    [runners] = [d for d in by_name(runner_plan(), "apps/v1:Deployment").values()
                 if d["metadata"]["name"] == "hubwright-runner"]
    scalers = {d["kind"]: d for d in docs if "kind" in d}
    assert set(scalers) == {"HorizontalPodAutoscaler", "ScaledObject"}
    hpa, keda = scalers["HorizontalPodAutoscaler"], scalers["ScaledObject"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": runners["metadata"]["name"]}
    assert keda["spec"]["scaleTargetRef"]["name"] == runners["metadata"]["name"]
    assert hpa["metadata"]["namespace"] == keda["metadata"]["namespace"] == runners["metadata"]["namespace"]
    gauges = {"hubwright_stackruns_pending", "hubwright_stackruns_running"}
    assert {m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]} == gauges
    assert gauges <= set(re.findall(r"hubwright_\w+", keda["spec"]["triggers"][0]["metadata"]["query"]))
    [adapter] = [d for d in docs if "rules" in d]
    assert {r["name"]["as"] for r in adapter["rules"]["external"]} == gauges
