"""The policy pack the engine loads (`--policy-pack policy`): policy.rules as CrossGuard policies.

The engine starts `pulumi-analyzer-policy-python <engine> .` in this folder, which runs this file with the folder
on sys.path; the rules import `stacks` from the repository (or the image's /app) one level up. What a stack may use
comes from its own config, `hubwright:inputs` (the StackInputs the program is built from), which the engine hands
the pack with the rest of the stack's config. Each rule's enforcement level and config come from the pack config
(`--policy-pack-config`, Pulumi's format); mandatory unless it says otherwise.
"""
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulumi  # noqa: E402  (after the path above)
from pulumi_policy import (EnforcementLevel, PolicyConfigSchema, PolicyPack, ReportViolation,  # noqa: E402
                           ResourceValidationArgs, ResourceValidationPolicy, StackValidationArgs,
                           StackValidationPolicy)

from policy.rules.catalog import RULES  # noqa: E402
from policy.rules.view import Context, Provider, Resource, Rule  # noqa: E402
from stacks.inputs import INPUTS_CONFIG_KEY, inputs_from_config  # noqa: E402

NO_INPUTS = f"the stack has no hubwright:{INPUTS_CONFIG_KEY} config (or it does not parse): nothing may be checked " \
            "against it, so the stack may use no account"


@lru_cache(maxsize=1)
def context() -> Context:
    """The stack's inputs, read once per analyzer process (one stack)."""
    raw = pulumi.Config("hubwright").get(INPUTS_CONFIG_KEY)
    try:
        return Context.of(inputs_from_config(raw)) if raw else Context(NO_INPUTS)
    except ValueError:
        return Context(NO_INPUTS)


def provider_of(value: Any) -> Provider | None:
    return Provider(value.urn, value.name, value.props) if value is not None else None


def resource_policy(rule: Rule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        resource = Resource(args.urn, args.resource_type, args.name, args.props, provider_of(args.provider))
        for reason in rule.check(context(), resource, {**rule.defaults(), **args.get_config()}):
            report(reason, None)  # a resource policy's violation is about that resource: no other URN

    return ResourceValidationPolicy(name=rule.name, description=rule.description, validate=validate,
                                    config_schema=_schema(rule))


def stack_policy(rule: Rule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        resources = [Resource(r.urn, r.resource_type, r.name, r.props, provider_of(r.provider))
                     for r in args.resources]
        for urn, reason in rule.check(context(), resources, {**rule.defaults(), **args.get_config()}):
            report(reason, urn)

    return StackValidationPolicy(name=rule.name, description=f"{rule.description} ({rule.preview})",
                                 validate=validate, config_schema=_schema(rule))


def _schema(rule: Rule) -> PolicyConfigSchema | None:
    return PolicyConfigSchema(properties={k: dict(v) for k, v in rule.config.items()}) if rule.config else None


PolicyPack(
    name="hubwright",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[resource_policy(rule) if rule.scope == "resource" else stack_policy(rule) for rule in RULES],
)
