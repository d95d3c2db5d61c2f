"""What a retained stack keeps (docs/service.md "Deletion policy"; stacks/retention.py has the rest of the policy).
Pure.

`retained_inputs`: the stack a HubCluster deleted with deletionPolicy Retain keeps, from its last applied inputs:
only what lives in the cluster's own account and refers to nothing elsewhere (its endpoint service, its dedicated
mesh security group). Everything it holds elsewhere goes in one `up` before its finalizer is released: the hub's
interface endpoint, zone and associations, the mesh pairs it owns (peerings, routes and rules on both sides) and its
Transit Gateway attachment. The resources kept keep their names, parents and inputs, so that run changes none of
them (tests/test_retention_pulumi_live.py shows it with the real pulumi CLI), and a HubCluster that adopts the stack
later creates only what was removed.
"""
from __future__ import annotations

from stacks.inputs import StackInputs


def retained_inputs(applied: StackInputs) -> StackInputs:
    """What a retained stack keeps of `applied` (its last applied inputs): its own account's part, changed in
    nothing. The PrivateLink keeps its endpoint service alone (components.privatelink builds no hub side for a
    retained stack); the mesh share keeps the member and its dedicated group, without pairs or an attachment."""
    share = applied.mesh
    if share is not None:
        share = share.model_copy(update={"pairs": (), "attachment": None})
    return applied.model_copy(update={"retained": True, "mesh": share, "shared_ingress": None})


def kept_of(retained: StackInputs) -> list[str]:
    """What a retained stack keeps, for people (the record's spec.kept, the Event): type and name."""
    kept = []
    if retained.private_link is not None:
        kept.append(f"aws:ec2/vpcEndpointService:VpcEndpointService {retained.stack}-svc "
                    f"(on load balancer {retained.private_link.nlb_name})")
    group = retained.mesh.member.dedicated_security_group if retained.mesh is not None else None
    if group is not None:
        kept.append(f"aws:ec2/securityGroup:SecurityGroup {group}")
    return kept
