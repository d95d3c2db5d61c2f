"""Endpoint services: exactly one principal, the hub's, and no wildcard (rule endpoint-service-one-hub-principal)."""
from __future__ import annotations

import re
from typing import Iterator

from policy.rules.kinds import ENDPOINT_PRINCIPAL, ENDPOINT_SERVICE
from policy.rules.view import Config, Context, Resource

_PRINCIPAL = re.compile(r"arn:aws[a-z-]*:iam::(?P<account>\d{12}):(?:root|role/.+|user/.+)")


def principal_account(principal: str) -> str | None:
    if re.fullmatch(r"\d{12}", principal):
        return principal
    m = _PRINCIPAL.fullmatch(principal)
    return m["account"] if m else None


def endpoint_service_principal(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.kind == ENDPOINT_PRINCIPAL:  # beside the service's own list: the hub's principal again, or nothing
        # (the message names no service ID: it is unknown at preview, where this rule runs)
        problem = _principal_problem(ctx, str(r.props.get("principalArn") or ""))
        if problem:
            yield (f"{problem}: a principal allowed on an endpoint service beside its allowedPrincipals must be the "
                   f"hub's")
        return
    if r.kind != ENDPOINT_SERVICE:
        return
    principals = list(r.props.get("allowedPrincipals") or [])
    problems = []
    if len(principals) != 1:
        problems.append(f"allowedPrincipals holds {len(principals)} principals, not exactly one")
    problems += [p for p in (_principal_problem(ctx, str(principal)) for principal in principals) if p]
    if problems and not r.props.get("acceptanceRequired"):
        problems.append("and acceptanceRequired is false, so such a principal connects without approval")
    if problems:
        yield "; ".join(problems)


def _principal_problem(ctx: Context, principal: str) -> str | None:
    if "*" in principal:
        return f"principal {principal!r} is a wildcard"
    if principal_account(principal) != ctx.hub_account:
        return f"principal {principal!r} is not in the hub account {ctx.hub_account}"
    if ctx.hub_principal is not None and principal != ctx.hub_principal:
        return f"principal {principal!r} is not the hub's principal {ctx.hub_principal}"
    return None
