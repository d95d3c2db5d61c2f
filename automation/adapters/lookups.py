"""The direct AWS calls the service makes (outside Pulumi), each through automation.adapters.aws sessions.

Each lookup declares, with `@needs`, which role it runs as ("hub" or "cluster")
and the IAM actions it calls; automation.cli.iam builds the least-privilege
policies from these declarations, and tests/test_aws_sessions.py runs every
lookup under moto's IAM enforcement with exactly those policies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from botocore.exceptions import BotoCoreError, ClientError

from automation.adapters.aws import AwsError, AwsSessions
from stacks.inputs import AwsTarget, StackInputs

Side = Literal["hub", "cluster"]


@dataclass(frozen=True)
class Needs:
    side: Side
    actions: tuple[str, ...]


NEEDS: dict[str, Needs] = {}  # lookup name → what it needs; filled by @needs at import


def needs(side: Side, *actions: str) -> Callable:
    def register(fn: Callable) -> Callable:
        NEEDS[fn.__name__] = Needs(side, tuple(actions))
        return fn

    return register


class LookupFailed(AwsError):
    """A lookup found nothing, or AWS refused it; `reason` becomes the cluster's condition reason."""

    reason = "LookupFailed"


def _refused(exc: ClientError | BotoCoreError, what: str, target: AwsTarget) -> LookupFailed:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "?")
        reason = "AccessDenied" if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation") \
            else "LookupFailed"
        return LookupFailed(f"{what} in account {target.account_id} ({target.region}) failed: {code}: "
                            f"{error.get('Message', exc)}", reason=reason)
    return LookupFailed(f"{what} in account {target.account_id} ({target.region}) failed: {exc}")


# --- the cluster's NLB -----------------------------------------------------------

@dataclass(frozen=True)
class LoadBalancer:
    arn: str
    name: str
    dns_name: str
    vpc_id: str
    scheme: str
    state: str


@needs("cluster", "elasticloadbalancing:DescribeLoadBalancers")
def find_nlb(sessions: AwsSessions, inputs: StackInputs, *, operation: str = "find-nlb") -> LoadBalancer:
    """The installer's internal NLB "{infraID}-int" in the cluster's account and region.

    Raises LookupFailed with reason LoadBalancerNotFound (or NotANetworkLoadBalancer)
    before any stack runs, instead of a failed `pulumi up` later.
    """
    link = inputs.private_link
    if link is None:
        raise ValueError(f"Cluster {inputs.key} does not use PrivateLink; it has no NLB to find")
    target = inputs.cluster
    client = sessions.client(target, "elbv2", operation=operation, cluster=inputs.name, namespace=inputs.namespace)
    try:
        found = client.describe_load_balancers(Names=[link.nlb_name])["LoadBalancers"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "LoadBalancerNotFound":
            found = []
        else:
            raise _refused(exc, f"looking up load balancer {link.nlb_name}", target) from None
    except BotoCoreError as exc:
        raise _refused(exc, f"looking up load balancer {link.nlb_name}", target) from None
    if not found:
        raise LookupFailed(
            f"no load balancer {link.nlb_name} in account {target.account_id} ({target.region}); the installer "
            f"creates it as '<infraID>-int': check spec.infraID and the cluster's account and region",
            reason="LoadBalancerNotFound")
    lb = found[0]
    if lb.get("Type") != "network":
        raise LookupFailed(f"load balancer {link.nlb_name} in account {target.account_id} is a {lb.get('Type')} "
                           "load balancer; PrivateLink needs a network load balancer",
                           reason="NotANetworkLoadBalancer")
    return LoadBalancer(arn=lb["LoadBalancerArn"], name=lb["LoadBalancerName"], dns_name=lb.get("DNSName", ""),
                        vpc_id=lb.get("VpcId", ""), scheme=lb.get("Scheme", ""),
                        state=(lb.get("State") or {}).get("Code", ""))


# --- endpoints per inventory VPC (placement) ---------------------------------------

# Interface and Gateway Load Balancer endpoints share the per-VPC quota; these states no longer hold a slot.
def all_lookups() -> dict[str, Needs]:
    """Every direct call the service makes, with its side and IAM actions."""
    return dict(NEEDS)
