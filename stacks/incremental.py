"""resolve_all's answer kept up to date one change at a time, at a cost that does not grow with the fleet. Pure.

The service sees one change at a time. Re-resolving a 10,000-cluster fleet for each (1.6 s) would make every event's
cost grow with the fleet, so `FleetResolver` keeps every intermediate answer of stacks.resolve.resolve_all, indexed
by what couples clusters, and re-runs each step only over the clusters a change can affect (stacks.partitions: who
shares what), with the same functions resolve_all calls:

  step           couples the clusters sharing ...                  re-run for a cluster whose ... changed
  accounts       an account (FirstClaim only: the first claimant)  account, namespace, age, record
  caps           a namespace (only while it has a cap)             admission, PrivateLink, age, stack, recorded VPC
  claims         a VPC, load balancer, infra ID, API host, then    the value it asks, the stages before, age,
                 an ingress ID (stacks.claims: each stage's        record
                 claimants are those the stages before let in)
  placement      a region's endpoint VPCs                          region, PrivateLink, age, recorded VPC, admission
  mesh           a group (a network account's groups, once any     stacks.mesh.membership.mesh_view,
                 may use a Transit Gateway: membership.coupling)   account, region, attachment
  the rest       nothing: the cluster alone                        anything above, or its own fields

The claims are admission's last stages: placement and the mesh read only the clusters they let through.
A Namespace's change re-resolves its clusters (and everything, when it changes which accounts are owned); a retained
stack's, the clusters of its key, capped namespace and claims; the HubConfig, the role map and the endpoint census
start over. tests/test_incremental.py checks the answer equals resolve_all's after random sequences of changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from stacks import accounts
from stacks.errors import FieldError, InvalidSpec
from stacks.ingress import Route, claim_ids, cluster_id_of, route_of
from stacks.inputs import SharedIngressInputs, StackInputs
from stacks.mesh.membership import coupling, membership, mesh_view
from stacks.mesh.plan import GroupView, MeshPlan, plan_mesh
from stacks.mesh.share import MeshShare
from stacks.model.cluster import Cluster
from stacks.model.hub import EndpointVPC, HubConfig
from stacks.partitions import Index, assign, present
from stacks.placement import Want, kept, place_endpoints, place_pending
from stacks.claims import STAGES, Claimant, ask, claim, granted
from stacks.retention import Retention
from stacks.resolve import Fleet, Resolved, admit, base_inputs, claims_id, finish, quotas, seat_of, want_of, with_network
from stacks.targets import AwsTarget
from stacks.tenancy import Owners, contested_accounts, first_claims, namespace_caps, cluster_namespace, owned_accounts
from stacks.transit import GroupState, MeshStatus, TransitInputs, TransitOutputs

_ID = "clusterID"  # the last claim stage: the shared-ingress ID (stacks.ingress.claim_ids)
Target = AwsTarget | InvalidSpec
Value = StackInputs | InvalidSpec


@dataclass(frozen=True)
class _Entry:
    cluster: Cluster
    placement: str | None  # the endpoint VPC its status says the stack uses
    attachment: str | None  # its Transit Gateway attachment, as its status says
    stack: bool = False  # its stack exists, as its status says (status.stack): it keeps its slot under a cap


class FleetResolver:
    """resolve_all(fleet), maintained: `put`/`remove` clusters, change the shared objects, then `resolve()`."""

    def __init__(self, hub: HubConfig, *, namespaces: Mapping[str, Mapping[str, str]] | None = None,
                 role_map: Mapping[str, str] | None = None, foreign_endpoints: Mapping[str, int] | None = None,
                 mesh_status: MeshStatus | None = None, discovery: bool = False, held: frozenset[str] = frozenset(),
                 retention: Retention | None = None):
        status = mesh_status or MeshStatus.empty()
        self._hub, self._retention, self._discovery, self._held = hub, retention or Retention.empty(), discovery, held
        self._namespaces: dict[str, Mapping[str, str]] = dict(namespaces or {})
        self._role_map, self._foreign = role_map, dict(foreign_endpoints or {})
        self._groups, self._transit_outputs = status.groups, status.transit
        self._entries: dict[str, _Entry] = {}
        self._dirty: set[str] = set()  # cluster keys to look at again
        # The answer, kept across a restart so that resolve() reports only what changed.
        self._final: dict[str, Value] = {}
        self._guests: dict[str, SharedIngressInputs] = {}
        self._unrouted: dict[str, InvalidSpec] = {}
        self._route_of: dict[str, Route] = {}
        self._routes: tuple[Route, ...] = ()
        self._routes_stale = False
        self._restart()

    @classmethod
    def of(cls, fleet: Fleet) -> "FleetResolver":
        """A resolver holding `fleet`: its first resolve() is resolve_all(fleet)."""
        resolver = cls(fleet.hub, namespaces=fleet.namespaces, role_map=fleet.role_map,
                       foreign_endpoints=fleet.foreign_endpoints, mesh_status=fleet.mesh_status,
                       discovery=fleet.discovery, held=fleet.held, retention=fleet.retention)
        for cluster in fleet.clusters:
            resolver.put(cluster, fleet.placements.get(cluster.key), fleet.mesh_status.attachments.get(cluster.key),
                         cluster.key in fleet.stacks)
        return resolver

    # -- changes
    def put(self, cluster: Cluster, placement: str | None = None, attachment: str | None = None,
            stack: bool = False) -> None:
        """A cluster as it is now (its recorded endpoint VPC, attachment and stack from its status)."""
        key = cluster.key
        if not cluster.spec.provisioned:  # registered only: no stack, claims nothing
            self.remove(key)
            return
        entry = _Entry(cluster, placement, attachment, stack)
        if self._entries.get(key) != entry:
            self._entries[key] = entry
            self._dirty.add(key)

    def remove(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self._dirty.add(key)

    def set_namespace(self, name: str, annotations: Mapping[str, str] | None) -> None:
        old = self._namespaces.get(name)
        if annotations is None:
            self._namespaces.pop(name, None)
        else:
            self._namespaces[name] = dict(annotations)
        if (old or {}) == (annotations or {}):
            return
        if owned_accounts(self._namespaces) != self._owned \
                or contested_accounts(self._hub, self._namespaces) != self._contested:
            self._restart()  # another namespace's clusters may now use (or no longer use) an account
        else:
            self._dirty |= self._by_namespace.members.get(name, set())

    def set_hub(self, hub: HubConfig) -> None:
        if hub != self._hub:
            self._hub = hub
            self._restart()

    def set_role_map(self, role_map: Mapping[str, str] | None) -> None:
        if dict(role_map or {}) != dict(self._role_map or {}):
            self._role_map = role_map
            self._restart()

    def set_retention(self, retention: Retention) -> None:
        """A retain, release or adoption: the records' keys, namespaces (caps) and claimants are looked at again."""
        old, self._retention, self._reserved = self._retention, retention, retention.reserved()
        for record in old.moved(retention):
            namespace = record.spec.namespace  # its slot moves only a capped namespace's clusters
            capped = self._by_namespace.members.get(namespace, set()) if self._capped(namespace) else set()
            self._dirty |= ({record.key} & self._entries.keys()) | capped
            self._dirty.update(*(self._by_claim[k].members.get(v, ()) for k, v in record.spec.claims.by_kind().items()))

    def set_foreign_endpoints(self, counts: Mapping[str, int]) -> None:
        if dict(counts) != self._foreign:
            self._foreign = dict(counts)
            self._restart()

    def set_mesh_status(self, groups: Mapping[str, GroupState], transit: Mapping[str, TransitOutputs]) -> None:
        """HubConfig status.mesh: the groups' recorded states and the transit stacks' outputs."""
        if dict(groups) == dict(self._groups) and dict(transit) == dict(self._transit_outputs):
            return
        self._groups, self._transit_outputs = groups, transit
        self._mesh_stale = True  # which groups couple, their states and gateways: every unit is planned again

    # -- the answer
    def resolve(self) -> tuple[Resolved, frozenset[str]]:
        """The fleet resolved, and the keys whose answer changed (appeared, went or differs) since the last call."""
        dirty, self._dirty = self._dirty, set()
        touched = self._admit(dirty)
        touched |= self._gate_claims(dirty | touched)
        placed = self._place(dirty | touched)
        meshed = self._mesh(dirty | touched)
        based = self._base(dirty | touched | placed | meshed)
        changed = self._finish(dirty | touched | placed | meshed | based)
        if self._routes_stale:
            self._routes = tuple(sorted(self._route_of.values(), key=lambda route: route.cluster_id))
            self._routes_stale = False
        mesh = MeshPlan(shares=dict(self._shares), errors={**self._membership_errors, **self._mesh_errors},
                        groups=dict(self._views),
                        stamps=dict(self._stamps), unstamp=tuple(self._unstamp), transit=dict(self._transit))
        resolved = Resolved(dict(self._final), self._routes, dict(self._guests), dict(self._unrouted), mesh,
                            dict(self._granted))
        return resolved, frozenset(changed)

    def endpoint_vpc(self, key: str) -> str | None:
        """The endpoint VPC the last resolve() placed the cluster in (None: not placed)."""
        placed = self._placed.get(key)
        return placed.vpc_id if isinstance(placed, EndpointVPC) else None

    def granted_of(self, key: str) -> Mapping[str, str] | None:
        """What admission granted the cluster at the last resolve() (stacks.claims.granted); None: not admitted."""
        return self._granted.get(key)

    @property
    def recorded_groups(self) -> Mapping[str, GroupState]:
        """HubConfig status.mesh.groups as last given (set_mesh_status)."""
        return self._groups

    # -- the steps
    def _restart(self) -> None:
        """Forget every intermediate answer: the next resolve() recomputes all of them (and compares)."""
        self._owned = owned_accounts(self._namespaces)
        self._contested = contested_accounts(self._hub, self._namespaces)
        self._roles = accounts.merged_role_map(self._hub, self._role_map)
        self._by_namespace = Index()
        self._by_account = Index()
        self._claims: dict[str, str] = {}
        self._admitted: dict[str, Target] = {}  # admit's answer, before the namespace's caps
        self._gate: dict[str, Target] = {}  # after the namespace's caps, before the network (target_of)
        self._networked: dict[str, Cluster] = {}  # admitted clusters with their network merged (with_network)
        self._pre: dict[str, Target] = {}  # with_network's answer: admission before the claims
        self._reserved = self._retention.reserved()
        self._by_claim: dict[str, Index] = {kind: Index() for kind in (*STAGES, _ID)}
        self._claim_refusals: dict[str, dict[str, InvalidSpec]] = {kind: {} for kind in (*STAGES, _ID)}
        self._targets: dict[str, Target] = {}  # admission's answer: after the claims
        self._granted: dict[str, dict[str, str]] = {}
        self._by_region = Index()
        self._wants: dict[str, tuple[Want, str | None]] = {}
        self._placed: dict[str, EndpointVPC | InvalidSpec] = {}
        self._inventory = {vpc.vpc_id: vpc for vpc in self._hub.spec.endpoint_vpc_inventory}
        self._kept_per_vpc: dict[str, dict[str, int]] = {}  # region -> VPC -> endpoints kept there (_count)
        self._pending: dict[str, int] = {}  # region -> its clusters that keep no VPC
        self._by_unit = Index()
        self._views_of: dict[str, tuple[Any, ...]] = {}  # key -> what the mesh read of it
        self._unit_plans: dict[str, MeshPlan] = {}
        self._membership_errors: dict[str, InvalidSpec] = {}
        self._unstamp: dict[str, None] = {}  # an ordered set
        self._shares: dict[str, MeshShare] = {}
        self._mesh_errors: dict[str, InvalidSpec] = {}
        self._views: dict[str, GroupView] = {}
        self._stamps: dict[str, dict[str, Any]] = {}
        self._transit: dict[str, TransitInputs] = {}
        self._mesh_stale = False
        self._base_values: dict[str, Value] = {}
        self._dirty |= set(self._entries)

    def _owners(self) -> Owners:
        return Owners(self._hub, self._namespaces, self._owned, self._claims, self._contested, self._retention)

    def _admit(self, dirty: set[str]) -> set[str]:
        """Targets of the dirty clusters and of those whose account's first claimant changed; the keys whose
        target changed."""
        accounts_touched: set[str | None] = set()
        namespaces: set[str | None] = set()
        for key in dirty:
            entry = self._entries.get(key)
            namespaces.update(self._by_namespace.move(key, cluster_namespace(entry.cluster) if entry else None))
            if entry is not None:
                namespaces.add(cluster_namespace(entry.cluster))  # its age, stack or PrivateLink may have changed
            accounts_touched.update(self._by_account.move(key, entry.cluster.spec.account_id if entry else None))
            if entry is not None:
                accounts_touched.add(entry.cluster.spec.account_id)  # its namespace or age may have changed
        readmit = set(dirty)
        if self._hub.spec.tenancy.unowned_namespaces != "FirstClaim":
            accounts_touched = set()  # no claims: an account couples nobody
        for account in present(accounts_touched):
            members = [self._entries[k].cluster for k in self._by_account.members.get(account, ())]
            claim = first_claims(self._hub, members, self._namespaces, self._owned).get(account)
            if claim != self._claims.get(account):
                assign(self._claims, account, claim)
                readmit |= self._by_account.members.get(account, set())
        owners = self._owners()
        for key in readmit:
            entry = self._entries.get(key)
            target: Target | None = None
            if entry is not None:
                try:
                    target = admit(entry.cluster, owners, self._roles, entry.stack)
                except InvalidSpec as exc:
                    target = exc
                namespaces.add(cluster_namespace(entry.cluster))
            assign(self._admitted, key, target)
        return self._caps(readmit, present(namespaces))

    def _caps(self, readmit: set[str], namespaces: set[str]) -> set[str]:
        """The namespaces' caps over their admitted clusters (each namespace with a cap is judged whole; one
        without passes the readmitted ones through); the keys whose target changed."""
        final: dict[str, Target | None] = {key: self._admitted.get(key) for key in readmit}
        owners = self._owners()
        for name in namespaces:
            if not self._capped(name):
                continue
            annotations = self._namespaces.get(name, {})
            members = self._by_namespace.members.get(name, set())
            seats = [seat_of(e.cluster, self._admitted[k], e.stack, e.placement, owners)
                     for k in members if (e := self._entries[k]) is not None]
            refused = quotas(self._hub, name, owners, seats)
            final.update({k: refused.get(k) or self._admitted.get(k) for k in members})
        for key, target in list(final.items()):
            assign(self._gate, key, target)
            entry = self._entries.get(key)
            if entry is None or target is None:
                self._networked.pop(key, None)
                continue
            cluster, final[key] = with_network(entry.cluster, target, self._hub, self._discovery)
            self._networked[key] = cluster
        return {key for key, target in final.items() if assign(self._pre, key, target)}

    def _capped(self, namespace: str) -> bool:
        try:
            return bool(namespace_caps(self._hub, namespace, self._namespaces.get(namespace, {})))
        except InvalidSpec:
            return False  # admit refused every cluster of the namespace

    def _cluster(self, key: str) -> Cluster:
        """The cluster with its network merged, once admitted (the mesh plans with it)."""
        return self._networked.get(key) or self._entries[key].cluster

    def target_of(self, key: str) -> AwsTarget | None:
        """Where the tenancy gate admitted the cluster (before its network is merged): where discovery looks."""
        return target if isinstance(target := self._gate.get(key), AwsTarget) else None

    def _place(self, keys: set[str]) -> set[str]:
        """Re-place every region a cluster's want (or recorded VPC) entered or left; the keys whose VPC changed.

        A region whose other clusters all keep their VPC (stacks.placement.kept: the usual case, since the service
        pins what it placed) places only the clusters that moved, around the counts kept per VPC: a new cluster costs
        the same in a region of 10 or of 10,000. Otherwise the whole region is placed again."""
        regions: dict[str, set[str]] = {}  # region -> its clusters whose want entered or left it
        for key in keys:
            entry = self._entries.get(key)
            want = want_of(entry.cluster, self._targets[key]) if entry is not None else None
            wanted = (want, entry.placement) if entry is not None and want is not None else None
            if self._wants.get(key) != wanted:
                old = self._wants.get(key)
                self._count(old, -1)
                self._count(wanted, 1)
                assign(self._wants, key, wanted)
                for side in (old[0].region if old else None, want.region if want else None):
                    if side:
                        regions.setdefault(side, set()).add(key)
                self._by_region.move(key, want.region if want else None)
        changed = set()
        for region, moved in regions.items():
            members = self._by_region.members.get(region, set())
            here = [key for key in moved if key in members]
            pending = [key for key in here if self._kept(self._wants[key]) is None]
            placed: dict[str, EndpointVPC | InvalidSpec]
            if self._pending.get(region, 0) == len(pending):
                placed = {key: vpc for key in here if (vpc := self._kept(self._wants[key])) is not None}
                placed.update(place_pending(self._hub, [self._wants[key][0] for key in pending],
                                            self._kept_per_vpc.get(region, {}), self._foreign))
            else:
                placed = place_endpoints(self._hub, [self._wants[k][0] for k in members],
                                         {k: p for k in members if (p := self._wants[k][1])}, self._foreign)
            changed |= {k for k, vpc in placed.items() if (was := self._placed.get(k)) is not vpc and was != vpc}
            self._placed.update(placed)
        for key in keys:  # left every region
            if key not in self._by_region.of and self._placed.pop(key, None) is not None:
                changed.add(key)
        return changed

    def _kept(self, wanted: tuple[Want, str | None]) -> EndpointVPC | None:
        return kept(self._inventory, wanted[0], wanted[1])

    def _count(self, wanted: tuple[Want, str | None] | None, sign: int) -> None:
        """Keep, per region, the endpoints kept in each VPC and how many clusters keep none (see _place)."""
        if wanted is None:
            return
        region = wanted[0].region
        vpc = self._kept(wanted)
        if vpc is None:
            self._pending[region] = self._pending.get(region, 0) + sign
        else:
            counts = self._kept_per_vpc.setdefault(region, {})
            counts[vpc.vpc_id] = counts.get(vpc.vpc_id, 0) + sign

    def _mesh(self, keys: set[str]) -> set[str]:
        """Re-plan every mesh unit (stacks.mesh.membership.coupling) a cluster's view entered or left; the keys
        whose share, stamp or mesh refusal changed."""
        stale, self._mesh_stale = self._mesh_stale, False
        if stale:
            keys = keys | set(self._views_of)
        units: set[str] = set(self._unit_plans) if stale else set()
        changed: set[str] = set()
        for key in keys:
            entry = self._entries.get(key)
            group, unstamp = membership(entry.cluster, self._hub) if entry is not None else (None, False)
            view = (mesh_view(self._cluster(key)), self._targets[key], entry.attachment) \
                if entry is not None and (group is not None or unstamp) else None  # else the mesh does not see it
            if not assign(self._views_of, key, view) and not stale:
                continue
            if assign(self._membership_errors, key, group if isinstance(group, InvalidSpec) else None):
                changed.add(key)
            if unstamp != (key in self._unstamp):
                if unstamp:
                    self._unstamp[key] = None
                else:
                    del self._unstamp[key]
                changed.add(key)
            unit = coupling(self._hub, group, self._status_for(())) if isinstance(group, str) else None
            units.update(u for u in (*self._by_unit.move(key, unit), unit) if u is not None)
        return changed | self._plan_units(units)

    def _status_for(self, keys: Iterable[str]) -> MeshStatus:
        return MeshStatus(self._groups, self._transit_outputs,
                          {k: a for k in keys if (a := self._entries[k].attachment)})

    def _plan_units(self, units: set[str]) -> set[str]:
        """Plan the units again: every old plan's part of the mesh goes first, then every new plan's comes in (a
        group may move between units); the keys whose share, stamp or refusal differ."""
        per_key: tuple[dict[str, Any], ...] = (self._shares, self._mesh_errors, self._stamps)
        named: tuple[dict[str, Any], ...] = (self._views, self._transit)
        keys: set[str] = set()
        before: dict[str, tuple] = {}
        for unit in units:
            old = self._unit_plans.pop(unit, None)
            if old is None:
                continue
            for key in {*old.shares, *old.errors, *old.stamps}:
                before[key] = tuple(part.get(key) for part in per_key)
                for part in per_key:
                    part.pop(key, None)
            for part, names in zip(named, (old.groups, old.transit)):
                for name in names:
                    part.pop(name, None)
            keys |= before.keys()
        for unit in units:
            members = self._by_unit.members.get(unit)
            if not members:
                continue
            clusters = [self._cluster(k) for k in sorted(members)]
            new = plan_mesh(self._hub, clusters, self._targets, self._status_for(members), self._roles, self._held)
            self._unit_plans[unit] = new
            for part, values in zip((*per_key, *named), (new.shares, new.errors, new.stamps, new.groups, new.transit)):
                part.update(values)
            keys |= {*new.shares, *new.errors, *new.stamps}
        return {k for k in keys if before.get(k, (None, None, None)) != tuple(part.get(k) for part in per_key)}

    def _base(self, keys: set[str]) -> set[str]:
        owners = self._owners()
        changed = set()
        for key in keys:
            entry = self._entries.get(key)
            value = base_inputs(entry.cluster, self._hub, owners, self._role_map, self._targets[key],
                                self._placed.get(key), self._shares.get(key)) if entry is not None else None
            if assign(self._base_values, key, value):
                changed.add(key)
        return changed

    def _gate_claims(self, keys: set[str]) -> set[str]:
        """Admission's claim stages (stacks.claims), in order: at each stage, every key whose ask or standing moved,
        and every key whose refusal an earlier stage changed, re-claim the values they asked or ask; the keys whose
        target (after every stage) changed."""
        owners = self._owners()
        moved = set(keys)
        for kind in (*STAGES, _ID):
            values: set[str | None] = set()
            for key in moved:
                value = self._ask(kind, key, owners)
                values.update((*self._by_claim[kind].move(key, value), value))  # its age or record may have moved
            index, refusals = self._by_claim[kind], self._claim_refusals[kind]
            changed = {k for k in moved if k not in index.of and assign(refusals, k, None)}
            for value in present(values):
                members = index.members.get(value, set())
                refused = self._claim_among(kind, members)
                changed |= {k for k in members if assign(refusals, k, refused.get(k))}
            moved |= changed
        touched = set()
        for key in moved:
            target = self._pre.get(key)
            if isinstance(target, AwsTarget):
                target = next((r[key] for r in self._claim_refusals.values() if key in r), target)
            if assign(self._targets, key, target):
                touched.add(key)
            entry = self._entries.get(key)
            assign(self._granted, key, granted(self._cluster(key), target)
                 if entry is not None and isinstance(target, AwsTarget) else None)
        return touched

    def _ask(self, kind: str, key: str, owners: Owners) -> str | None:
        """What the key claims at this stage: nothing unless every stage before let it through."""
        target = self._pre.get(key)
        entry = self._entries.get(key)
        if entry is None or not isinstance(target, AwsTarget):
            return None
        for before in (*STAGES, _ID):
            if before == kind:
                break
            if key in self._claim_refusals[before]:
                return None
        cluster = self._cluster(key)
        if kind == _ID:
            return cluster_id_of(cluster) if claims_id(cluster, self._hub, owners, target) else None
        return ask(kind, cluster, target)

    def _claim_among(self, kind: str, keys: Iterable[str]) -> Mapping[str, InvalidSpec]:
        if kind == _ID:
            return {k: InvalidSpec([error]) for k, error in claim_ids(self._cluster(k) for k in keys)[1].items()}
        return claim(kind, [Claimant(self._cluster(k), t) for k in keys if isinstance(t := self._pre[k], AwsTarget)],
                     self._held, self._reserved)

    def _finish(self, keys: set[str]) -> set[str]:
        changed = set()
        for key in keys:
            entry = self._entries.get(key)
            value: Value | None = None
            guest = None
            if entry is not None:
                value, guest = finish(entry.cluster, self._base_values[key],
                                      self._mesh_errors.get(key) or self._membership_errors.get(key))
            if assign(self._final, key, value):
                changed.add(key)
            assign(self._guests, key, guest)
            if assign(self._route_of, key, route_of(entry.cluster) if entry is not None and guest is not None else None):
                self._routes_stale = True
            opted_in = entry is not None and entry.cluster.spec.shared_ingress.enabled
            assign(self._unrouted, key, value if opted_in and guest is None and isinstance(value, InvalidSpec) else None)
        return changed
