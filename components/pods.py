"""What every container hubwright runs is held to (the service, its runners, the registry API, the console, the
central ingress proxy): no privilege escalation, a read-only root filesystem, no Linux capabilities."""
from __future__ import annotations

from typing import Any


def hardened_container() -> dict[str, Any]:
    """A container's securityContext: a new dict each call (a manifest may add to its own)."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
