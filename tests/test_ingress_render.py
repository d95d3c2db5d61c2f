"""Shared ingress rendering: central config + map, node-side configs, validation, stack outputs, CLI. All pure."""
import os

import pytest
import yaml

from automation.cli import main
from stacks.haproxy import (CentralSettings, Route, guest_manifests, render_central, render_guest,
                                       split_backends)
from automation.adapters.engine.plan import plan_stack
from stacks.errors import InvalidSpec
from stacks.inputs import SharedIngressInputs
from stacks.model.loading import parse

from doubles.factories import INGRESS, cluster, cluster_doc, hub, hub_doc, namespace_doc, resolve_one

MAP = "/etc/haproxy/clusters.map"
ROUTES = [
    Route("prod-2", "10.0.2.10:6443", cluster="acme/prod-2"),
    Route("prod-1", "10.0.1.10:6443", ("192.168.0.0/16", "10.20.0.0/16"), cluster="acme/prod-1"),
    Route("eu-1", "kube-apiserver.clusters-eu-1.svc:6443", cluster="globex/eu-1"),
]


def central(routes=ROUTES, **settings):
    return render_central(CentralSettings(map_path=MAP, **settings), routes)


def guest(**kw):
    return SharedIngressInputs(**{"cluster_id": "prod-1", "central_address": "10.9.9.9:6443",
                                  "proxy_bind": "172.31.0.1:6443", **kw})


def section(config: str, header: str) -> str:
    """The lines of one section (header included)."""
    lines = config.splitlines()
    start = lines.index(header)
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    return "\n".join(lines[start:end])


# --- central ---------------------------------------------------------------------

def test_central_accepts_only_proxy_protocol_and_routes_by_unique_id_through_the_map():
    front = section(central().config, "frontend shared_ingress")
    assert "    bind :6443 accept-proxy" in front
    assert f"    tcp-request content reject unless {{ fc_pp_unique_id,map({MAP}) -m found }}" in front
    assert f"    use_backend %[fc_pp_unique_id,map({MAP})]" in front
    assert "    default_backend no_route" in front
    assert "tcp-request content reject" in section(central().config, "backend no_route")
    assert central().routes() == {"eu-1": "cluster_eu-1", "prod-1": "cluster_prod-1", "prod-2": "cluster_prod-2"}


def test_custom_tlv_mode_reads_the_configured_tlv_type():
    config = central(wire_mode="custom-tlv", tlv_type=0xE5).config
    assert f"use_backend %[fc_pp_tlv(0xE5),map({MAP})]" in config
    assert "fc_pp_unique_id" not in config
    assert "HAProxy >= 2.9" in config


def test_output_is_sorted_and_byte_identical_for_the_same_inputs():
    first, again, shuffled = central(), central(), central(list(reversed(ROUTES)))
    assert first == again == shuffled
    names = [line.split()[1] for line in first.config.splitlines() if line.startswith("backend cluster_")]
    assert names == sorted(names) == ["cluster_eu-1", "cluster_prod-1", "cluster_prod-2"]
    assert first.map.splitlines()[1:] == ["eu-1 cluster_eu-1", "prod-1 cluster_prod-1", "prod-2 cluster_prod-2"]


def test_allowed_source_cidrs_restrict_only_their_cluster_using_the_proxy_header_source():
    config = central().config
    assert "tcp-request content reject unless { src 10.20.0.0/16 192.168.0.0/16 }" in section(
        config, "backend cluster_prod-1")
    assert "src" not in section(config, "backend cluster_prod-2")


def test_backend_names_resolve_at_run_time_and_never_block_startup():
    config = central().config
    assert "resolvers dns" in config
    assert "server api kube-apiserver.clusters-eu-1.svc:6443 resolvers dns init-addr libc,none" in config
    assert "    server api 10.0.2.10:6443\n" in config
    assert "resolvers" not in central(ROUTES[:2]).config  # IP backends only: nothing to resolve


def test_a_relative_map_path_is_refused_and_a_duplicate_id_is_dropped_keeping_the_first():
    with pytest.raises(ValueError, match="absolute"):
        render_central(CentralSettings(map_path="clusters.map"), ROUTES)
    twice = Route("prod-1", "10.0.0.1:6443", cluster="globex/prod-1")
    rendered = central(ROUTES + [twice])
    assert rendered.dropped == ((twice, "cluster ID 'prod-1' is already routed to acme/prod-1"),)
    assert "10.0.0.1" not in rendered.config and rendered.config == central().config


