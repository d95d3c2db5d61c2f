"""HubStackRuns as the install deploys them, in the real kube-apiserver: the rendered install's RBAC and the
run-author admission policy (stacks/runs/admission.py) applied as `kubectl apply -k` would, and each party acting
with its own token (ServiceAccounts through TokenRequest; the tenant admin is envtest's TENANT_USER bound to the
tenant-admin ClusterRole in its namespace, as the tenant controller binds it).

- only the service's ServiceAccount creates runs: not a cluster-admin, not system:masters, not a runner;
- nobody changes a run's spec once it exists, the service included; the status stays writable by the runners,
  and a status write cannot carry a spec change with it;
- a tenant admin reads the runs of its namespace, and nothing else of them: no write, no status, no other
  namespace, never the run Secrets (the inputs name the peer tenant's account, role and route tables);
- the runner's ServiceAccount can do exactly what a runner does (SubjectAccessReview of every right it holds and
  of the ones next to them that it must not).

A module-own API server (kube_apiserver_alone): the policy matches every HubStackRun, and the shared server's other
tests create runs as the administrator.
"""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.files import install
from doubles.kubectl import Kubectl
from components.install import SERVICE
from stacks.admission import TENANT_ADMIN_CLUSTERROLE
from stacks.deployment import load_values
from stacks.names import GROUP, RUN_FOR_ANNOTATION, RUN_OPERATION_LABEL, RUN_SECRET_LABEL, STACKRUNS, VERSION
from stacks.runs.admission import STACKRUN_POLICY
from stacks.runs.model import secret_name
from tests import deployed
from tests.envtest import ROOT, TENANT_USER, kube_apiserver_alone  # noqa: F401 - fixture
from tests.registry_rbac import eventually, sa_subject, service_account_token
from stacks.times import rfc3339_seconds

RUNNER = f"{SERVICE}-runner"
RBAC = "rbac.authorization.k8s.io"
APPLIED = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
           "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.fixture(scope="module")
