"""The rules: RULES, each check with its name, description, scope, when it can run and its config; BY_NAME."""
from __future__ import annotations

from policy.rules.endpoints import endpoint_service_principal
from policy.rules.nacls import no_world_nacl
from policy.rules.providers import provider_accounts
from policy.rules.routes import cidrs_disjoint, mesh_routes, peerings_join_their_pair, peerings_routed
from policy.rules.security_groups import api_port_from_hub, mesh_ingress_from_members, no_world_cidr
from policy.rules.transit import ram_principals, tgw_routes
from policy.rules.view import Rule

_AT_UP = "needs the peerings' IDs, which the engine knows once they exist: at preview it says so and runs at up"
_TGW_AT_UP = ("needs the route tables' and peering attachments' IDs, which the engine knows once they exist: at "
              "preview it says so and runs at up")
_MIN_PREFIX = {"minPrefixLength": {"type": "integer", "minimum": 1, "maximum": 128, "default": 1,
                                   "description": "refuse CIDRs with a shorter prefix than this (1: only /0)"}}

RULES: tuple[Rule, ...] = (
    Rule("endpoint-service-one-hub-principal",
         "An endpoint service allows exactly one principal, no wildcard: the hub's (in the hub account); "
         "acceptanceRequired is false only when that holds; a VpcEndpointServiceAllowedPrinciple names the hub's "
         "principal too.", "resource", endpoint_service_principal),
    Rule("no-world-open-rule",
         "No security-group rule (SecurityGroupRule, SecurityGroupIngressRule/EgressRule, a group's inline rules) "
         "has 0.0.0.0/0 or ::/0.", "resource", no_world_cidr, config=_MIN_PREFIX),
    Rule("mesh-ingress-from-members",
         "An ingress rule outside the API endpoint admits only CIDRs of the stack's mesh group.", "resource",
         mesh_ingress_from_members),
    Rule("api-port-from-hub-vpcs",
         "The API endpoint's security group admits only the API port, from the endpoint VPC's and associated VPCs' "
         "CIDRs.", "resource", api_port_from_hub),
    Rule("mesh-routes-target-their-pair",
         "Every route to a peer CIDR targets the peering of that pair or the group's Transit Gateway in the "
         "route table's region.", "stack", mesh_routes, preview=_AT_UP),
    Rule("providers-in-allowed-accounts",
         "Every AWS resource is made by an explicit provider pinned to one account its stack's inputs allow.",
         "resource", provider_accounts),
    Rule("peerings-routed-both-sides",
         "Every peering has routes in every route table of both members (while the group routes over peerings).",
         "stack", peerings_routed, preview=_AT_UP),
    Rule("peerings-join-their-pair",
         "A peering joins the stack's own member's VPC and a peer's VPC from the stack's inputs; no two members name "
         "one VPC (over one stack's members in the pack, over the whole fleet in the plan).", "stack",
         peerings_join_their_pair),
    Rule("member-cidrs-disjoint",
         "No two member CIDRs of a mesh group overlap (over one stack's pairs in the pack, over the whole fleet "
         "in the plan).", "stack", cidrs_disjoint),
    Rule("no-world-open-nacl",
         "No network ACL entry (NetworkAclRule, a NetworkAcl's or the default ACL's inline ingress/egress) allows "
         "0.0.0.0/0 or ::/0.", "resource", no_world_nacl, config=_MIN_PREFIX),
    Rule("ram-principals-member-accounts",
         "A RAM share names only the member accounts of its transit stack (no other stack shares anything).",
         "resource", ram_principals),
    Rule("tgw-routes-in-their-group",
         "Every Transit Gateway route is in a mesh group's table, to a member's declared CIDR through that member's "
         "attachment, or to the group's CIDRs in another region through the group's own peering attachment.",
         "stack", tgw_routes, preview=_TGW_AT_UP),
)
BY_NAME = {rule.name: rule for rule in RULES}
