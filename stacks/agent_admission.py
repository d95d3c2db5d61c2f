"""What the registry API's own ServiceAccount may write: its agents, and nothing else (docs/registry.md). Pure.

The registry makes each cluster's agent (automation.adapters.kube.agent): a ServiceAccount, Role and RoleBinding
`hubwright-agent-<cluster>` in the cluster's tenant namespace, and TokenRequests for that ServiceAccount. RBAC can
only grant that cluster-wide (`resourceNames` take no prefix and no namespace label), so its ClusterRole
(stacks.install.API_RULES) alone would let whoever holds its token mint a token, for any audience, for any
ServiceAccount: `sts.amazonaws.com` for the service's, whose IRSA role assumes every tenant account's.

The ValidatingAdmissionPolicy `<registry>-agents` holds it to an allow-list, whatever its RBAC says. For the
registry's user alone (matchConditions), on serviceaccounts, serviceaccounts/token, roles and rolebindings:

- the namespace carries the tenant controller's label (TENANT_LABEL, `namespaceObject`): a tenant's;
- the name is an agent's (`hubwright-agent-<cluster>`; for a TokenRequest, the ServiceAccount's);
- a TokenRequest's audiences are the hub API server's own (`audiences`: what it defaults an empty request to,
  which the registry's requests are; the API server fills them in before validating admission);
- a Role holds exactly stacks.install.agent_rules(<cluster>), and a RoleBinding binds the Role of its own name
  to the ServiceAccount of its own name in its own namespace, so the registry cannot hand its own rights
  (a RoleBinding to its ClusterRole needs no `bind`) to anyone.

failurePolicy Fail: a rule that cannot be evaluated refuses. `get` is not admission's: the registry still reads
any ServiceAccount (a read gives no token).
"""
from __future__ import annotations

import json
import re
from typing import Any

from stacks.install import RBAC, agent_rules
from stacks.names import TENANT_LABEL, agent_name

ADMISSION_API = "admissionregistration.k8s.io/v1"
AGENT_PREFIX = agent_name("")  # "hubwright-agent-"
# The audiences kube-apiserver takes as its own (--api-audiences, else its --service-account-issuer): EKS's is
# https://kubernetes.default.svc, kubeadm's, kind's and k3s's https://kubernetes.default.svc.cluster.local. Another
# cluster's are set in the install value registry.tokenAudiences.
API_AUDIENCES = ("https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local")
_CLUSTER = "\x00cluster\x00"  # stands for the cluster's name in agent_rules while they become CEL
# An audience is written into the policy's CEL: no quote, backslash, space or control character can be one.
AUDIENCE = re.compile(r"[A-Za-z0-9._~:/?#@!$&()*+,;=%\[\]-]{1,253}")


def policy_name(service_account: str) -> str:
    return f"{service_account}-agents"


def _cel(value: Any) -> str:
    """A CEL literal of a rule's list: strings quoted (JSON's quoting is CEL's), the cluster's name a variable."""
    if isinstance(value, list):
        return "[" + ", ".join(_cel(item) for item in value) + "]"
    return "variables.cluster" if value == _CLUSTER else json.dumps(value)


def _role_is_the_agents() -> str:
    """CEL: the Role's rules are exactly agent_rules(<cluster>), field by field (absent reads as [])."""
    wanted = agent_rules(_CLUSTER)
    fields = ("apiGroups", "resources", "resourceNames", "verbs", "nonResourceURLs")
    rules = "object.?rules.orValue([])"
    checks = [f"size({rules}) == {len(wanted)}"]
    for i, rule in enumerate(wanted):
        checks += [f"{rules}[{i}].?{key}.orValue([]) == {_cel(rule.get(key, []))}" for key in fields]
    return " && ".join(checks)


