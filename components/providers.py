"""One explicit aws.Provider per (account, region); never the ambient default provider."""
from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stacks.inputs import AwsTarget


class Providers:
    """Creates each (account, region) provider once per program run.

    Every provider pins `allowedAccountIds` to the account it is meant for, so a
    wrong role or wrong ambient credentials fail before anything is created.
    """

    def __init__(self, tags: dict[str, str], own: tuple[AwsTarget | None, dict[str, str]] = (None, {})):
        """`own`: a target and the tags its resources carry besides `tags` (the cluster's, in its account)."""
        self._tags = dict(tags)
        self._own_target, self._own_tags = own[0].key if own[0] is not None else None, dict(own[1])
        self._made: dict[str, aws.Provider] = {}

    def aws(self, target: AwsTarget) -> aws.Provider:
        made = self._made.get(target.key)
        if made is None:
            made = self._made[target.key] = aws.Provider(
                f"aws-{target.key}",
                region=target.region,
                allowed_account_ids=[target.account_id],
                assume_roles=[_assume_role(target)] if target.role_arn else None,
                default_tags=aws.ProviderDefaultTagsArgs(tags={
                    **(self._own_tags if target.key == self._own_target else {}), **self._tags}),
            )
        return made


def _assume_role(target: AwsTarget) -> aws.ProviderAssumeRoleArgs:
    return aws.ProviderAssumeRoleArgs(
        role_arn=target.role_arn,
        session_name=target.session_name,
        external_id=target.external_id,
        duration=f"{target.session_duration_seconds}s" if target.session_duration_seconds else None,
    )


def invoke_opts(parent: pulumi.Resource, provider: aws.Provider) -> pulumi.InvokeOptions:
    return pulumi.InvokeOptions(parent=parent, provider=provider)
