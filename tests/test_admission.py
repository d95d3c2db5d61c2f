"""stacks.admission without a server: which namespace a Tenant may take, how it is marked, who administers it, and
what the deletion-protection policies match. (The policies and the controller are proven against the real
kube-apiserver in tests/test_admission_envtest.py, tests/test_deletion_protection_envtest.py and
tests/test_tenants_envtest.py: their CEL compiles and evaluates there.)"""
from __future__ import annotations

import pytest

from stacks.admission import (CLUSTER_PROTECTION_POLICY, SOURCE_PROTECTION_POLICY, TENANT_ADMIN_CLUSTERROLE,
                              adoption_refusal, admins_rolebinding, admission_manifests, cluster_protection_policy,
                              namespace_metadata, source_protection_policy, tenant_admin_clusterrole,
                              tenant_controller_rules, parse_tenant, tenant_quota, tenant_refusal)
from stacks.names import (BOOTSTRAP_SUBRESOURCE, DEFAULT_REGION_ANNOTATION, DELETION_PROTECTION_ANNOTATION,
                          FACTS_SUBRESOURCE, OWNER_ACCOUNT_ANNOTATION, TENANT_ANNOTATION, TENANT_LABEL)
from stacks.sources.families import SOURCES


def tenant(name: str = "t-one", **spec):
    parsed, problem = parse_tenant({"apiVersion": "hubwright.io/v1alpha1", "kind": "HubTenant",
                                 "metadata": {"name": name}, "spec": spec})
    assert problem is None
    return parsed


def ns(name: str, labels=None, annotations=None, **meta):
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}, **meta}}


@pytest.mark.parametrize("namespace, spec, refused", [
    (None, {}, None),  # made for it
    (ns("t-one", {TENANT_LABEL: "t-one"}), {}, None),  # made or adopted before
    (ns("t-one", annotations={TENANT_ANNOTATION: "t-one"}), {}, None),  # set aside by the hub administrator
    (ns("legacy"), {"namespace": "legacy"}, None),  # named by a cluster administrator
    (ns("t-one"), {}, "exists and is not this Tenant's"),  # merely named like it
    (ns("legacy", {TENANT_LABEL: "t-two"}), {"namespace": "legacy"}, "belongs to Tenant t-two"),
    (ns("legacy", annotations={TENANT_ANNOTATION: "t-two"}), {"namespace": "legacy"}, "set aside for Tenant t-two"),
    (ns("legacy", deletionTimestamp="2026-01-01T00:00:00Z"), {"namespace": "legacy"}, "being deleted"),
])
def test_which_namespace_a_tenant_may_take(namespace, spec, refused):
    why = adoption_refusal(tenant(**spec), namespace)
    assert (why is None) if refused is None else (refused in why)


HUB = "111111111111"
OWNED = {OWNER_ACCOUNT_ANNOTATION: "222222222222"}


@pytest.mark.parametrize("namespace, spec, hub, reason", [
    (None, {"accountID": HUB}, HUB, "HubAccount"),  # never the hub account, not even for a new namespace
    (ns("t-one", {TENANT_LABEL: "t-one"}, OWNED), {"accountID": HUB}, HUB, "HubAccount"),
    (None, {"accountID": "222222222222"}, None, "HubAccountUnknown"),  # cannot be told apart yet: waits
    (None, {}, None, None),  # no account: nothing to check
    (ns("legacy", annotations=OWNED), {"namespace": "legacy", "accountID": "444444444444"}, HUB,
     "OwnerAccountDiffers"),
    (ns("t-one", annotations={**OWNED, TENANT_ANNOTATION: "t-one"}), {"accountID": "444444444444"}, HUB,
     "OwnerAccountDiffers"),
    (ns("legacy", annotations=OWNED), {"namespace": "legacy", "accountID": "222222222222"}, HUB, None),  # agree
    (ns("legacy", annotations=OWNED), {"namespace": "legacy"}, HUB, None),  # the Tenant sets none: kept
    (ns("t-one", {TENANT_LABEL: "t-one"}, OWNED), {"accountID": "444444444444"}, HUB, None),  # its own: follows
    (ns("t-one"), {"accountID": "222222222222"}, HUB, "NamespaceNotAdopted"),
])
def test_what_a_tenant_may_never_take_is_refused_with_a_reason(namespace, spec, hub, reason):
    refusal = tenant_refusal(tenant(**spec), namespace, hub)
    assert (refusal is None) if reason is None else (refusal[0] == reason and refusal[1])


def test_the_tenant_quota_is_a_resourcequota_owned_by_the_tenant():
    assert tenant_quota(tenant(), "uid-1") is None
    made = tenant_quota(tenant(quota={"maxClusters": 5}, namespace="legacy"), "uid-1")
    assert made["metadata"]["namespace"] == "legacy" and made["spec"]["hard"] == {"count/hubclusters.hubwright.io": "5"}
    assert made["metadata"]["ownerReferences"] == [{"apiVersion": "hubwright.io/v1alpha1", "kind": "HubTenant",
                                                    "name": "t-one", "uid": "uid-1", "controller": True}]


def test_the_namespace_carries_the_account_and_region_only_when_the_tenant_sets_them():
    assert namespace_metadata(tenant()) == {"labels": {TENANT_LABEL: "t-one"},
                                            "annotations": {TENANT_ANNOTATION: "t-one"}}
    marks = namespace_metadata(tenant(accountID="222222222222", defaultRegion="eu-west-1"))["annotations"]
    assert marks[OWNER_ACCOUNT_ANNOTATION] == "222222222222" and marks[DEFAULT_REGION_ANNOTATION] == "eu-west-1"


