"""Only the service creates HubStackRuns, and nobody changes a run's spec: a ValidatingAdmissionPolicy
(admissionregistration.k8s.io/v1, CEL, failurePolicy Fail), so it holds whatever RBAC someone was given.

Runners write a run's status (its claim, its result) through the status subresource, which this policy does not
match; the service deletes finished runs (--keep-runs), which it does not match either. A runner checks the same
things again before a run reaches the engine (stacks/runs/checks.py), so a hub without the policy is not open.

A service run outside a pod with --executor runners must act as the ServiceAccount the policy names: `author_problem`
says so once when it starts, and `refusal_hint` adds what to do to the refusal each run's create gets otherwise
(docs/service.md, "Runners outside a pod").
"""
from __future__ import annotations

import re
from typing import Any

from stacks.admission import namespaced, policy_binding, validating_policy
from stacks.names import SERVICE, STACKRUNS

STACKRUN_POLICY = "hubwright-stackrun-author"
OUTSIDE_A_POD = 'docs/service.md, "Runners outside a pod"'


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


def as_service_account(namespace: str, service_account: str = SERVICE) -> str:
    """How a service outside a pod acts as its ServiceAccount (in a pod, it is the Deployment's)."""
    return (f"outside a pod, give `serve` a kubeconfig holding its token: kubectl create token {service_account} "
            f"-n {namespace} ({OUTSIDE_A_POD})")


def author_problem(user: str, namespace: str, service_account: str = SERVICE) -> str | None:
    """Why every run a service acting as `user` creates will be refused by the policy (None: it acts as the
    ServiceAccount the policy names, or `user` is not known)."""
    expected = service_user(namespace, service_account)
    if not user or user == expected:
        return None
    return (f"--executor runners: this service acts as {user!r}, but the admission policy {STACKRUN_POLICY} lets "
            f"only {expected} create {STACKRUNS}, so every run it creates is refused; run it as that ServiceAccount: "
            + as_service_account(namespace, service_account))


_NAMED = re.compile(re.escape(STACKRUN_POLICY) + r"'.*?\(system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)\)", re.S)


def refusal_hint(message: str) -> str:
    """What to do about the API server's refusal of a run's create (`message`: its text), when the refusal is this
    policy's: "" for any other."""
    found = _NAMED.search(message)
    if found is None:
        return ""
    return "; the service must act as that ServiceAccount: " + as_service_account(found[1], found[2])
