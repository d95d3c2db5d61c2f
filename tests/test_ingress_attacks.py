"""A tenant against the shared proxy (issue: shared proxy hardening). Each attack is refused or contained, and the
other tenants' routes are provably unaffected. docs/security.md lists the boundaries; the rules live in
stacks/ingress.py, the renderer's own line of defence in stacks/haproxy.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pytest
import yaml

from automation.cli import main
from stacks.haproxy import CentralSettings, render_central, render_guest
from automation.adapters.files.haproxy import MasterCLI, parse_show_proc
from stacks.crds import cluster_crd, hubconfig_crd
from stacks.errors import InvalidSpec
from stacks.ingress import BACKEND_NOT_ALLOWED, ID_NOT_ALLOWED, Route
from stacks.inputs import SharedIngressInputs
from stacks.model.loading import parse, resolved_part
from stacks.names import (ALLOWED_BACKENDS_ANNOTATION, BIND_PATTERN, CLUSTER_ID, CLUSTER_ID_PREFIXES_ANNOTATION,
                          HOST_PORT_PATTERN, MESH_ENABLED_ANNOTATION, MESH_LABEL, default_cluster_id)
from stacks.resolve import resolve_all
from doubles.factories import INGRESS, NAMESPACES, cluster, cluster_doc, fleet, hub, hub_doc, namespace_doc, owned
from tests.envtest import free_port
from tests.haproxy import HAPROXY, MISSING, check_central, wait_for_master, wait_for_port

needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason=MISSING)

MAP = "/etc/haproxy/clusters.map"
# What the reported injection wrote: a program section that runs a shell as the proxy's user (root under -W),
# and a second global section that opens an admin socket.
INJECTION = ("10.0.0.9:6443\nprogram pwn\n    command sh -c 'touch /tmp/pwned'\n"
             "global\n    stats socket /tmp/admin.sock level admin")
BROKEN = "10.9.9.9 x:6443"  # accepted before; haproxy -c then refused every central config


def opted_in(name: str = "prod-1", backend: str = "10.0.1.10:6443", namespace: str = "acme", **kw) -> dict:
    ingress = {"enabled": True, "backend": backend, **kw.pop("ingress", {})}
    return cluster_doc(name, namespace, sharedIngress=ingress, **kw)


def sections(config: str) -> list[str]:
    """The section keywords of an HAProxy config, in order (a section starts at column 0)."""
    return [line.split()[0] for line in config.splitlines() if line and not line[0].isspace() and line[0] != "#"]


def refusal(doc: dict) -> str:
    with pytest.raises(InvalidSpec) as caught:
        parse(doc)
    return str(caught.value)


# --------------------------------------------------------------------------- 1. config injection

@pytest.mark.parametrize("backend", [
    INJECTION, BROKEN, "10.0.0.1:6443#", "10.0.0.1:6443 ", "\t10.0.0.1:6443", "kas.svc:6443\r", "kas.svc:64\x0043",
    "kas.svc:6443\u2028global", "kas svc:6443", "kas#x.svc:6443", "kas.svc:6443 check", "10.0.0.1:0", "10.0.0.1:65536",
    "010.0.0.1:6443", "10.0.0:6443", "::1:6443", "[::1%eth0]:6443", "[not-v6]:6443", "kas.svc", ":6443",
    "-kas.svc:6443", "kas..svc:6443", "kas.svc:+6443", "kas.svc:6443:1", "ḱas.svc:6443", "[::1]]:6443", "x" * 301,
])
def test_the_model_refuses_any_backend_outside_the_host_port_grammar(backend):
    message = refusal(opted_in(backend=backend))
    assert "HubCluster acme/prod-1: spec.sharedIngress.backend: " in message


@pytest.mark.parametrize("backend", [
    "10.0.0.1:6443", "[fd00::1]:6443", "[::ffff:10.0.0.1]:443", "kube-apiserver.clusters-prod-1.svc:6443",
    "KAS.Example.COM:1", "api:65535", "a1b2.elb.us-east-1.amazonaws.com:6443",
])
def test_the_model_accepts_names_ipv4_and_bracketed_ipv6(backend):
    assert parse(opted_in(backend=backend)).spec.shared_ingress.backend == backend


def test_the_crd_schema_carries_the_grammar_so_the_api_server_refuses_what_it_can():
    ingress = cluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "sharedIngress"]["properties"]
    hub_ingress = hubconfig_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["sharedIngress"]["properties"]
    assert ingress["backend"]["pattern"] == HOST_PORT_PATTERN == hub_ingress["address"]["pattern"]
    assert hub_ingress["bind"]["pattern"] == BIND_PATTERN
    assert hub_ingress["allowedBackends"]["items"]["pattern"]
    for value in (INJECTION, BROKEN, "10.0.0.1:6443#", "kas.svc:6443 check", "kas.svc", ":6443"):
        assert not re.search(HOST_PORT_PATTERN, value), value  # Kubernetes patterns search, anchored here
    for value in ("10.0.0.1:6443", "[fd00::1]:6443", "kas.ns.svc:6443"):
        assert re.search(HOST_PORT_PATTERN, value)
    assert re.search(BIND_PATTERN, ":6443") and not re.search(BIND_PATTERN, ":6443\nglobal")


@pytest.mark.parametrize("value", [INJECTION, BROKEN, "10.0.0.1:6443#x", "10.0.0.1:6443\x7f", "[::1]:6443 backup",
                                   "kas.svc:6443\u00a0", "kas.svc:6443\u2029", "kas.svc:6443\"", "kas.svc:6443'",
                                   "kas.svc:6443\\", ""])
def test_the_renderer_drops_a_route_the_model_would_refuse_and_renders_every_other(value):
    good = [Route("a", "10.0.1.10:6443", cluster="acme/a"), Route("c", "kas.c.svc:6443", cluster="acme/c")]
    bad = Route("b", value, cluster="acme/b")
    rendered = render_central(CentralSettings(map_path=MAP), [good[0], bad, good[1]])
    assert [route for route, _ in rendered.dropped] == [bad]
    assert rendered == render_central(CentralSettings(map_path=MAP), good).__class__(
        config=rendered.config, map=rendered.map, map_path=MAP, dropped=rendered.dropped)
    assert rendered.config == render_central(CentralSettings(map_path=MAP), good).config
    assert set(rendered.routes()) == {"a", "c"}
    assert sections(rendered.config).count("global") == 1 and "program" not in sections(rendered.config)


@pytest.mark.parametrize("field, value", [
    ("cluster_id", "a\nglobal"), ("cluster_id", "a b"), ("cluster_id", "a#"), ("cluster", "acme/a\nprogram x"),
    ("allowed_source_cidrs", ("10.0.0.0/8 0.0.0.0/0",)), ("allowed_source_cidrs", ("10.0.0.0/8\nglobal",)),
    ("allowed_source_cidrs", ("not-a-cidr",)),
])
def test_the_renderer_checks_every_value_it_interpolates_not_only_the_backend(field, value):
    route = Route(**{"cluster_id": "b", "backend": "10.0.0.2:6443", "cluster": "acme/b", field: value})
    rendered = render_central(CentralSettings(map_path=MAP), [Route("a", "10.0.1.10:6443"), route])
    assert [r for r, _ in rendered.dropped] == [route] and set(rendered.routes()) == {"a"}
    assert "\nprogram" not in rendered.config and sections(rendered.config).count("global") == 1


@pytest.mark.parametrize("settings", [{"bind": ":6443\nprogram x"}, {"bind": "0.0.0.0:6443 ssl"},
                                      {"health_bind": ":8404\nglobal"}, {"hard_stop_after": "1h\nprogram x"}])
def test_a_bad_setting_of_the_hub_raises_instead_of_rendering(settings):
    with pytest.raises(ValueError, match="bind|hard-stop-after"):
        render_central(CentralSettings(map_path=MAP, **settings), [])


@pytest.mark.parametrize("field, value", [("central_address", "lb:6443\nglobal"), ("proxy_bind", "1.2.3.4:6443 x"),
                                          ("cluster_id", "a\nb")])
def test_a_guest_config_is_never_rendered_with_an_unsafe_value(field, value):
    guest = SharedIngressInputs.model_construct(**{"cluster_id": "a", "central_address": "lb.example.com:6443",
                                                   "proxy_bind": "172.31.0.1:6443", "wire_mode": "unique-id",
                                                   "tlv_type": 0xE0, "image": "haproxy:3.0", field: value})
    with pytest.raises(ValueError):
        render_guest(guest)


@pytest.mark.live
@needs_haproxy
def test_an_injected_backend_never_adds_a_section_and_the_proxy_runs_nothing(tmp_path):
    """The reported attack, end to end: through `ingress render` and through the renderer, with real HAProxy."""
    marker, admin = tmp_path / "pwned", tmp_path / "admin.sock"
    injection = INJECTION.replace("/tmp/pwned", str(marker)).replace("/tmp/admin.sock", str(admin))
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc(sharedIngress={**INGRESS, "bind": "127.0.0.1:16443"})))
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "fleet.yaml").write_text(yaml.safe_dump_all([
        namespace_doc("acme"), opted_in("victim"), opted_in("evil", injection)]))
    code = main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")])
    assert code == 2
    written = (tmp_path / "out" / "central" / "haproxy.cfg").read_text()
    assert sections(written) == ["global", "defaults", "frontend", "frontend", "backend", "backend"]
    assert "cluster_acme.victim" in written and "evil" not in written and "pwn" not in written
    assert sorted(p.name for p in (tmp_path / "out" / "guest").iterdir()) == ["victim"]

    # Past the model (a Route built by hand): the renderer drops it; HAProxy, started as the central proxy
    # runs (-W), checks and runs the config, and nothing the tenant wrote executes.
    port = free_port()
    rendered = render_central(CentralSettings(map_path=str(tmp_path / "clusters.map"), bind=f"127.0.0.1:{port}",
                                              health_bind=None),
                              [Route("victim", "10.0.1.10:6443"), Route("evil", injection)])
    assert [r.cluster_id for r, _ in rendered.dropped] == ["evil"]
    assert check_central(rendered).returncode == 0
    (tmp_path / "central.cfg").write_text(rendered.config)
    master = os.path.join(tempfile.mkdtemp(prefix="inj-"), "master.sock")  # unix paths stop at 107 bytes
    proc = subprocess.Popen([HAPROXY, "-W", "-db", "-S", master, "-f", str(tmp_path / "central.cfg")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)  # the master has started everything the config asks for
        wait_for_master(master, proc)
        listed = MasterCLI(master).command("show proc")
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert len(parse_show_proc(listed).workers) == 1
    assert listed.split("# programs", 1)[1].strip() == ""  # the master runs no program at all
    assert not marker.exists() and not admin.exists()


# --------------------------------------------------------------------------- 3. misdirection

OPEN_HUB = hub(sharedIngress={**INGRESS, "allowedBackends": ["0.0.0.0/0", "::/0", "svc", "local", "localhost",
                                                             "internal", "default", "kubernetes"]})


@pytest.mark.parametrize("backend, why", [
    ("169.254.169.254:80", "link-local"),
    ("169.254.170.2:80", "link-local"),  # ECS task metadata
    ("[fd00:ec2::254]:80", "link-local"),
    ("[fe80::1]:80", "link-local"),
    ("127.0.0.1:6443", "loopback"),
    ("127.8.9.1:8404", "loopback"),
    ("[::1]:6443", "loopback"),
    ("[::ffff:127.0.0.1]:6443", "loopback"),
    ("[::ffff:169.254.169.254]:80", "link-local"),
    ("0.0.0.0:6443", "unspecified"),
    ("[::]:6443", "unspecified"),
    ("224.0.0.1:6443", "multicast"),
    ("255.255.255.255:6443", "multicast"),
    ("localhost:8404", "localhost"),
    ("api.localhost:6443", "localhost"),
    ("kubernetes:443", "management cluster's own API server"),
    ("kubernetes.default:443", "management cluster's own API server"),
    ("kubernetes.default.svc:443", "management cluster's own API server"),
    ("KUBERNETES.default.svc.cluster.local:443", "management cluster's own API server"),
    ("instance-data.ec2.internal:80", "instance metadata"),
    ("shared-ingress.hubwright-ingress.svc:8404", "where the central proxy itself runs"),
    ("anything.hubwright-ingress.svc.cluster.local:6443", "where the central proxy itself runs"),
    ("lb.example.com:6443", "own load balancer"),
    ("lb.example.com:8404", "own load balancer"),
])
def test_the_proxy_never_dials_itself_metadata_or_the_management_api_whatever_the_hub_allows(backend, why):
    result = resolve_all(fleet(OPEN_HUB, [cluster(sharedIngress={"enabled": True, "backend": backend})]))
    assert result.routes == ()
    refused = result.unrouted["acme/prod-1"]
    assert refused.reason == BACKEND_NOT_ALLOWED and result.inputs["acme/prod-1"] is refused
    assert refused.errors[0].field == "spec.sharedIngress.backend" and why in refused.errors[0].reason


def test_the_proxy_never_dials_its_own_listener():
    own = hub(sharedIngress={**INGRESS, "bind": "10.0.0.5:6443"})
    result = resolve_all(fleet(own, [cluster(sharedIngress={"enabled": True, "backend": "10.0.0.5:9000"})]))
    assert "own listener" in str(result.unrouted["acme/prod-1"])


@pytest.mark.parametrize("allowed, backend, routed", [
    ([], "10.0.1.10:6443", False),  # the default: nowhere until the hub administrator says where
    (["10.0.0.0/16"], "10.0.1.10:6443", True),
    (["10.0.0.0/16"], "10.1.0.1:6443", False),
    (["10.0.0.0/16"], "[::ffff:10.0.1.10]:6443", True),  # the kernel dials 10.0.1.10
    (["10.0.0.0/16"], "kas.svc:6443", False),  # a CIDR never admits a name
    (["fd00:1::/32"], "[fd00:1::5]:6443", True),
    (["svc.cluster.local"], "kas.prod.svc.cluster.local:6443", True),
    (["svc.cluster.local"], "kas.prod.svc.cluster.local.evil.com:6443", False),
    (["svc.cluster.local"], "evilsvc.cluster.local:6443", False),  # a suffix is whole labels
    (["svc.cluster.local"], "10.0.1.10:6443", False),  # a domain never admits an address
])
def test_the_hub_allow_list_decides_everything_else(allowed, backend, routed):
    h = hub(sharedIngress={**INGRESS, "allowedBackends": allowed})
    result = resolve_all(fleet(h, [cluster(sharedIngress={"enabled": True, "backend": backend})]))
    assert bool(result.routes) is routed
    if not routed:
        assert "outside HubConfig default spec.sharedIngress.allowedBackends" in str(result.unrouted["acme/prod-1"])


def test_a_namespace_annotation_narrows_its_tenants_backends_so_one_tenant_cannot_aim_at_anothers():
    namespaces = {**NAMESPACES, "acme": owned("222222222222", **{ALLOWED_BACKENDS_ANNOTATION: "acme.svc, 10.1.0.0/16"}),
                  "globex": owned("333333333333", **{ALLOWED_BACKENDS_ANNOTATION: "globex.svc"})}
    clusters = [cluster("own", sharedIngress={"enabled": True, "backend": "kas.acme.svc:6443"}),
                cluster("ip", sharedIngress={"enabled": True, "backend": "10.1.2.3:6443"}),
                cluster("aim", sharedIngress={"enabled": True, "backend": "kas.globex.svc:6443"})]
    result = resolve_all(fleet(hub(sharedIngress=INGRESS), clusters, namespaces=namespaces))
    assert [r.cluster for r in result.routes] == ["acme/ip", "acme/own"]
    assert "outside what namespace acme may use (acme.svc, 10.1.0.0/16" in str(result.unrouted["acme/aim"])


def test_a_bad_allow_list_is_refused_where_it_is_written():
    assert "spec.sharedIngress.allowedBackends[0]" in refusal(hub_doc(sharedIngress={"allowedBackends": ["10.0.0.1/8"]}))
    assert "spec.sharedIngress.allowedBackends[0]" in refusal(hub_doc(sharedIngress={"allowedBackends": ["a b"]}))
    namespaces = {"acme": owned("222222222222", **{ALLOWED_BACKENDS_ANNOTATION: "10.0.0.0/33"})}
    result = resolve_all(fleet(hub(sharedIngress=INGRESS), [cluster(sharedIngress={"enabled": True,
                                                                                   "backend": "10.0.0.1:6443"})],
                               namespaces=namespaces))
    assert result.unrouted["acme/prod-1"].reason == "InvalidNamespaceAnnotation"


# --------------------------------------------------------------------------- 4. route exactly what passes

MESH = {"labels": {MESH_LABEL: "payments"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}}


def refused_and_routed_fleet():
    def opted(name, n, **spec):
        return parse(opted_in(name, f"10.0.{n}.10:6443", **spec))

    return fleet(hub(sharedIngress=INGRESS), [
        opted("good", 1),
        opted("mismatch", 2, accountID="333333333333"),  # acme owns 222222222222
        opted("nowhere", 3, region="ap-south-1"),  # no endpoint VPC of the inventory there
        opted("metadata", 4, ingress={"backend": "169.254.169.254:80"}),
        opted("mesh-a", 5, network={"vpcID": "vpc-0a", "cidr": "10.60.0.0/16", "routeTableIDs": ["rtb-0a"], "nodeSecurityGroupIDs": ["sg-0a"]}, **MESH),
        opted("mesh-b", 6, network={"vpcID": "vpc-0b", "cidr": "10.60.0.0/16", "routeTableIDs": ["rtb-0b"], "nodeSecurityGroupIDs": ["sg-0b"]}, **MESH),  # overlaps mesh-a
        parse(cluster_doc("plain")),  # not opted in
    ])


def test_exactly_the_clusters_whose_ingress_account_and_namespace_checks_pass_are_routed():
    result = resolve_all(refused_and_routed_fleet())
    assert [r.cluster for r in result.routes] == ["acme/good", "acme/mesh-a", "acme/mesh-b"]
    assert {key: problem.reason for key, problem in result.unrouted.items()} == {
        "acme/mismatch": "AccountMismatch", "acme/nowhere": "NoEndpointVPC", "acme/metadata": BACKEND_NOT_ALLOWED}
    # The mesh overlap stalls mesh-b's stack, not its route: the problem lies between peers.
    assert isinstance(result.inputs["acme/mesh-b"], InvalidSpec) and "overlap" in str(result.inputs["acme/mesh-b"])
    assert result.inputs["acme/good"].shared_ingress.cluster_id == "acme.good"  # namespace-qualified


def test_a_refused_cluster_claims_no_id_so_it_cannot_take_one_from_a_younger_good_cluster():
    old = opted_in("old", "169.254.169.254:80", ingress={"clusterID": "acme.shared"})
    old["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    young = opted_in("young", ingress={"clusterID": "acme.shared"})
    young["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    result = resolve_all(fleet(hub(sharedIngress=INGRESS), [parse(old), parse(young)]))
    assert [(r.cluster_id, r.cluster) for r in result.routes] == [("acme.shared", "acme/young")]


def test_ingress_render_routes_the_same_clusters_and_lists_the_others(tmp_path, capsys):
    routed = refused_and_routed_fleet()
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc(sharedIngress=INGRESS)))
    (tmp_path / "clusters").mkdir()
    docs = [c.model_dump(by_alias=True, exclude_none=True) for c in routed.clusters] + [namespace_doc("acme")]
    (tmp_path / "clusters" / "fleet.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "clusters" / "broken.yaml").write_text(yaml.safe_dump(opted_in("broken", BROKEN)))
    code = main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    routes = dict(line.split() for line in (tmp_path / "out/central/clusters.map").read_text().splitlines()
                  if not line.startswith("#"))
    assert set(routes) == {"acme.good", "acme.mesh-a", "acme.mesh-b"}
    assert sorted(p.name for p in (tmp_path / "out/guest").iterdir()) == ["good", "mesh-a", "mesh-b"]
    for name in ("mismatch", "nowhere", "metadata", "broken"):
        assert f"HubCluster acme/{name}" in err
    assert "spec.sharedIngress.backend" in err and "overlap" not in err


def test_re_rendering_removes_the_guest_folders_of_clusters_no_longer_routed_and_nothing_else(tmp_path, capsys):
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub_doc(sharedIngress=INGRESS)))
    (tmp_path / "clusters").mkdir()
    fleet_file = tmp_path / "clusters" / "fleet.yaml"
    args = ["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
            "--out", str(tmp_path / "out")]
    fleet_file.write_text(yaml.safe_dump_all([namespace_doc("acme"), opted_in("a", "10.0.1.1:6443"),
                                              opted_in("b", "10.0.1.2:6443"), opted_in("c", "10.0.1.3:6443")]))
    assert main(args) == 0
    kept = tmp_path / "out" / "guest" / "mine"
    kept.mkdir()
    (kept / "haproxy.cfg").write_text("# someone else's\n")  # not rendered by us: left alone
    (tmp_path / "out" / "guest" / "b" / "notes.txt").write_text("kept")

    fleet_file.write_text(yaml.safe_dump_all([namespace_doc("acme"), opted_in("a", "10.0.1.1:6443")]))
    assert main(args) == 0
    assert sorted(p.name for p in (tmp_path / "out" / "guest").iterdir()) == ["a", "b", "mine"]
    assert sorted(p.name for p in (tmp_path / "out" / "guest" / "b").iterdir()) == ["haproxy.cfg", "notes.txt"]
    assert f"removed {tmp_path / 'out' / 'guest' / 'c'}" in capsys.readouterr().err


# --------------------------------------------------------------------------- 5. ID squatting (issue 31, item 4)

def squatting_fleet(*, acme_ingress=None, globex_ingress=None, namespaces=None, acme_status=None):
    """globex/prod-1 created first, acme/prod-1 second, both opted in."""
    globex = opted_in("prod-1", "10.0.2.20:6443", namespace="globex", accountID="333333333333",
                      apiURL="https://api.prod-1.globex.example.com:6443", ingress=globex_ingress or {})
    globex["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    acme = opted_in("prod-1", "10.0.1.10:6443", ingress=acme_ingress or {})
    acme["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    if acme_status:
        acme["status"] = acme_status
    return fleet(hub(sharedIngress=INGRESS), [parse(globex), parse(acme)], namespaces=namespaces)


def test_a_tenant_cannot_take_another_namespaces_cluster_id_by_creating_its_cluster_first():
    result = resolve_all(squatting_fleet())
    assert {r.cluster_id: (r.cluster, r.backend) for r in result.routes} == {
        "globex.prod-1": ("globex/prod-1", "10.0.2.20:6443"), "acme.prod-1": ("acme/prod-1", "10.0.1.10:6443")}
    assert not result.unrouted


@pytest.mark.parametrize("squat", ["acme.prod-1", "prod-1", "acme-prod-1"])
def test_an_explicit_id_outside_the_namespaces_prefix_is_refused_naming_field_and_rule(squat):
    result = resolve_all(squatting_fleet(globex_ingress={"clusterID": squat}))
    [route] = result.routes
    assert (route.cluster_id, route.cluster, route.backend) == ("acme.prod-1", "acme/prod-1", "10.0.1.10:6443")
    refused = result.unrouted["globex/prod-1"]
    assert refused.reason == ID_NOT_ALLOWED
    assert f"HubCluster globex/prod-1: spec.sharedIngress.clusterID: {squat!r} does not start with a prefix " \
           "namespace globex may use ('globex.'" in str(refused)
    assert CLUSTER_ID_PREFIXES_ANNOTATION in str(refused)


def test_the_hub_administrator_grants_a_namespace_more_prefixes_in_an_annotation():
    namespaces = {**NAMESPACES, "acme": owned("222222222222", **{CLUSTER_ID_PREFIXES_ANNOTATION: "edge-, shop-"})}
    result = resolve_all(squatting_fleet(acme_ingress={"clusterID": "edge-1"}, globex_ingress={"clusterID": "shop-1"},
                                         namespaces=namespaces))
    assert [(r.cluster_id, r.cluster) for r in result.routes] == [("edge-1", "acme/prod-1")]
    assert result.unrouted["globex/prod-1"].reason == ID_NOT_ALLOWED  # acme's grant is not globex's
    # A grant never reaches another namespace's defaults (they all have a '.'): edge-x/prod's is edge-x.prod.
    result = resolve_all(squatting_fleet(acme_ingress={"clusterID": "edge-x.prod"}, namespaces=namespaces))
    assert "'edge-x.prod' does not start with a prefix namespace acme may use" in str(result.unrouted["acme/prod-1"])


def test_a_routed_id_is_kept_when_the_rule_changes_and_wins_over_an_older_claimant():
    # Routed before the upgrade on its bare name: recorded, so it keeps it though the default is now acme.prod-1.
    recorded = {"sharedIngress": {"clusterID": "prod-1"}}
    result = resolve_all(squatting_fleet(acme_status=recorded))
    assert {r.cluster_id: r.cluster for r in result.routes} == {"prod-1": "acme/prod-1",
                                                                "globex.prod-1": "globex/prod-1"}
    # The older globex cluster may be granted the prefix, and ask for that ID: the routed cluster keeps it.
    namespaces = {**NAMESPACES, "globex": owned("333333333333", **{CLUSTER_ID_PREFIXES_ANNOTATION: "prod"})}
    result = resolve_all(squatting_fleet(acme_status=recorded, globex_ingress={"clusterID": "prod-1"},
                                         namespaces=namespaces))
    assert [(r.cluster_id, r.cluster) for r in result.routes] == [("prod-1", "acme/prod-1")]
    assert "ID 'prod-1' is already used by HubCluster acme/prod-1" in str(result.unrouted["globex/prod-1"])


def test_a_routed_id_never_changes_a_different_clusterid_is_refused_and_the_record_is_kept():
    result = resolve_all(squatting_fleet(acme_status={"sharedIngress": {"clusterID": "acme.prod-1"}},
                                         acme_ingress={"clusterID": "acme.other"}))
    refused = result.unrouted["acme/prod-1"]
    assert refused.reason == ID_NOT_ALLOWED and "is not the ID 'acme.prod-1' the cluster is routed on" in str(refused)
    # The record is a fact resolve() reads, as the service and the offline plan see the object.
    doc = opted_in()
    doc["status"] = {"sharedIngress": {"clusterID": "prod-1"}, "conditions": []}
    assert resolved_part(doc)["status"] == {"sharedIngress": {"clusterID": "prod-1"}}


def test_default_ids_of_two_namespaces_never_meet():
    # With "-" as the separator, acme/prod-1 and a namespace acme-prod's cluster 1 would both be acme-prod-1.
    assert default_cluster_id("acme", "prod-1") != default_cluster_id("acme-prod", "1")
    for namespace in ("n" * 63, "n" * 45, "n" * 20):
        one, two = default_cluster_id(namespace, "a" * 60), default_cluster_id(namespace, "a" * 59 + "b")
        assert len(one) <= 63 and one != two and CLUSTER_ID.fullmatch(one) and "." in one