def hub(kube_apiserver_alone):  # noqa: F811 - the fixture
    """The rendered install's RBAC and admission objects (executor runners) applied; a tenant namespace with its
    admin; a second tenant's namespace; the service, its runner, and a cluster-admin who is neither, with tokens."""
    suffix = uuid.uuid4().hex[:6]
    system, tenant, other = f"hw-sys-{suffix}", f"acme-{suffix}", f"globex-{suffix}"
    admin = kube_apiserver_alone.api_client()
    values = load_values({"namespace": system, "backend": {"url": "s3://state/hubwright"},
                          "service": {"executor": "runners"}})
    objs = [o for o in install.render(values) if o["kind"] in APPLIED]
    deployed.apply(admin, objs)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    for namespace in (tenant, other):
        core.create_namespace({"metadata": {"name": namespace}})
    # What the tenant controller does for a Tenant's spec.admins (stacks.admission.admins_rolebinding).
    rbac.create_namespaced_role_binding(tenant, {
        "metadata": {"name": "hubwright-tenant-admins"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": TENANT_ADMIN_CLUSTERROLE},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": RBAC}]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": f"root-{suffix}"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [sa_subject(system, "root")]})
    tokens = {who: service_account_token(admin, system, name)
              for who, name in (("service", SERVICE), ("runner", RUNNER), ("root", "root"))}
    users = {who: kube_apiserver_alone.api_client(token) for who, token in tokens.items()}
    users["tenant_admin"] = kube_apiserver_alone.api_client(kube_apiserver_alone.tenant_token)
    env = SimpleNamespace(admin=admin, system=system, tenant=tenant, other=other, suffix=suffix, **users,
                          host=kube_apiserver_alone.host, ca=kube_apiserver_alone.ca_file,
                          tenant_token=kube_apiserver_alone.tenant_token)
    # RBAC and the policy take a moment: the service can list runs, and a cluster-admin's create is refused.
    eventually(lambda: custom(env.service).list_cluster_custom_object(GROUP, VERSION, STACKRUNS, limit=1))
    eventually(lambda: custom(env.tenant_admin).list_namespaced_custom_object(GROUP, VERSION, tenant, STACKRUNS))
    _until_refused(lambda: custom(admin).create_namespaced_custom_object(
        GROUP, VERSION, tenant, STACKRUNS, run_doc(env, tenant, "probe"), dry_run="All"))
    yield env
    for user in users.values():
        user.close()
    admission = client.AdmissionregistrationV1Api(admin)  # leave no policy behind on this server
    admission.delete_validating_admission_policy_binding(STACKRUN_POLICY)
    admission.delete_validating_admission_policy(STACKRUN_POLICY)
    rbac.delete_cluster_role_binding(f"root-{suffix}")
    for namespace in (tenant, other, system):
        core.delete_namespace(namespace)
    admin.close()


def _until_refused(call: Callable[[], Any], timeout: float = 30.0) -> None:
    """Until `call` is refused 403 (a ValidatingAdmissionPolicy is in force a moment after it is written)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
        except ApiException as exc:
            if exc.status == 403:
                return
            raise
        assert time.monotonic() < deadline, "the run-author policy did not take effect"
        time.sleep(0.2)


def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def run_doc(env, namespace: str, name: str, **spec) -> dict:
    now = datetime.now(timezone.utc)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubStackRun",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {RUN_OPERATION_LABEL: spec.get("operation", "up")}},
            "spec": {"stack": f"{namespace}.prod-1", "cluster": "prod-1", "operation": "up",
                     "inputsDigest": "ab" * 16, "inputsSecret": secret_name(namespace, name),
                     "message": "test", "deadline": rfc3339_seconds(now + timedelta(minutes=30)),
                     "requestedBy": f"{SERVICE}-7d9f8b6c5d-x2x4q", **spec}}


def secret_doc(env, namespace: str, name: str) -> dict:
    return {"metadata": {"name": secret_name(namespace, name), "namespace": env.system,
                         "labels": {RUN_SECRET_LABEL: "true", RUN_OPERATION_LABEL: "up"},
                         "annotations": {RUN_FOR_ANNOTATION: f"{namespace}/{name}"}},
            "stringData": {"inputs": json.dumps({"peer": "123456789012", "role": "arn:aws:iam::1:role/x"})}}


@pytest.fixture
def run(hub):
    """A run in the tenant's namespace and its Secret, made by the service's own ServiceAccount."""
    name = f"acme-prod-1-up-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(hub.service).create_namespaced_secret(hub.system, secret_doc(hub, hub.tenant, name))
    made = custom(hub.service).create_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS,
                                                                run_doc(hub, hub.tenant, name))
    yield made
    custom(hub.service).delete_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name)
    client.CoreV1Api(hub.service).delete_namespaced_secret(secret_name(hub.tenant, name), hub.system)


def refused(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as denied:
        call()
    assert denied.value.status == 403, denied.value.body
    return json.loads(denied.value.body)["message"]


def stored(hub, run: dict) -> dict:
    meta = run["metadata"]
    return custom(hub.admin).get_namespaced_custom_object(GROUP, VERSION, meta["namespace"], STACKRUNS, meta["name"])


# --------------------------------------------------------------------------- who creates runs

def test_only_the_services_service_account_creates_runs(hub):
    """system:masters and a cluster-admin are refused by the policy itself (RBAC lets them); a runner and a
    tenant admin have no right to create one in the first place. The service's ServiceAccount creates it."""
    live = client.AdmissionregistrationV1Api(hub.admin).read_validating_admission_policy(STACKRUN_POLICY)
    assert live.spec.failure_policy == "Fail"
    for who in (hub.admin, hub.root):
        message = refused(lambda: custom(who).create_namespaced_custom_object(
            GROUP, VERSION, hub.tenant, STACKRUNS, run_doc(hub, hub.tenant, "forged")))
        assert f"only the hubwright service (system:serviceaccount:{hub.system}:{SERVICE}) creates" in message
    for who in (hub.runner, hub.tenant_admin):
        message = refused(lambda: custom(who).create_namespaced_custom_object(
            GROUP, VERSION, hub.tenant, STACKRUNS, run_doc(hub, hub.tenant, "forged")))
        assert "cannot create resource" in message  # RBAC: neither holds create
    assert custom(hub.admin).list_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS)["items"] == []

    name = f"transit-up-{hub.suffix}"
    made = custom(hub.service).create_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS,
                                                                run_doc(hub, hub.other, name))
    assert made["metadata"]["generation"] == 1
    custom(hub.service).delete_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS, name)


