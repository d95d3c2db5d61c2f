"""The HubCluster refusals the API server can make at `kubectl apply`, as a ValidatingAdmissionPolicy. Pure.

The service refuses these too (stacks.tenancy, on its own thread, later): the policy only says it sooner, in the
same words. Each message is rendered from the template the Python rule formats (stacks.tenancy.NOT_THE_OWNER,
NOT_UNDER), so the two cannot drift; tests/test_cluster_policy_envtest.py runs both over the same cases on the real
API server. The policy reads the namespace (`namespaceObject`), nothing of the fleet:

- **the owner account**: spec.accountID must be the namespace's hubwright.io/owner-account-id. A namespace without
  the annotation (Refuse or FirstClaim) needs the fleet's state, so it passes through to the service, as does an
  annotation that is not an account ID (the service refuses the namespace itself, InvalidOwnerAccount).
- **the API host**: under hubwright.io/allowed-domains when the namespace has it (the hub's reservedDomains need
  the HubConfig: the service's).

Only a change is judged: on UPDATE a rule runs when its field changed, so a cluster whose namespace was
re-annotated since can still have its finalizer removed and be deleted (the service stalls it; it is never stuck).
"""
from __future__ import annotations

import re
from stacks.admission import Manifest, namespaced, policy_binding, validating_policy
from stacks.names import ALLOWED_DOMAINS_ANNOTATION, CLUSTERS, OWNER_ACCOUNT_ANNOTATION
from stacks.tenancy import NOT_THE_OWNER, NOT_UNDER

CLUSTER_POLICY = "hubwright-hubcluster-placement"

_REF = "'HubCluster ' + object.metadata.namespace + '/' + object.metadata.name"


def cel_string(text: str) -> str:
    """`text` as a CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_format(template: str, **values: str) -> str:
    """A CEL string expression that is `template.format(**values)` where each value is a CEL expression."""
    parts: list[str] = []
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\})?", template):
        if literal:
            parts.append(cel_string(literal))
        if name:
            parts.append(f"({values[name]})")
    return " + ".join(parts)


def _message(field: str, reason: str) -> str:
    """A CEL message in the words of stacks.errors.FieldError: '<object>: <field>: <reason>'."""
    return f"{_REF} + {cel_string(f': {field}: ')} + {reason}"


def _annotation(key: str) -> str:
    return f"namespaceObject.?metadata.?annotations[?{cel_string(key)}]"


def _changed(path: str) -> str:
    """CEL: true on CREATE, or when spec.<path> was set, changed or removed."""
    return (f"request.operation == 'CREATE' || object.?spec.?{path}.orValue('') != "
            f"oldObject.?spec.?{path}.orValue('')")


def cluster_policy() -> Manifest:
    owner = f"{_annotation(OWNER_ACCOUNT_ANNOTATION)}.orValue('')"
    account = "object.?spec.?accountID.orValue('')"
    host = "url(object.spec.apiURL).getHostname().lowerAscii()"
    domains = (f"{_annotation(ALLOWED_DOMAINS_ANNOTATION)}.orValue('').split(',')"
               ".map(d, d.trim().lowerAscii()).filter(d, d != '')")
    return validating_policy(
        CLUSTER_POLICY, namespaced(CLUSTERS, "CREATE", "UPDATE"),
        [{"expression": f"!({_changed('accountID')}) || variables.account == '' || "
                        "!variables.owner.matches('^[0-9]{12}$') || variables.account == variables.owner",
          "messageExpression": _message("spec.accountID", cel_format(
              NOT_THE_OWNER, wanted="variables.account", owner="variables.owner")),
          "reason": "Forbidden"},
         {"expression": f"!({_changed('apiURL')}) || !variables.limited || variables.host == '' || "
                        "variables.domains.exists(d, variables.host == d || variables.host.endsWith('.' + d))",
          "messageExpression": _message("spec.apiURL", cel_format(
              NOT_UNDER, host="variables.host", namespace="object.metadata.namespace",
              domains="variables.domains.size() == 0 ? 'none' : variables.domains.join(', ')")),
          "reason": "Forbidden"}],
        variables=[
            {"name": "owner", "expression": owner},
            {"name": "account", "expression": account},
            {"name": "limited", "expression": f"{_annotation(ALLOWED_DOMAINS_ANNOTATION)}.hasValue()"},
            {"name": "domains", "expression": domains},
            {"name": "host", "expression": f"has(object.spec.apiURL) && isURL(object.spec.apiURL) ? {host} : ''"},
        ])


def cluster_policy_manifests() -> list[Manifest]:
    """The policy and its binding (Deny), in the order to apply them."""
    policy = cluster_policy()
    return [policy, policy_binding(policy)]
