"""DesiredView: what a worker thread may read of the desired state. Only the mapper resolves
(automation/service/mapper.py); the reconcilers read through this view and never drain or resolve."""
from __future__ import annotations

from typing import Protocol

from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.transit import TransitInputs


class DesiredView(Protocol):
    def inputs(self, key: str) -> StackInputs | InvalidSpec | None:
        """The cluster's desired StackInputs, its refusal, or None (no stack: registered only, or not resolved)."""

    def registered_only(self, key: str) -> bool:
        """Whether the cluster is registered only (no AWS part): it has no stack, by design."""

    def mesh_join(self, key: str, current: dict | None) -> dict | None:
        """The status.meshJoin the cluster should carry: the stamp handed out, else `current`."""

    def routed_id(self, key: str, current: str | None) -> str | None:
        """The status.sharedIngress.clusterID the cluster should carry: the ID it is routed on, else `current`."""

    def placed_in(self, key: str) -> tuple[str | None, str | None]:
        """(account, region) of the cluster as its input says; None where the input cannot tell."""

    def transit(self, stack: str) -> TransitInputs | None:
        """A transit stack's desired inputs; None when no mesh group uses it."""