def test_nobody_changes_a_runs_spec_once_it_exists(hub, run):
    """A spec edited after creation would run other inputs under the service's name: refused to everyone, the
    administrators included (the service holds no update right on runs at all); metadata stays editable."""
    name = run["metadata"]["name"]
    for who in (hub.admin, hub.root):
        message = refused(lambda: custom(who).patch_namespaced_custom_object(
            GROUP, VERSION, hub.tenant, STACKRUNS, name, {"spec": {"stack": f"{hub.other}.victim"}}))
        assert "the spec of a hubstackruns object never changes" in message
        whole = stored(hub, run)
        whole["spec"]["inputsDigest"] = "cd" * 16
        message = refused(lambda: custom(who).replace_namespaced_custom_object(
            GROUP, VERSION, hub.tenant, STACKRUNS, name, whole))
        assert "never changes" in message
    for who in (hub.service, hub.runner, hub.tenant_admin):
        message = refused(lambda: custom(who).patch_namespaced_custom_object(
            GROUP, VERSION, hub.tenant, STACKRUNS, name, {"spec": {"refresh": True}}))
        assert "cannot patch resource" in message
    labelled = custom(hub.admin).patch_namespaced_custom_object(
        GROUP, VERSION, hub.tenant, STACKRUNS, name, {"metadata": {"labels": {"team": "payments"}}})
    assert labelled["metadata"]["labels"]["team"] == "payments"
    after = stored(hub, run)
    assert after["spec"] == run["spec"] and after["metadata"]["generation"] == 1


# --------------------------------------------------------------------------- the runner

def test_the_runner_writes_only_the_status_and_a_status_write_cannot_change_the_spec(hub, run):
    name = run["metadata"]["name"]
    runner = custom(hub.runner)
    now = rfc3339_seconds(datetime.now(timezone.utc))
    seen = runner.list_cluster_custom_object(GROUP, VERSION, STACKRUNS)["items"]
    assert name in {r["metadata"]["name"] for r in seen}
    current = runner.get_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name)
    claim = {"holder": f"{RUNNER}-5c4d8-abcde", "acquireTime": now, "renewTime": now, "ttlSeconds": 30}
    # The claim: an update of the status at the run's resourceVersion, with a forged spec riding along.
    body = {**current, "spec": {**current["spec"], "stack": f"{hub.other}.victim"},
            "status": {"phase": "Running", "runner": claim["holder"], "claim": claim}}
    claimed = runner.replace_namespaced_custom_object_status(GROUP, VERSION, hub.tenant, STACKRUNS, name, body)
    assert claimed["status"]["claim"]["holder"] == claim["holder"]
    assert claimed["spec"] == run["spec"]  # the status subresource ignores the spec
    # A second runner that read the same version loses: optimistic concurrency is the API server's.
    with pytest.raises(ApiException) as conflict:
        runner.replace_namespaced_custom_object_status(GROUP, VERSION, hub.tenant, STACKRUNS, name, current)
    assert conflict.value.status == 409
    done = runner.patch_namespaced_custom_object_status(
        GROUP, VERSION, hub.tenant, STACKRUNS, name,
        {"status": {"phase": "Succeeded", "summary": "1 to create", "changes": {"create": 1}}})
    assert done["status"]["phase"] == "Succeeded"
    # Its result goes into the run's Secret, in the service's namespace.
    core = client.CoreV1Api(hub.runner)
    secret = secret_name(hub.tenant, name)
    assert core.read_namespaced_secret(secret, hub.system).metadata.annotations[RUN_FOR_ANNOTATION] == \
        f"{hub.tenant}/{name}"
    core.patch_namespaced_secret(secret, hub.system, {"stringData": {"result": "{}"}})
    refusals = [
        lambda: runner.delete_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name),
        lambda: core.list_namespaced_secret(hub.system),
        lambda: core.read_namespaced_secret("default-token", hub.tenant),
        lambda: core.create_namespaced_secret(hub.system, {"metadata": {"name": f"x-{hub.suffix}"}}),
        lambda: core.delete_namespaced_secret(secret, hub.system),
        lambda: runner.list_cluster_custom_object(GROUP, VERSION, "hubclusters"),
        lambda: core.create_namespaced_event(hub.tenant, {"metadata": {"name": "e"}, "involvedObject": {}}),
    ]
    for attempt in refusals:
        refused(attempt)


def access(api_client: client.ApiClient, user: str, verb: str, resource: str, namespace: str | None = None,
           subresource: str = "", group: str = GROUP) -> bool:
    """SubjectAccessReview: whether `user` may `verb` the resource (the API server's own RBAC answer)."""
    review = client.AuthorizationV1Api(api_client).create_subject_access_review({
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"group": group, "resource": resource, "subresource": subresource,
                                        "verb": verb, "namespace": namespace or ""}}})
    return bool(review.status.allowed)