def test_the_admins_rolebinding_binds_the_tenant_admin_role_to_the_spec_admins():
    assert admins_rolebinding(tenant()) is None
    binding = admins_rolebinding(tenant(namespace="legacy", admins=[
        {"kind": "User", "name": "bob"}, {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]))
    assert binding["metadata"]["namespace"] == "legacy"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": TENANT_ADMIN_CLUSTERROLE}
    assert binding["subjects"] == [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"},
                                   {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]


def test_an_invalid_tenant_is_named_by_its_field():
    parsed, problem = parse_tenant({"apiVersion": "hubwright.io/v1alpha1", "kind": "HubTenant", "metadata": {"name": "t"},
                                 "spec": {"accountID": "12", "admins": [{"kind": "User", "name": "b", "namespace": "x"}]}})
    assert parsed is None and "spec.accountID" in problem and "spec.admins[0]" in problem


def test_the_roles_are_least():
    rules = tenant_admin_clusterrole()["rules"]
    resources = {r for rule in rules for r in rule["resources"]}
    assert {FACTS_SUBRESOURCE, BOOTSTRAP_SUBRESOURCE} <= resources and "hubclusters/status" not in resources
    controller = tenant_controller_rules()
    assert not any("*" in rule["verbs"] or "escalate" in rule["verbs"] for rule in controller)
    bind = [rule for rule in controller if "bind" in rule["verbs"]]
    assert bind == [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                     "resourceNames": [TENANT_ADMIN_CLUSTERROLE], "verbs": ["bind"]}]
    assert not any("delete" in rule["verbs"] for rule in controller if "namespaces" in rule["resources"])
    # The admins' reader roles (tenant_reader): created, never changed or deleted (the garbage collector does)
    cluster_wide = {r: set(rule["verbs"]) for rule in controller for r in rule["resources"]
                    if r in ("clusterroles", "clusterrolebindings") and "bind" not in rule["verbs"]}
    assert cluster_wide == {"clusterroles": {"get", "create"}, "clusterrolebindings": {"get", "create", "patch"}}


def test_every_policy_comes_with_its_binding_and_a_fresh_copy():
    manifests = admission_manifests()
    assert [m["kind"] for m in manifests] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 4
    assert all(m["metadata"]["name"].startswith("hubwright-") for m in manifests)
    manifests[0]["spec"].clear()
    assert admission_manifests()[0]["spec"]


# --------------------------------------------------------------------------- deletion protection

def _rules(policy) -> list[tuple[str, str, str]]:
    return [(group, resource, rule["scope"]) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
            for group in rule["apiGroups"] for resource in rule["resources"]]


def test_the_deletion_protection_policies_match_only_deletes_of_protected_clusters_and_sources():
    cluster, source = cluster_protection_policy(), source_protection_policy()
    assert _rules(cluster) == [("hubwright.io", "hubclusters", "Namespaced")]
    assert _rules(source) == [("cluster.x-k8s.io", "clusters", "Namespaced"),
                              ("hive.openshift.io", "clusterdeployments", "Namespaced"),
                              ("hypershift.openshift.io", "hostedclusters", "Namespaced")]
    assert _rules(source) == [(k.group, k.plural, "Namespaced") for k in SOURCES]  # every family's, from its table
    for policy in (cluster, source):
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert {tuple(r["operations"]) for r in spec["matchConstraints"]["resourceRules"]} == {("DELETE",)}
        assert all(r["apiVersions"] == ["*"] for r in spec["matchConstraints"]["resourceRules"])
        # Only objects carrying the annotation with the value "true" match; on a DELETE `object` is null: the
        # stored object is oldObject, read with optionals (no annotations is no match, never an error).
        [condition] = spec["matchConditions"]
        expression = condition["expression"]
        assert f"oldObject.metadata.?annotations[?'{DELETION_PROTECTION_ANNOTATION}'].orValue('') == 'true'" \
            in expression and "oldObject != null" in expression
        assert "object." not in expression.replace("oldObject.", "")
        [validation] = spec["validations"]
        assert validation["reason"] == "Forbidden" and validation["expression"] == f"!({expression})"
        said = validation["messageExpression"]
        assert DELETION_PROTECTION_ANNOTATION in said and "kubectl annotate " in said
        assert f"{DELETION_PROTECTION_ANNOTATION}-" in said  # how to lift it
    assert "kubectl annotate hubcluster -n ' + oldObject.metadata.namespace" in cluster["spec"]["validations"][0][
        "messageExpression"]
    assert "request.resource.resource + '.' + request.resource.group" in source["spec"]["validations"][0][
        "messageExpression"]  # kubectl annotate <plural>.<group>, whichever source kind


def test_the_deletion_protection_policies_are_installed_bound_to_deny():
    manifests = {(m["kind"], m["metadata"]["name"]): m for m in admission_manifests()}
    for name in (CLUSTER_PROTECTION_POLICY, SOURCE_PROTECTION_POLICY):
        assert ("ValidatingAdmissionPolicy", name) in manifests
        binding = manifests[("ValidatingAdmissionPolicyBinding", name)]["spec"]
        assert binding == {"policyName": name, "validationActions": ["Deny"]}  # every namespace


def test_a_tenant_admin_may_protect_and_unprotect_its_clusters():
    """Setting and lifting the annotation is an update of the HubCluster: the tenant-admin role has it."""
    rules = tenant_admin_clusterrole()["rules"]
    verbs = {verb for rule in rules if "hubclusters" in rule["resources"] for verb in rule["verbs"]}
    assert {"update", "patch", "delete"} <= verbs
