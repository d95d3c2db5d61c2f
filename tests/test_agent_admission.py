"""The registry's admission policy as the install renders it (stacks.agent_admission). Pure: what the API server
does with it is tests/test_registry_agent_admission.py's."""
from __future__ import annotations

import pytest

from automation.adapters.files import install
from stacks.agent_admission import API_AUDIENCES, agent_policy
from stacks.deployment import load_values
from stacks.errors import InvalidSpec
from stacks.install import agent_rules


def rendered(values: dict) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in install.render(load_values(values))}


def test_the_install_holds_the_registrys_own_user_to_its_agents_with_the_audiences_it_is_given():
    objs = rendered({"namespace": "hub", "registry": {"tokenAudiences": ["https://oidc.example.com/id/1"]}})
    policy = objs[("ValidatingAdmissionPolicy", "hubwright-registry-agents")]["spec"]
    assert objs[("ValidatingAdmissionPolicyBinding", "hubwright-registry-agents")]["spec"] == {
        "policyName": "hubwright-registry-agents", "validationActions": ["Deny"]}
    assert policy["failurePolicy"] == "Fail"
    user = "system:serviceaccount:hub:hubwright-registry"
    assert policy["matchConditions"] == [{"name": "the-registry",
                                          "expression": f"request.userInfo.username == '{user}'"}]
    assert {r for rule in policy["matchConstraints"]["resourceRules"] for r in rule["resources"]} == {
        "serviceaccounts", "serviceaccounts/token", "roles", "rolebindings"}
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert "'https://oidc.example.com/id/1'" not in variables["hubAudiences"]  # JSON-quoted, as CEL reads it
    assert '["https://oidc.example.com/id/1"]' in variables["hubAudiences"]
    assert "hubwright.io/tenant" in variables["tenant"] and "namespaceObject" in variables["tenant"]
    assert ("ValidatingAdmissionPolicy", "hubwright-registry-agents") not in rendered({"registry": {"enabled": False}})


def test_the_role_rule_is_the_agents_own():
    """The Role the policy allows is stacks.install.agent_rules, field by field: change one, the policy follows."""
    [rule] = agent_rules("c")
    role = {v["name"]: v["expression"] for v in agent_policy("ns", "reg")[0]["spec"]["variables"]}["agentRole"]
    for key, value in rule.items():
        want = "[variables.cluster]" if value == ["c"] else '["' + '", "'.join(value) + '"]'
        assert f".?{key}.orValue([]) == {want}" in role, key
    assert "size(object.?rules.orValue([])) == 1" in role


@pytest.mark.parametrize("audience", ["", "a'b", "x\\y", "two words", "a\nb"])
def test_an_audience_that_would_break_out_of_the_cel_is_refused(audience):
    with pytest.raises(InvalidSpec, match="registry.tokenAudiences"):
        load_values({"registry": {"tokenAudiences": [audience]}})
    with pytest.raises(ValueError):
        agent_policy("ns", "reg", [audience])


def test_no_audience_is_refused_and_the_default_is_the_kubernetes_apis():
    with pytest.raises(InvalidSpec, match="registry.tokenAudiences"):
        load_values({"registry": {"tokenAudiences": []}})
    assert load_values({}).registry.token_audiences == list(API_AUDIENCES)