def test_the_rendered_install_gives_the_runner_exactly_what_it_needs(hub):
    user = f"system:serviceaccount:{hub.system}:{RUNNER}"
    wanted = {
        ("get", STACKRUNS, hub.tenant, "", GROUP), ("list", STACKRUNS, None, "", GROUP),
        ("watch", STACKRUNS, None, "", GROUP), ("update", STACKRUNS, hub.other, "status", GROUP),
        ("patch", STACKRUNS, hub.tenant, "status", GROUP),
        ("get", "secrets", hub.system, "", ""), ("patch", "secrets", hub.system, "", ""),
    }
    not_wanted = {
        ("create", STACKRUNS, hub.tenant, "", GROUP), ("update", STACKRUNS, hub.tenant, "", GROUP),
        ("patch", STACKRUNS, hub.tenant, "", GROUP), ("delete", STACKRUNS, hub.tenant, "", GROUP),
        ("deletecollection", STACKRUNS, hub.tenant, "", GROUP),
        ("list", "secrets", hub.system, "", ""), ("watch", "secrets", hub.system, "", ""),
        ("create", "secrets", hub.system, "", ""), ("delete", "secrets", hub.system, "", ""),
        ("get", "secrets", hub.tenant, "", ""), ("patch", "secrets", hub.tenant, "", ""),
        ("get", "hubclusters", hub.tenant, "", GROUP), ("patch", "hubclusters", hub.tenant, "status", GROUP),
        ("get", "hubconfigs", None, "", GROUP), ("create", "events", hub.tenant, "", ""),
        ("get", "leases", hub.system, "", "coordination.k8s.io"), ("get", "configmaps", hub.system, "", ""),
        ("create", "serviceaccounts/token", hub.system, "", ""), ("create", "pods", hub.system, "", ""),
    }
    answers = {args: access(hub.admin, user, *args[:3], subresource=args[3], group=args[4])
               for args in wanted | not_wanted}
    assert {args for args, allowed in answers.items() if allowed} == wanted


def test_the_rendered_install_gives_the_service_runs_and_their_secrets_in_its_namespace_only(hub):
    user = f"system:serviceaccount:{hub.system}:{SERVICE}"
    for verb in ("create", "delete", "list", "watch", "get"):
        assert access(hub.admin, user, verb, STACKRUNS, hub.tenant)
    assert access(hub.admin, user, "update", STACKRUNS, hub.tenant, subresource="status")
    assert not access(hub.admin, user, "update", STACKRUNS, hub.tenant)
    assert not access(hub.admin, user, "patch", STACKRUNS, hub.tenant)
    for verb in ("create", "delete", "list", "get"):
        assert access(hub.admin, user, verb, "secrets", hub.system, group="")
        assert not access(hub.admin, user, verb, "secrets", hub.tenant, group="")
    assert not access(hub.admin, user, "patch", "secrets", hub.system, group="")


# --------------------------------------------------------------------------- the tenant

def test_a_tenant_admin_reads_its_namespaces_runs_and_nothing_else_of_them(hub, run):
    name = run["metadata"]["name"]
    tenant = custom(hub.tenant_admin)
    listed = tenant.list_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS)["items"]
    assert [r["metadata"]["name"] for r in listed] == [name]
    got = tenant.get_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name)
    assert got["spec"]["operation"] == "up" and "123456789012" not in json.dumps(got)  # the inputs: in the Secret
    theirs = f"globex-prod-1-up-{hub.suffix}"
    client.CoreV1Api(hub.service).create_namespaced_secret(hub.system, secret_doc(hub, hub.other, theirs))
    custom(hub.service).create_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS,
                                                         run_doc(hub, hub.other, theirs))
    core = client.CoreV1Api(hub.tenant_admin)
    status = {"status": {"phase": "Succeeded", "summary": "no changes"}}
    try:
        refusals = [
            lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS,
                                                           run_doc(hub, hub.tenant, "mine")),
            lambda: tenant.patch_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name,
                                                          {"metadata": {"labels": {"x": "y"}}}),
            lambda: tenant.replace_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name, got),
            lambda: tenant.patch_namespaced_custom_object_status(GROUP, VERSION, hub.tenant, STACKRUNS, name,
                                                                 status),
            lambda: tenant.replace_namespaced_custom_object_status(GROUP, VERSION, hub.tenant, STACKRUNS, name,
                                                                   {**got, **status}),
            lambda: tenant.delete_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS, name),
            lambda: tenant.delete_collection_namespaced_custom_object(GROUP, VERSION, hub.tenant, STACKRUNS),
            lambda: tenant.list_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS),
            lambda: tenant.get_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS, theirs),
            lambda: tenant.list_cluster_custom_object(GROUP, VERSION, STACKRUNS),
            lambda: core.read_namespaced_secret(secret_name(hub.tenant, name), hub.system),
            lambda: core.list_namespaced_secret(hub.system),
        ]
        for attempt in refusals:
            refused(attempt)
    finally:
        custom(hub.service).delete_namespaced_custom_object(GROUP, VERSION, hub.other, STACKRUNS, theirs)
        client.CoreV1Api(hub.service).delete_namespaced_secret(secret_name(hub.other, theirs), hub.system)
    assert stored(hub, run)["spec"] == run["spec"] and "status" not in stored(hub, run)


