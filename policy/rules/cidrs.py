"""CIDR arithmetic the rules share: a CIDR's network (None when it is none), and whether one lies within others."""
from __future__ import annotations

import ipaddress
from typing import Iterable


def network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def within(cidr: str, allowed: Iterable[str]) -> bool:
    net = network(cidr)
    for x in allowed:
        a = network(x)
        if isinstance(net, ipaddress.IPv4Network) and isinstance(a, ipaddress.IPv4Network) and net.subnet_of(a):
            return True
        if isinstance(net, ipaddress.IPv6Network) and isinstance(a, ipaddress.IPv6Network) and net.subnet_of(a):
            return True
    return False
