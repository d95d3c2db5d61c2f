"""Providers: every AWS resource is made by an explicit provider pinned to one account its stack's inputs allow."""
from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from policy.rules.endpoints import principal_account
from policy.rules.kinds import AWS_PROVIDER
from policy.rules.view import Config, Context, Resource


def provider_accounts(ctx: Context, r: Resource, _config: Config) -> Iterator[str]:
    if r.type == AWS_PROVIDER:
        yield from _provider_problems(ctx, r.props, "this provider")
    elif r.type.startswith("aws:"):
        if r.provider is None or r.provider.name.startswith("default"):
            yield "made by the default aws provider: every AWS resource names an explicit, account-pinned provider"
        else:
            yield from _provider_problems(ctx, r.provider.props, f"its provider {r.provider.name}")


def _provider_problems(ctx: Context, props: Mapping[str, Any], what: str) -> Iterator[str]:
    pinned = [str(a) for a in _decoded(props.get("allowedAccountIds"))]
    allowed = ", ".join(f"{a} ({why})" for a, why in ctx.accounts.items()) or "none"
    if len(pinned) != 1:
        yield f"{what} pins {len(pinned)} accounts (allowedAccountIds), not exactly one"
    for account in pinned:
        if account not in ctx.accounts:
            yield f"{what} is for account {account}, which stack {ctx.stack} may not use (its inputs allow {allowed})"
    for role in _decoded(props.get("assumeRoles")):
        arn = str((role or {}).get("roleArn") or "") if isinstance(role, Mapping) else ""
        if arn and principal_account(arn) not in pinned:
            yield f"{what} assumes {arn}, outside the account it pins"


def _decoded(value: Any) -> list:
    """A provider's list input: the engine hands providers non-string inputs JSON-encoded."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    return list(value or [])
