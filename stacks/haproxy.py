"""Shared ingress: the HAProxy configs of the central proxy and of each cluster's node-side proxy. Pure.

    pod ─► node proxy (proxyBind) ══ PROXY v2 + cluster ID ══► load balancer ─► central proxy ─► API server

The central proxy accepts only PROXY-protocol connections, reads the cluster ID
from the header (UNIQUE_ID TLV, or a custom TLV), looks it up in a map file
(ID → backend) and passes the TLS stream through untouched. The map file lets
the runtime API (`automation.adapters.files.haproxy`) change routes without a reload.

Everything here is a function of its arguments, sorted, so unchanged inputs give
byte-identical files.

Which clusters are routed is decided before this (stacks.resolve.resolve_all, by the rules of
stacks.ingress). This module is the second line of defence: it refuses every value it writes into a
config that holds whitespace, a control character or `#` (each would end an HAProxy argument, line or
section), or is not the grammar it should be. A bad route is dropped and listed in
`CentralConfig.dropped`; every other route is still rendered.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

import yaml

from stacks.ingress import Route
from stacks.inputs import SharedIngressInputs
from stacks.model.hub import WIRE_MODE_MIN_HAPROXY, HubSharedIngress
from stacks.names import CLUSTER_ID, format_host_port, parse_host_port, stack_name

WireMode = Literal["unique-id", "custom-tlv"]

MAP_FILE = "clusters.map"
CONFIG_FILE = "haproxy.cfg"
NO_ROUTE = "no_route"  # the backend of connections whose ID has no loaded backend
BACKEND_PREFIX = "cluster_"
GUEST_CONFIG_DIR = "/etc/kubernetes/hubwright-apiserver-proxy"  # on each node, for the static pod
GUEST_FOLDER = "guest"  # `ingress render` writes guest/<cluster>/haproxy.cfg
_HEADER = "# Rendered by hubwright (stacks.haproxy). Do not edit: re-render.\n"
_MAP_PATH = re.compile(r"/[-A-Za-z0-9._/]+")  # absolute; nothing HAProxy's argument parser would split on
_BACKEND_LINE = re.compile(r"backend (\S+)")
_CLUSTER_COMMENT = "# Cluster "  # in a central backend's section: which cluster it is (published_routes reads it)
# Anything that would end an HAProxy word, line or section, or start a comment.
_UNSAFE = re.compile(r"[\s#\x00-\x1f\x7f-\x9f\u2028\u2029\\\"']")


def safe(value: object, what: str) -> str:
    """`value` as text fit to interpolate into a config; ValueError naming `what` if it is not."""
    text = str(value)
    bad = _UNSAFE.search(text)
    if bad is not None or not text:
        shown = repr(text[:80])
        raise ValueError(f"{what} {shown} " + (f"holds {bad.group()!r}, which no value written into an HAProxy "
                                                 "config may hold" if bad else "is empty"))
    return text


def min_haproxy(wire_mode: WireMode) -> str:
    major, minor = WIRE_MODE_MIN_HAPROXY[wire_mode]
    return f"{major}.{minor}"


def id_fetch(wire_mode: WireMode, tlv_type: int = 0xE0) -> str:
    """The sample fetch that reads the cluster ID from the PROXY header the central proxy received."""
    if wire_mode == "unique-id":
        return "fc_pp_unique_id"  # HAProxy >= 2.2
    if wire_mode == "custom-tlv":
        return f"fc_pp_tlv(0x{tlv_type:02X})"  # HAProxy >= 2.9
    raise ValueError(f"unknown wire mode {wire_mode!r}")


def _check_id(cluster_id: str) -> str:
    if not isinstance(cluster_id, str) or not CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(f"cluster ID {cluster_id!r} is not 1-63 of [-A-Za-z0-9_.] starting with a letter or digit")
    return cluster_id


def _address(value: str, what: str, *, bind: bool = False) -> tuple[str, bool]:
    """(host:port as written into the config, whether the host is a name); ValueError if unsafe."""
    host, port = parse_host_port(safe(value, what), bind=bind)
    return format_host_port(host, port), isinstance(host, str)


def backend_name(route: Route) -> str:
    return BACKEND_PREFIX + route.cluster_id


# --- central -------------------------------------------------------------------

# Where the central proxy's pod (components/ingress.py) keeps things: the ConfigMap is mounted whole at
# CONFIG_DIR (a subPath mount would never update), /healthz answers on HEALTH_PORT.
CONFIG_DIR = "/usr/local/etc/haproxy"
HEALTH_PORT = 8404


@dataclass(frozen=True)
class CentralSettings:
    map_path: str  # absolute path of the map file as the proxy sees it
    bind: str = ":6443"
    wire_mode: WireMode = "unique-id"
    tlv_type: int = 0xE0
    health_bind: str | None = ":8404"  # GET /healthz for readiness probes and load balancer health checks
    maxconn: int | None = None  # None: HAProxy derives it from the file-descriptor limit it is given
    # Old processes keep serving their connections after a reload; this bounds how long.
    hard_stop_after: str | None = "1h"

    @classmethod
    def from_hub(cls, ingress: HubSharedIngress, *, map_path: str, **overrides) -> "CentralSettings":
        return cls(**{"map_path": map_path, "bind": ingress.bind, "wire_mode": ingress.wire_mode,
                      "tlv_type": ingress.tlv_type, **overrides})


@dataclass(frozen=True)
class CentralConfig:
    config: str  # haproxy.cfg
    map: str  # the map file: cluster ID → backend name
    map_path: str
    dropped: tuple[tuple[Route, str], ...] = ()  # routes refused by the renderer, and why: not rendered

    def routes(self) -> dict[str, str]:
        return parse_map(self.map)

    def sections(self) -> tuple[str, dict[str, str]]:
        """(everything but the cluster backends, {backend name: its section}) — what a reload changes."""
        return split_backends(self.config)


def render_for_proxy(ingress: HubSharedIngress, routes: Iterable[Route]) -> CentralConfig:
    """The files of the central proxy's ConfigMap, as its pod reads them: what the CentralProxy component
    creates and what the service keeps current (automation/adapters/kube/ingress_sync.py)."""
    settings = CentralSettings.from_hub(ingress, map_path=f"{CONFIG_DIR}/{MAP_FILE}", health_bind=f":{HEALTH_PORT}")
    return render_central(settings, routes)


def render_central(settings: CentralSettings, routes: Iterable[Route]) -> CentralConfig:
    """The central proxy's config and map. A bad setting (the hub administrator's) raises ValueError;
    a bad route (a tenant's) is dropped into `dropped` and the others are rendered."""
    if not _MAP_PATH.fullmatch(settings.map_path):
        raise ValueError(f"map path {settings.map_path!r} must be absolute and without spaces, commas or brackets")
    bind, _ = _address(settings.bind, "bind", bind=True)
    health_bind = _address(settings.health_bind, "health bind", bind=True)[0] if settings.health_bind else None
    if settings.hard_stop_after is not None:
        safe(settings.hard_stop_after, "hard-stop-after")
    kept, dropped = _check_routes(routes)
    fetch = id_fetch(settings.wire_mode, settings.tlv_type)
    lookup = f"{fetch},map({settings.map_path})"

    out = [_HEADER]
    out.append(f"# Central proxy: routes PROXY v2 connections by the cluster ID in {fetch} "
               f"(wire mode {settings.wire_mode}, HAProxy >= {min_haproxy(settings.wire_mode)}).\n\n")
    out.append(_global(settings.maxconn, settings.hard_stop_after))
    out.append(_defaults())
    if any(by_name for _, _, by_name in kept):
        out.append(_RESOLVERS)
    out.append(
        "frontend shared_ingress\n"
        f"    bind {bind} accept-proxy\n"
        f'    log-format "%ci:%cp id=%[{fetch}] %ft %b/%s %Tw/%Tc/%Tt %B %ts %ac/%fc/%bc/%sc/%rc"\n'
        "    # No ID, or an ID that is not in the map: refused.\n"
        f"    tcp-request content reject unless {{ {lookup} -m found }}\n"
        f"    use_backend %[{lookup}]\n"
        f"    default_backend {NO_ROUTE}\n\n"
    )
    if health_bind:
        out.append(
            "frontend healthz\n"
            f"    bind {health_bind}\n"
            "    mode http\n"
            "    timeout client 10s\n"
            "    monitor-uri /healthz\n\n"
        )
    out.append(f"backend {NO_ROUTE}\n    # An ID whose backend this process has not loaded yet (reload pending).\n"
               "    tcp-request content reject\n\n")
    for route, backend, by_name in kept:
        out.append(_central_backend(route, backend, by_name))
    config = "".join(out).rstrip("\n") + "\n"
    return CentralConfig(config=config, map=render_map({r.cluster_id: backend_name(r) for r, _, _ in kept}),
                         map_path=settings.map_path, dropped=tuple(dropped))


def dropped_lines(dropped: Iterable[tuple[Route, str]]) -> list[str]:
    """One line per route the renderer dropped, naming its cluster and why."""
    return [f"Cluster {route.cluster or route.cluster_id}: not routed: {why}" for route, why in dropped]


def _check_routes(routes: Iterable[Route]) -> tuple[list[tuple[Route, str, bool]], list[tuple[Route, str]]]:
    """(route, its backend as written, whether it is a name) of each route fit to render, sorted by ID;
    and each other route with why it is dropped. Of two routes with one ID, the first given is kept."""
    kept: dict[str, tuple[Route, str, bool]] = {}
    dropped: list[tuple[Route, str]] = []
    for route in routes:
        try:
            _check_id(route.cluster_id)
            if route.cluster_id in kept:
                raise ValueError(f"cluster ID {route.cluster_id!r} is already routed to "
                                 f"{kept[route.cluster_id][0].cluster or 'another cluster'}")
            backend, by_name = _address(route.backend, "backend")
            for cidr in route.allowed_source_cidrs:
                ipaddress.ip_network(safe(cidr, "allowed source CIDR"), strict=False)
            if route.cluster:
                safe(route.cluster, "cluster")
        except (ValueError, TypeError) as exc:
            dropped.append((route, str(exc)))
            continue
        kept[route.cluster_id] = (route, backend, by_name)
    return [kept[cid] for cid in sorted(kept)], dropped


def _global(maxconn: int | None, hard_stop_after: str | None) -> str:
    # An explicit maxconn above what `ulimit -n` allows makes HAProxy refuse to start.
    lines = ["global", "    log stdout format raw local0"] + ([f"    maxconn {maxconn}"] if maxconn else [])
    if hard_stop_after:
        lines.append(f"    hard-stop-after {hard_stop_after}")
    return "\n".join(lines) + "\n\n"


def _defaults() -> str:
    # TLS passthrough: layer 4 only. The client/server timeouts cover the PROXY header and the
    # connect; once both sides are up the tunnel timeout applies (long-lived API watches).
    return (
        "defaults\n"
        "    mode tcp\n"
        "    log global\n"
        "    timeout connect 10s\n"
        "    timeout client 30s\n"
        "    timeout server 30s\n"
        "    timeout tunnel 24h\n\n"
    )


_RESOLVERS = (
    "resolvers dns\n"
    "    parse-resolv-conf\n"
    "    hold valid 10s\n\n"
)


def _server(name: str, address: str, by_name: bool, extra: str = "") -> str:
    # A name that does not resolve yet leaves this one server down, never the whole proxy.
    dns = " resolvers dns init-addr libc,none" if by_name else ""
    return f"    server {name} {address}{dns}{extra}\n"


def _central_backend(route: Route, backend: str, by_name: bool) -> str:
    lines = [f"backend {backend_name(route)}\n"]
    if route.cluster:
        lines.append(f"    {_CLUSTER_COMMENT}{route.cluster}\n")
    if route.allowed_source_cidrs:
        nets = sorted({ipaddress.ip_network(c, strict=False) for c in route.allowed_source_cidrs},
                      key=lambda n: (n.version, n.network_address.packed, n.prefixlen))
        cidrs = [str(n) for n in nets]
        # `src` is the client address carried in the PROXY header, not the load balancer's.
        lines.append(f"    tcp-request content reject unless {{ src {' '.join(cidrs)} }}\n")
    lines.append(_server("api", backend, by_name))
    return "".join(lines) + "\n"


def render_map(routes: Mapping[str, str]) -> str:
    lines = ["# cluster ID -> backend. Rendered by hubwright; changed at run time through the runtime API."]
    lines += [f"{_check_id(cid)} {routes[cid]}" for cid in sorted(routes)]
    return "\n".join(lines) + "\n"


def parse_map(text: str) -> dict[str, str]:
    routes: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            routes[key] = value.strip()
    return routes


def split_backends(config: str) -> tuple[str, dict[str, str]]:
    """Split a rendered central config into its fixed part and its per-cluster backend sections."""
    fixed: list[str] = []
    backends: dict[str, list[str]] = {}
    current: list[str] = fixed
    for line in config.splitlines(keepends=True):
        if line.strip() and not line[0].isspace():  # a section header
            found = _BACKEND_LINE.fullmatch(line.strip())
            if found and found[1].startswith(BACKEND_PREFIX):
                current = backends.setdefault(found[1], [])
                current.append(line)
                continue
            current = fixed
        current.append(line)
    tidy = lambda lines: "".join(lines).rstrip("\n") + "\n"  # noqa: E731 (the last section has no blank line after it)
    return tidy(fixed), {name: tidy(lines) for name, lines in backends.items()}


def published_routes(files: Mapping[str, str]) -> dict[str, str]:
    """Cluster (namespace/name) -> the ID the central proxy routes to it, read from the central files as
    `render_for_proxy` wrote them (the shared-ingress ConfigMap's data): an ID counts when the map sends it to a
    backend whose section names the cluster. What the proxy routes, not what anyone asked for."""
    routes = parse_map(files.get(MAP_FILE) or "")
    _, backends = split_backends(files.get(CONFIG_FILE) or "")
    published: dict[str, str] = {}
    for cluster_id, backend in routes.items():
        section = backends.get(backend)
        if backend != BACKEND_PREFIX + cluster_id or section is None:
            continue
        for line in section.splitlines()[1:]:
            comment = line.strip()
            if comment.startswith(_CLUSTER_COMMENT):
                published[comment[len(_CLUSTER_COMMENT):].strip()] = cluster_id
                break
    return published


# --- guest ---------------------------------------------------------------------

def render_guest(guest: SharedIngressInputs, *, maxconn: int | None = None) -> str:
    """The node-side proxy: listen on proxyBind, pass TCP to the central address with PROXY v2 + the ID."""
    cluster_id = _check_id(guest.cluster_id)
    proxy_bind, _ = _address(guest.proxy_bind, "proxy bind", bind=True)
    central, central_by_name = _address(guest.central_address, "central address")
    if guest.wire_mode == "unique-id":
        # The stream's unique ID is the cluster ID; proxy-v2-options unique-id sends it as the UNIQUE_ID TLV.
        id_line = f"    unique-id-format {cluster_id}\n"
        send = " send-proxy-v2 proxy-v2-options unique-id"
    elif guest.wire_mode == "custom-tlv":
        id_line = ""
        send = f" send-proxy-v2 set-proxy-v2-tlv-fmt(0x{guest.tlv_type:02X}) {cluster_id}"
    else:
        raise ValueError(f"unknown wire mode {guest.wire_mode!r}")
    out = [_HEADER]
    out.append(f"# Node-side proxy of cluster ID {cluster_id}: PROXY v2 with the ID to the shared ingress "
               f"(wire mode {guest.wire_mode}, HAProxy >= {min_haproxy(guest.wire_mode)}).\n\n")
    out.append(_global(maxconn, None))
    out.append(_defaults())
    if central_by_name:
        out.append(_RESOLVERS)
    out.append("listen kube_apiserver\n")
    out.append(f"    bind {proxy_bind}\n")
    out.append(id_line)
    out.append(_server("shared_ingress", central, central_by_name, send))
    return "".join(out)


class _Literal(str):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|"))


def guest_manifests(guest: SharedIngressInputs) -> dict[str, str]:
    """The cluster's stack output `sharedIngress`: the node-side proxy's config, a ConfigMap and a static pod (YAML).

    The static pod reads the config from GUEST_CONFIG_DIR on the node (static pods cannot mount
    ConfigMaps); the config-hash annotation changes with the config, so the kubelet restarts it.
    """
    config = render_guest(guest)
    digest = hashlib.sha256(config.encode()).hexdigest()[:16]
    labels = {"app.kubernetes.io/name": "hubwright-apiserver-proxy", "hubwright.io/cluster-id": guest.cluster_id}
    config_map = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hubwright-apiserver-proxy", "namespace": "kube-system", "labels": labels},
        "data": {CONFIG_FILE: _Literal(config)},
    }
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hubwright-apiserver-proxy", "namespace": "kube-system", "labels": labels,
                     "annotations": {"hubwright.io/config-hash": digest}},
        "spec": {
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "containers": [{
                "name": "haproxy",
                "image": guest.image,
                "command": ["haproxy", "-f", f"/usr/local/etc/haproxy/{CONFIG_FILE}"],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/usr/local/etc/haproxy", "readOnly": True}],
            }],
            "volumes": [{"name": "config", "hostPath": {"path": GUEST_CONFIG_DIR, "type": "Directory"}}],
        },
    }
    dump = lambda doc: yaml.dump(doc, Dumper=_Dumper, sort_keys=True, default_flow_style=False)  # noqa: E731
    return {
        "clusterID": guest.cluster_id,
        "centralAddress": guest.central_address,
        "proxyBind": guest.proxy_bind,
        "wireMode": guest.wire_mode,
        "haproxyCfg": config,
        "configMap": dump(config_map),
        "staticPod": dump(pod),
    }


def rendered_by_us(text: str) -> bool:
    """True when `text` starts as every config rendered here starts."""
    return text.startswith(_HEADER)


def guest_files(guests: Sequence[tuple[str, SharedIngressInputs]]) -> dict[str, str]:
    """{relative path: text} of the guests' configs under guest/<cluster name>/ (namespace.name on a clash)."""
    per_name = Counter(key.partition("/")[2] for key, _ in guests)
    files = {}
    for key, guest in sorted(guests, key=lambda g: g[0]):
        namespace, _, name = key.partition("/")
        folder = name if per_name[name] == 1 else stack_name(namespace, name)
        files[f"{GUEST_FOLDER}/{folder}/{CONFIG_FILE}"] = render_guest(guest)
    return files