# --------------------------------------------------------------------------- kubectl get hubstackruns

def doc_sample() -> list[str]:
    """docs/service.md's `kubectl get hubstackruns -n acme` output, as lines (header first)."""
    text = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    found = re.search(r"```\n\$ kubectl get hubstackruns -n acme\n(.*?)```", text, re.S)
    assert found, "docs/service.md lost its kubectl get hubstackruns sample"
    return found[1].rstrip("\n").split("\n")


def table(lines: list[str]) -> list[dict[str, str]]:
    """kubectl's columns, cut where the header's words start (a cell may be empty)."""
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    return [{name: row[start:end].strip() for name, start, end in zip(names, starts, [*starts[1:], None])}
            for row in lines[1:]]


def test_kubectl_get_hubstackruns_prints_the_history_the_docs_show(hub, tmp_path):
    """The real kubectl, as the tenant admin: the documented sample's columns and every cell but AGE, from runs
    the service created and a runner finished."""
    sample = table(doc_sample())
    namespace = f"acme-{hub.suffix}-h"
    client.CoreV1Api(hub.admin).create_namespace({"metadata": {"name": namespace}})
    client.RbacAuthorizationV1Api(hub.admin).create_namespaced_role_binding(namespace, {
        "metadata": {"name": "hubwright-tenant-admins"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": TENANT_ADMIN_CLUSTERROLE},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": RBAC}]})
    try:
        for row in sample:
            spec = {"operation": row["OPERATION"], "cluster": row["CLUSTER"],
                    "stack": f"{namespace}.{row['CLUSTER']}", "cause": {"kind": row["CAUSE"], "message": "as shown"}}
            if row["OPERATION"] == "destroy":
                spec["inputsDigest"] = None
            custom(hub.service).create_namespaced_custom_object(
                GROUP, VERSION, namespace, STACKRUNS,
                {**run_doc(hub, namespace, row["NAME"]),
                 "spec": {k: v for k, v in {**run_doc(hub, namespace, row["NAME"])["spec"], **spec}.items()
                          if v is not None}})
            status = {"phase": row["PHASE"], **({"summary": row["CHANGES"]} if row["CHANGES"] else {})}
            custom(hub.runner).patch_namespaced_custom_object_status(GROUP, VERSION, namespace, STACKRUNS,
                                                                     row["NAME"], {"status": status})
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "tenant",
            "clusters": [{"name": "envtest", "cluster": {"server": hub.host, "certificate-authority": hub.ca}}],
            "users": [{"name": "tenant", "user": {"token": hub.tenant_token}}],
            "contexts": [{"name": "tenant", "context": {"cluster": "envtest", "user": "tenant"}}]}))
        kubectl = Kubectl(kubeconfig, tmp_path / "cache")
        done = kubectl("get", "hubstackruns", "-n", namespace)
        lines = done.stdout.rstrip("\n").split("\n")
        assert lines[0].split() == doc_sample()[0].split()
        printed = sorted(table(lines), key=lambda row: row["NAME"])
        without_age = lambda rows: [{k: v for k, v in row.items() if k != "AGE"} for row in rows]  # noqa: E731
        assert without_age(printed) == without_age(sorted(sample, key=lambda row: row["NAME"]))
        wide = kubectl("get", "hwrun", "-n", namespace, "-o", "wide")
        assert {"REASON", "WHY", "RUNNER", "REFRESH"} <= set(wide.stdout.split("\n")[0].split())
    finally:
        client.CoreV1Api(hub.admin).delete_namespace(namespace)
