"""What a tenant reads of a run's text: the one rule of what a mesh member may know of its peer. Pure.

    A mesh member may know of its peer what its own stack's inputs hold of its own side, no more.

A pair owner's StackInputs hold the peer too (`MeshShare.pairs[].peer`: its account, the role assumed there, its
VPC, route tables and security groups), because its stack builds the peer's side of the pair; they stay in the
run's Secret, in the service's namespace, which no tenant reads. The engine's text does not: a failed `up` quotes
the cloud's error for a route in the peer's table, the policy pack names the peer's tables and account, a preview
names resources called after the peer's route tables, a recovery names the URNs it cleared. So before engine text is
written where a tenant reads it (docs/security.md, "What a mesh member knows of its peer"), `redact` replaces every
AWS account ID, ARN and resource ID in it that `known_to` (the stack's inputs without its peers) does not hold. The
whole text stays only in the log lines of the service and the runners, which the hub administrator reads.

An allowlist, so an ID the inputs never held (the peer's VPN gateway the cloud named, a session ARN, a peering
made by the run) is redacted too; CIDR blocks, names and the pair's name are not IDs and stay.
"""
from __future__ import annotations

import json
import re
from typing import Callable, Collection

from stacks.inputs import StackInputs

# The ID prefixes of the resources a stack builds on or next to (EC2, VPC, Transit Gateway); longest first, so
# "tgw-attach-0a" is one ID, not "tgw-" and a word.
PREFIXES = tuple(sorted((
    "vpc", "subnet", "rtb", "rtbassoc", "sg", "sgr", "pcx", "tgw", "tgw-attach", "tgw-rtb", "igw", "eigw", "vgw",
    "cgw", "vpn", "nat", "eni", "eipalloc", "eipassoc", "vpce", "vpce-svc", "acl", "aclassoc", "pl", "dopt", "i",
    "lt", "fl"), key=len, reverse=True))
_STOP = r"\s\"'`,;()<>\[\]{}|"  # what ends an ARN in a sentence (besides a final '.' or ':')
_ID = re.compile(
    rf"(?P<arn>arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:\d{{0,12}}:[^{_STOP}]*[^{_STOP}.:])"
    # an ID: a prefix, a hyphen and letters and digits with at least one digit (so "sg-all" in a name is none)
    rf"|(?<![A-Za-z0-9])(?P<prefix>{'|'.join(PREFIXES)})-(?=[0-9a-z]*[0-9])[0-9a-z]+(?![A-Za-z0-9])"
    r"|(?P<account>(?<!\d)\d{12}(?!\d))")

Known = Collection[str] | Callable[[], Collection[str]]


def ids_in(text: str) -> list[str]:
    """The account IDs, ARNs and resource IDs in `text`, in order."""
    return [m.group(0) for m in _ID.finditer(text)]


def known_to(inputs: StackInputs | None) -> frozenset[str]:
    """The IDs a cluster's tenant may read: those its stack's inputs hold of its own side (its account, region, role,
    network, its endpoint's hub VPC, its gateway and attachment, the hub's account and role), not its peers'. No
    inputs: none."""
    if inputs is None:
        return frozenset()
    own = inputs.model_dump(mode="json", exclude={"mesh": {"limits": True, "pairs": {"__all__": {"peer"}}}})
    return frozenset(ids_in(json.dumps(own)))


def redact(text: str, known: Known) -> str:
    """`text` with every ID `known` does not hold replaced: `rtb-[redacted]`, `arn:[redacted]`, `[redacted
    account]`. `known` may be a function, asked only when the text has an ID. Idempotent."""
    if not text or _ID.search(text) is None:
        return text
    allowed = known() if callable(known) else known

    def one(m: re.Match[str]) -> str:
        if m.group(0) in allowed:
            return m.group(0)
        if m.group("arn"):
            return "arn:[redacted]"
        if m.group("prefix"):
            return f"{m.group('prefix')}-[redacted]"
        return "[redacted account]"
    return _ID.sub(one, text)