_BINDING_IS_THE_AGENTS = (
    f"object.roleRef.apiGroup == '{RBAC}' && object.roleRef.kind == 'Role' && object.roleRef.name == variables.name"
    " && size(object.?subjects.orValue([])) == 1 && object.subjects[0].kind == 'ServiceAccount'"
    " && object.subjects[0].name == variables.name && object.subjects[0].?namespace.orValue('') == request.namespace")


def agent_policy(namespace: str, service_account: str,
                 audiences: tuple[str, ...] | list[str] = API_AUDIENCES) -> list[dict[str, Any]]:
    """The policy and its binding for the registry ServiceAccount `namespace/service_account`."""
    bad = [audience for audience in audiences if not AUDIENCE.fullmatch(audience)]
    if bad or not audiences:
        raise ValueError(f"token audiences must be one or more of letters, digits and URL punctuation: {bad}")
    user = f"system:serviceaccount:{namespace}:{service_account}"
    what = "request.resource.resource + (variables.subresource == '' ? '' : '/' + variables.subresource)"
    checks = {  # a variable each (true: allowed), and what the refusal says when it is false
        "tenant": (f"namespaceObject.?metadata.?labels[?'{TENANT_LABEL}'].orValue('') != ''",
                   f"'namespace ' + request.namespace + ' is no tenant\\'s (it has no {TENANT_LABEL} label)'"),
        "agent": ("variables.cluster != ''",
                  f"{what} + ' ' + variables.name + ' is no agent\\'s ({AGENT_PREFIX}<cluster>)'"),
        "hubAudiences": (f"variables.audiences.all(a, a in {_cel(list(audiences))})",
                         "'audiences ' + variables.audiences.join(', ') + ' are not the hub API server\\'s ("
                         + ", ".join(audiences) + ")'"),
        "agentRole": (f"request.resource.resource != 'roles' || request.operation == 'DELETE' || "
                      f"({_role_is_the_agents()})",
                      "'the Role must hold exactly the agent\\'s rules (create hubclusters/facts of its one "
                      "cluster)'"),
        "agentBinding": (f"request.resource.resource != 'rolebindings' || request.operation == 'DELETE' || "
                         f"({_BINDING_IS_THE_AGENTS})",
                         "'the RoleBinding must bind the Role of its name to the ServiceAccount of its name, in its "
                         "namespace'"),
    }
    variables = [  # a variable may use those before it only
        # absent when there is none (the API server leaves empty fields out)
        {"name": "subresource", "expression": "request.?subResource.orValue('')"},
        {"name": "name", "expression": "request.?name.orValue('')"},  # of a token: its ServiceAccount's
        # a TokenRequest's audiences, as the API server filled them in (none asked for: its own)
        {"name": "audiences", "expression": "variables.subresource == 'token' ? "
                                            "object.spec.?audiences.orValue([]) : []"},
        {"name": "cluster", "expression": f"variables.name.startsWith('{AGENT_PREFIX}') ? "
                                          f"variables.name.substring({len(AGENT_PREFIX)}) : ''"},
        *({"name": key, "expression": expression} for key, (expression, _) in checks.items()),
        {"name": "refusals", "expression": " + ".join(f"(variables.{key} ? [] : [{message}])"
                                                      for key, (_, message) in checks.items())},
    ]
    name = policy_name(service_account)
    message = (f"'the registry ({user}) writes only its agents\\' ServiceAccounts, tokens, Roles and RoleBindings "
               f"in tenant namespaces: ' + variables.refusals.join('; ')")
    policy = {
        "apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["serviceaccounts", "serviceaccounts/token"], "scope": "Namespaced"},
                {"apiGroups": [RBAC], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["roles", "rolebindings"], "scope": "Namespaced"}]},
            "matchConditions": [{"name": "the-registry", "expression": f"request.userInfo.username == '{user}'"}],
            "variables": variables,
            "validations": [{"expression": "size(variables.refusals) == 0", "messageExpression": message,
                             "reason": "Forbidden"}],
        },
    }
    binding = {"apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]
