"""The HubCluster admission policy (stacks.cluster_policy) in the real kube-apiserver, against the Python rules it
renders (stacks.tenancy): for the same namespace and cluster, the API server refuses at `apply` exactly when the
service would refuse for that rule, in the same words; what needs the fleet passes through; an update that does
not touch the judged fields (a finalizer, a label) is never refused, so a cluster is never stuck.

The trial: a HubCluster whose account is not its namespace's owner was accepted and went Stalled minutes later.
"""
from __future__ import annotations

import copy
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.factories import cluster_doc, hub
from doubles.service_env import wait_until
from stacks.cluster_policy import CLUSTER_POLICY, cluster_policy_manifests
from stacks.errors import InvalidSpec
from stacks.model.loading import parse
from stacks.names import ALLOWED_DOMAINS_ANNOTATION, CLUSTERS, GROUP, OWNER_ACCOUNT_ANNOTATION, VERSION
from stacks.tenancy import ACCOUNT_MISMATCH, DOMAIN_NOT_ALLOWED, Owners, host_errors
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def api(kube_apiserver):  # noqa: F811 - the fixture
    """The policy, bound (for this module) to the namespaces labelled with its run's label: the API server is
    shared with tests that create refused clusters on purpose, for the service to stall."""
    admin = kube_apiserver.api_client()
    label = f"policy-{uuid.uuid4().hex[:6]}"
    policy, binding = copy.deepcopy(cluster_policy_manifests())
    binding["metadata"]["name"] = binding["metadata"]["name"] + "-" + label
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"hubwright-test": label}}}
    admission = client.AdmissionregistrationV1Api(admin)
    try:
        admission.create_validating_admission_policy(policy)
    except ApiException as exc:
        if exc.status != 409:
            raise
        admission.replace_validating_admission_policy(
            CLUSTER_POLICY, {**policy, "metadata": {**policy["metadata"], "resourceVersion":
                             admission.read_validating_admission_policy(CLUSTER_POLICY).metadata.resource_version}})
    admission.create_validating_admission_policy_binding(binding)
    yield admin, label
    admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    admin.close()


def namespace(api, annotations: dict[str, str]) -> str:
    admin, label = api
    name = f"cp-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name, "labels": {"hubwright-test": label},
                                                           "annotations": annotations}})
    return name


def create(api, doc: dict) -> str | None:
    """None when the API server stored it, else its refusal's message."""
    try:
        client.CustomObjectsApi(api[0]).create_namespaced_custom_object(GROUP, VERSION, doc["metadata"]["namespace"],
                                                                        CLUSTERS, doc)
        return None
    except ApiException as exc:
        if exc.status not in (403, 422):
            raise
        return exc.body


def python_refusal(doc: dict, annotations: dict[str, str]) -> str | None:
    """The service's refusal for the two rules the policy renders (others need the fleet: not the policy's)."""
    cluster = parse(doc)
    if not cluster.spec.provisioned:
        return None  # registered only: no account, no API host
    ns = doc["metadata"]["namespace"]
    try:
        Owners.of(hub(), [cluster], {ns: annotations}).account(cluster)
    except InvalidSpec as exc:
        if exc.reason == ACCOUNT_MISMATCH:
            return str(exc.errors[0])
    refused = host_errors(cluster, hub(), annotations)
    if refused is not None and refused.reason == DOMAIN_NOT_ALLOWED and ALLOWED_DOMAINS_ANNOTATION in annotations:
        return str(refused.errors[0])
    return None


CASES = [
    ("the owner's account", {OWNER_ACCOUNT_ANNOTATION: "222222222222"}, {}),
    ("another account", {OWNER_ACCOUNT_ANNOTATION: "222222222222"}, {"accountID": "333333333333"}),
    ("no owner: the fleet decides", {}, {"accountID": "333333333333"}),
    ("an owner that is not an account", {OWNER_ACCOUNT_ANNOTATION: "acme"}, {"accountID": "333333333333"}),
    ("registered only", {OWNER_ACCOUNT_ANNOTATION: "222222222222"}, None),
    ("under an allowed domain", {OWNER_ACCOUNT_ANNOTATION: "222222222222",
                                 ALLOWED_DOMAINS_ANNOTATION: "example.com"}, {}),
    ("outside the allowed domains", {OWNER_ACCOUNT_ANNOTATION: "222222222222",
                                     ALLOWED_DOMAINS_ANNOTATION: "acme.example.org, , Corp.Example.NET"},
     {"apiURL": "https://api.evil.example.com:6443"}),
    ("the domain itself, any case", {OWNER_ACCOUNT_ANNOTATION: "222222222222",
                                     ALLOWED_DOMAINS_ANNOTATION: "Example.com"},
     {"apiURL": "https://EXAMPLE.com:6443"}),
    ("a suffix is not a domain", {OWNER_ACCOUNT_ANNOTATION: "222222222222", ALLOWED_DOMAINS_ANNOTATION: "ample.com"},
     {"apiURL": "https://api.example.com:6443"}),
    ("both wrong", {OWNER_ACCOUNT_ANNOTATION: "222222222222", ALLOWED_DOMAINS_ANNOTATION: "acme.example.org"},
     {"accountID": "444444444444"}),
]


def wait_for_the_policy(api) -> None:
    """The API server applies a new policy a moment after it is stored: wait until it refuses a known-bad cluster."""
    ns = namespace(api, {OWNER_ACCOUNT_ANNOTATION: "222222222222"})
    names = iter(range(1000))
    wait_until(lambda: create(api, cluster_doc(f"probe-{next(names)}", ns, accountID="333333333333")) is not None,
               60, what="the policy to take effect")


@pytest.mark.parametrize("case, annotations, spec", CASES, ids=[c[0] for c in CASES])
def test_the_api_server_refuses_exactly_what_the_service_would_in_its_words(api, case, annotations, spec):
    wait_for_the_policy(api)
    ns = namespace(api, annotations)
    doc = cluster_doc("prod-1", ns, **(spec or {}))
    if spec is None:  # registered only: no AWS part
        doc["spec"] = {}
    expected, answered = python_refusal(doc, annotations), create(api, doc)
    if expected is None:
        assert answered is None, answered
    else:
        assert answered is not None and expected in answered, (expected, answered)
        assert "denied request" in answered


def test_a_cluster_whose_namespace_changed_owner_since_can_still_be_updated_and_deleted(api):
    """Only a change of spec.accountID is judged: the service's finalizer edit of a cluster now refused (Stalled)
    must go through, or its delete would hang."""
    wait_for_the_policy(api)
    ns = namespace(api, {OWNER_ACCOUNT_ANNOTATION: "222222222222"})
    assert create(api, cluster_doc("prod-1", ns)) is None
    core, custom = client.CoreV1Api(api[0]), client.CustomObjectsApi(api[0])
    core.patch_namespace(ns, {"metadata": {"annotations": {OWNER_ACCOUNT_ANNOTATION: "555555555555"}}})
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, "prod-1",
                                          {"metadata": {"finalizers": ["hubwright.io/stack"], "labels": {"a": "b"}}})
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, "prod-1", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as refused:  # but moving it to another account than the new owner is judged
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, "prod-1",
                                              {"spec": {"accountID": "666666666666"}})
    assert "account 666666666666 is not the namespace's owner account 555555555555" in refused.value.body
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, "prod-1")
