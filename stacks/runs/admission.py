"""Only the service creates HubStackRuns, and nobody changes a run's spec: a ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, CEL, failurePolicy Fail), so it holds whatever RBAC someone was given.

Runners write a run's status (its claim, its result) through the status subresource, which this policy does not
match; the service deletes finished runs (--keep-runs), which it does not match either. A runner checks the same
things again before a run reaches the engine (stacks/runs/checks.py), so a hub without the policy is not open.
"""
from __future__ import annotations

from typing import Any

from stacks.admission import namespaced, policy_binding, validating_policy
from stacks.names import STACKRUNS

STACKRUN_POLICY = "hubwright-stackrun-author"


def service_user(namespace: str, service_account: str) -> str:
    return f"system:serviceaccount:{namespace}:{service_account}"


def stackrun_policy(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """The policy and its binding: create, and any spec change, only by the service's ServiceAccount."""
    user = service_user(namespace, service_account)
    policy = validating_policy(STACKRUN_POLICY, namespaced(STACKRUNS, "CREATE", "UPDATE"), [
        {"expression": f"request.operation != 'CREATE' || request.userInfo.username == '{user}'",
         "message": f"only the hubwright service ({user}) creates {STACKRUNS}", "reason": "Forbidden"},
        {"expression": "request.operation != 'UPDATE' || object.spec == oldObject.spec",
         "message": f"the spec of a {STACKRUNS} object never changes after it is created",
         "reason": "Forbidden"},
    ])
    return [policy, policy_binding(policy)]