def test_split_backends_separates_per_cluster_sections_independently_of_their_position():
    fixed, backends = split_backends(central().config)
    assert "frontend shared_ingress" in fixed and "backend no_route" in fixed
    assert set(backends) == {"cluster_eu-1", "cluster_prod-1", "cluster_prod-2"}
    _, fewer = split_backends(central(ROUTES[:2]).config)  # prod-2 is now the last section
    assert fewer["cluster_prod-2"] == backends["cluster_prod-2"]


# --- guest -----------------------------------------------------------------------

def test_guest_unique_id_mode_sends_the_id_as_the_stream_unique_id():
    config = render_guest(guest())
    assert "    bind 172.31.0.1:6443\n" in config
    assert "    unique-id-format prod-1\n" in config
    assert "    server shared_ingress 10.9.9.9:6443 send-proxy-v2 proxy-v2-options unique-id\n" in config


def test_guest_custom_tlv_mode_sets_the_tlv():
    config = render_guest(guest(wire_mode="custom-tlv", tlv_type=0xE7))
    assert "    server shared_ingress 10.9.9.9:6443 send-proxy-v2 set-proxy-v2-tlv-fmt(0xE7) prod-1\n" in config
    assert "unique-id" not in config.split("listen kube_apiserver")[1]


def test_guest_dialing_a_load_balancer_name_resolves_it_at_run_time():
    config = render_guest(guest(central_address="abc.elb.us-east-1.amazonaws.com:6443"))
    assert "resolvers dns" in config and "abc.elb.us-east-1.amazonaws.com:6443 resolvers dns init-addr libc,none" in config


def test_guest_refuses_an_id_that_would_break_the_config():
    with pytest.raises(ValueError, match="cluster ID"):
        render_guest(guest(cluster_id="a b"))


def test_guest_manifests_carry_the_config_and_restart_when_it_changes():
    out = guest_manifests(guest())
    config_map, pod = yaml.safe_load(out["configMap"]), yaml.safe_load(out["staticPod"])
    assert config_map["data"]["haproxy.cfg"] == out["haproxyCfg"] == render_guest(guest())
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["hostNetwork"] is True and container["image"] == "haproxy:2.6"
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/hubwright-apiserver-proxy"
    other = yaml.safe_load(guest_manifests(guest(cluster_id="prod-2"))["staticPod"])
    assert (pod["metadata"]["annotations"]["hubwright.io/config-hash"]
            != other["metadata"]["annotations"]["hubwright.io/config-hash"])


# --- model, resolve and stack outputs -------------------------------------------------

@pytest.mark.parametrize("ingress, field, reason", [
    ({"tlvType": 0x20}, "spec.sharedIngress.tlvType", "greater than or equal to 224"),
    ({"wireMode": "custom-tlv"}, "spec.sharedIngress", "needs HAProxy >= 2.9"),
    ({"bind": "6443"}, "spec.sharedIngress.bind", "is not host:port"),
])
def test_hub_shared_ingress_refusals_name_the_field(ingress, field, reason):
    with pytest.raises(InvalidSpec) as caught:
        parse(hub_doc(sharedIngress=ingress))
    assert f"HubConfig default: {field}: " in str(caught.value) and reason in str(caught.value)


def test_custom_tlv_with_a_new_enough_image_is_accepted():
    spec = parse(hub_doc(sharedIngress={"wireMode": "custom-tlv", "image": "haproxy:3.0", "tlvType": 0xE1}))
    assert spec.spec.shared_ingress.tlv_type == 0xE1


def test_resolve_fills_the_guest_inputs_from_hub_and_cluster():
    inputs = resolve_one(cluster(sharedIngress={"enabled": True, "backend": "10.0.0.1:6443"}),
                     hub(sharedIngress=INGRESS))
    assert inputs.shared_ingress == SharedIngressInputs(
        cluster_id="acme.prod-1", central_address="lb.example.com:6443", proxy_bind="172.31.0.1:6443")
    assert resolve_one(cluster(), hub()).shared_ingress is None


