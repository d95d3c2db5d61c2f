"""Checks before a stack runs, through the same account resolution as the stack's providers.

- every account the stack will act in can be reached (AssumeRole of each mapped role): a refusal
  stalls the cluster with the reason, the field and the message, runs nothing, and is looked at again
  every --stalled-recheck and at once when the role map or the cluster changes; a network failure
  on the way is retried with backoff (automation.adapters.aws.sessions.transient decides which is which);
- a PrivateLink cluster's NLB "{infraID}-int" exists in its account: while the installer has not
  made it, the cluster waits with backoff instead of failing a `pulumi up`.
"""
from __future__ import annotations

from automation.adapters.aws import audit
from automation.adapters.aws.sessions import AccountAccessDenied, AwsSessions, NoServiceCredentials
from automation.adapters.aws.lookups import find_nlb
from stacks.errors import FieldError, NeedsAttention
from stacks.inputs import StackInputs, stack_targets


class Preflight:
    """A reconcile guard: `guard(applied, desired)` raises NeedsAttention (stall, rechecked) or a transient
    Failure such as AwsError (retry with backoff)."""

    def __init__(self, sessions: AwsSessions):
        self.sessions = sessions

    def __call__(self, applied: StackInputs | None, desired: StackInputs) -> None:
        with audit.once():  # each pivot said once, however many lookups follow the session
            self._check(desired)

    def _check(self, desired: StackInputs) -> None:
        for target in stack_targets(desired).all():
            try:
                # Building the session assumes the target's role (cached, refreshed before expiry).
                self.sessions.session(target, operation="preflight", cluster=desired.name,
                                      namespace=desired.namespace)
            except AccountAccessDenied as exc:
                field = ("(the service's AWS credentials)" if isinstance(exc, NoServiceCredentials) else
                         "spec.accountID" if target.account_id == desired.cluster.account_id else "(role map)")
                raise NeedsAttention(str(FieldError(f"HubCluster {desired.key}", field, str(exc))), reason=exc.reason) \
                    from None
        if desired.private_link is not None:
            find_nlb(self.sessions, desired, operation="preflight")
