"""Cluster mesh: who is in which group, which stack owns each pair, and each stack's share. Pure.

Membership
    A Cluster asks to join group G with the label `hubwright.io/mesh: G` AND the annotation
    `hubwright.io/mesh-enabled: "true"`; it is a member when it is not being deleted and its account and
    region resolve. Removing either takes it out. A label has one value, so a cluster is in one group at most.

Tenancy: a group is namespace-local unless the hub administrator says otherwise
    Clusters of different namespaces with the same label are different groups ("acme/G", "globex/G") and
    never peer. A group spans namespaces only when HubConfig spec.mesh.groups.G.namespaces lists them; a
    cluster of an unlisted namespace asking for G is refused (NotInMeshGroup). An entry without
    `namespaces` gives the settings (rules, securityGroup) of every namespace-local group named G.
    Join stamps and pair names do not depend on which kind of group it is, so declaring or undeclaring a
    group's namespaces never replaces a peering between clusters of one namespace.

Join order (durable, restart-proof)
    Members are ordered by their join stamp `status.meshJoin = {group: G, order: n}`, which the service
    writes once (`MeshPlan.stamps`, in the order given) and never rewrites while the cluster stays in G.
    Members without a stamp come after every stamped one: in the offline plan with a baseline, those the
    baseline planned (Fleet.held) first; then oldest `creationTimestamp` first, then by namespace/name. So a new
    joiner is always last, and writing its stamp does not move it, also in a Git repository whose files carry
    neither timestamps nor stamps (the pull-request diff shows the joiner's stack alone).

Ownership rule
    The later-joined member of a pair owns it: the requester peering in its own account, the accepter
    in the peer's account/region (through the peer's provider), the routes in every route table of
    BOTH members and the ingress rules on BOTH members' security groups. Each resource of the mesh is
    therefore in exactly one stack.

Cost in stack runs (group of N members, the joiner/leaver included)
    join:  1 (the joiner's; no other member's share changes).
    leave or delete of the k-th member in join order: 1 + (N - k) -- its own stack (update or destroy)
    removes the pairs it owns, and every later joiner's stack removes its pair with it.
    From 1 (the last joiner) to N (the first); (N + 1) / 2 on average.

Validation, in join order, so an existing member is never blocked by a newcomer's mistake (each rule on
each of a member's CIDR blocks: spec.network.cidr, then the VPC's other blocks): a member
whose CIDR overlaps a CIDR the hub owns (`hub_cidrs`: its endpoint and associated VPCs, spec.mesh.reservedCIDRs;
checked first, so it never takes a place) or lies outside its group's memberCIDRs, whose CIDR overlaps an
earlier member's, or that would push a VPC past `HubConfig spec.mesh` (or its
account's accountQuotas) peeringsPerVPC / routesPerTable / rulesPerSecurityGroup, or a gateway past its
quotas, is rejected (an InvalidSpec on that cluster naming both clusters and both CIDRs, or the numbers)
and left out of the mesh; the others go on.

Topology (stacks.transit): a group is built for its recorded state (peering, a Transit Gateway, or a step
of a migration between them); the share says whether the pairs' peerings exist, where their routes point
and whether the member attaches. Pair ownership, routes per pair and rules are the same in every topology,
so a join costs the joiner's stack (+ the transit stack's, with a gateway) and a move changes targets only.

Modules (each name is imported from the module that defines it; this package re-exports nothing)
    share       what one stack builds: MeshMember, MeshPair, MeshShare (+ MeshLimits, HubVpc)
    blocks      a member's CIDR blocks (primary first): their fields, their wire form, names per block
    membership  who asks for which group, the join order, pair names, coupling of groups, a group's rules
    hub_cidrs   the hub's CIDRs, which no member may declare (hub_cidrs, HubCidr, HubCidrs, hub_overlap)
    routes      the pair routes a stack writes and the routes they must not beat (route_hijacks)
    checks      why a candidate is refused: CIDRs, its own fields, the group's quotas, the gateways'
    plan        the whole mesh: plan_mesh -> MeshPlan (groups, shares, stamps, transit stacks' inputs)
    summary     each group as the plan's summary shows it
    labels      phase and rule labels in messages and resource names
    picture     each group as a picture's nodes and edges, for a viewer (the plan's dot and mermaid, the console)
    svg         one group's picture as SVG (the console's mesh page)
"""