def test_resolve_refuses_an_opted_in_cluster_when_the_hub_has_no_address():
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(sharedIngress={"enabled": True, "backend": "10.0.0.1:6443"}), hub(sharedIngress={}))
    assert "HubCluster acme/prod-1: spec.sharedIngress.enabled: HubConfig default has no spec.sharedIngress.address" \
        in str(caught.value)


def test_the_stack_outputs_the_guest_manifests_and_creates_no_resource_for_them():
    with_ingress = resolve_one(cluster(sharedIngress={"enabled": True, "backend": "10.0.0.1:6443", "clusterID": "acme.p1"}),
                           hub(sharedIngress=INGRESS))
    plan, plain = plan_stack(with_ingress), plan_stack(resolve_one(cluster(), hub()))
    assert plan.outputs["sharedIngress"] == guest_manifests(with_ingress.shared_ingress)
    assert plan.outputs["sharedIngress"]["clusterID"] == "acme.p1"
    assert "sharedIngress" not in plain.outputs
    assert [r.type for r in plan.resources] == [r.type for r in plain.resources]


# --- CLI -------------------------------------------------------------------------

def _write_fleet(folder, *, duplicate=False):
    with open(os.path.join(folder, "hub.yaml"), "w") as fh:
        yaml.safe_dump(hub_doc(sharedIngress=INGRESS), fh)
    os.makedirs(os.path.join(folder, "clusters"))
    docs = [cluster_doc("prod-1", sharedIngress={"enabled": True, "backend": "10.0.1.10:6443"}),
            cluster_doc("prod-2", sharedIngress={"enabled": True, "backend": "10.0.2.10:6443",
                                                 "clusterID": "acme.prod-1" if duplicate else "acme.prod-2"}),
            cluster_doc("prod-3"), namespace_doc("acme")]
    with open(os.path.join(folder, "clusters", "all.yaml"), "w") as fh:
        yaml.safe_dump_all(docs, fh)


def _tree(folder):
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                found[os.path.relpath(os.path.join(root, name), folder)] = fh.read()
    return found


def test_cli_writes_central_and_guest_configs_identically_on_every_run(tmp_path, capsys):
    _write_fleet(tmp_path)
    args = ["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters")]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    one = _tree(tmp_path / "one")
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    assert sorted(one) == ["central/clusters.map", "central/haproxy.cfg",
                           "guest/prod-1/haproxy.cfg", "guest/prod-2/haproxy.cfg"]
    assert one == _tree(tmp_path / "one")
    assert f"map({tmp_path / 'one' / 'central' / 'clusters.map'})".encode() in one["central/haproxy.cfg"]
    assert b"unique-id-format acme.prod-2" in one["guest/prod-2/haproxy.cfg"]

    assert main(args + ["--out", str(tmp_path / "two"), "--map-dir", "/usr/local/etc/haproxy"]) == 0
    assert b"map(/usr/local/etc/haproxy/clusters.map)" in _tree(tmp_path / "two")["central/haproxy.cfg"]


def test_cli_writes_the_good_routes_and_exits_2_listing_a_contested_cluster_id(tmp_path, capsys):
    _write_fleet(tmp_path, duplicate=True)
    code = main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "spec.sharedIngress.clusterID: ID 'acme.prod-1' is already used by HubCluster acme/prod-1" in capsys.readouterr().err
    out = _tree(tmp_path / "out")
    assert sorted(out) == ["central/clusters.map", "central/haproxy.cfg", "guest/prod-1/haproxy.cfg"]
    assert b"10.0.1.10:6443" in out["central/haproxy.cfg"] and b"10.0.2.10" not in out["central/haproxy.cfg"]


def test_guest_folders_use_the_cluster_name_and_namespace_only_when_names_clash():
    from stacks.haproxy import guest_files

    files = guest_files([("acme/prod-1", guest()), ("globex/prod-1", guest(cluster_id="g1")),
                         ("acme/prod-2", guest(cluster_id="prod-2"))])
    assert sorted(files) == ["guest/acme.prod-1/haproxy.cfg", "guest/globex.prod-1/haproxy.cfg",
                             "guest/prod-2/haproxy.cfg"]
    assert "unique-id-format g1" in files["guest/globex.prod-1/haproxy.cfg"]
