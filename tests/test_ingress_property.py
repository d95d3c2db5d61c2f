"""Property: whatever Clusters tenants write, the central config HAProxy is given is valid and routes exactly the
clusters resolve_all routes, one backend each. Checked by HAProxy itself (`haproxy -c`), on bounded examples."""
from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from stacks.haproxy import BACKEND_PREFIX, CentralSettings, render_central
from stacks.errors import InvalidSpec
from stacks.ingress import Route
from stacks.model.loading import parse
from stacks.resolve import resolve_all
from doubles.factories import INGRESS, cluster_doc, fleet, hub
from tests.haproxy import HAPROXY, MISSING, check_central

pytestmark = [pytest.mark.live, pytest.mark.skipif(HAPROXY is None, reason=MISSING)]

# Backends a tenant might write: good ones, ones the allow-list or the fixed refusals stop, and hostile text.
GOOD_BACKENDS = st.one_of(
    st.builds(lambda a, b, p: f"10.{a}.{b}.10:{p}", st.integers(0, 255), st.integers(0, 255), st.integers(1, 65535)),
    st.builds(lambda n, p: f"kas.{n}.svc:{p}", st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True),
              st.integers(1, 65535)),
    st.sampled_from(["[fd00::a]:6443", "[::ffff:10.1.2.3]:6443"]),
)
REFUSED_BACKENDS = st.sampled_from([
    "169.254.169.254:80", "127.0.0.1:8404", "[::1]:6443", "kubernetes.default.svc:443", "lb.example.com:6443",
    "192.168.1.1:6443", "evil.example.com:6443", "shared-ingress.hubwright-ingress.svc:6443", "0.0.0.0:1",
])
HOSTILE_TEXT = st.text(alphabet=st.sampled_from(list("ab1.:[]# \t\n\r\x00\\\"'{}%$") + ["\u2028", "é"]),
                       min_size=0, max_size=30)
BACKENDS = st.one_of(GOOD_BACKENDS, REFUSED_BACKENDS, HOSTILE_TEXT,
                     st.builds(lambda good, junk: good + junk, GOOD_BACKENDS, HOSTILE_TEXT))


@st.composite
def cluster_docs(draw):
    docs = []
    for n in range(draw(st.integers(0, 8))):
        ingress = {"enabled": draw(st.sampled_from([True, True, True, False])), "backend": draw(BACKENDS)}
        if draw(st.booleans()):
            ingress["clusterID"] = draw(st.sampled_from(["shared", "x", "p-1", "bad id", "a" * 64]))
        if draw(st.booleans()):
            ingress["allowedSourceCIDRs"] = draw(st.lists(st.sampled_from(["10.0.0.0/8", "192.168.0.0/16",
                                                                           "0.0.0.0/0", "10.1.0.0/33"]), max_size=3))
        doc = cluster_doc(f"c{n}", draw(st.sampled_from(["acme", "globex", "drifter"])), sharedIngress=ingress,
                          accountID=draw(st.sampled_from(["222222222222", "333333333333"])))
        doc["metadata"]["creationTimestamp"] = f"2026-01-{1 + draw(st.integers(0, 27)):02d}T00:00:00Z"
        docs.append(doc)
    return docs


def parsed(docs):
    """What the service would cache: the Clusters the model accepts (the others never reach resolve)."""
    out = []
    for doc in docs:
        try:
            out.append(parse(doc))
        except InvalidSpec:
            continue
    return out


def backends_in(config: str) -> list[str]:
    return [line.split()[1] for line in config.splitlines() if line.startswith(f"backend {BACKEND_PREFIX}")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=cluster_docs(), wire_mode=st.sampled_from(["unique-id", "custom-tlv"]),
       bypass=st.lists(st.builds(Route, cluster_id=st.sampled_from(["z1", "z2", "c0", "bad id"]), backend=BACKENDS),
                       max_size=3))
def test_every_rendered_config_passes_haproxy_check_with_one_backend_per_routed_cluster(docs, wire_mode, bypass):
    h = hub(sharedIngress={**INGRESS, "wireMode": wire_mode, "image": "haproxy:3.0", "bind": "127.0.0.1:16443"})
    result = resolve_all(fleet(h, parsed(docs)))
    ids = [route.cluster_id for route in result.routes]
    assert len(ids) == len(set(ids))
    event(f"routed clusters: {min(len(ids), 3)}{'+' if len(ids) >= 3 else ''}")
    with tempfile.TemporaryDirectory() as folder:
        settings_ = CentralSettings.from_hub(h.spec.shared_ingress, map_path=str(Path(folder) / "clusters.map"))
        rendered = render_central(settings_, result.routes)
        # The model and the rules are the first line: nothing they route is left for the renderer to drop.
        assert rendered.dropped == ()
        assert backends_in(rendered.config) == [BACKEND_PREFIX + cid for cid in sorted(ids)]
        assert set(rendered.routes()) == set(ids)
        verdict = check_central(rendered)
        assert verdict.returncode == 0, verdict.stderr

        # Past the model: routes built by hand are rendered or dropped, and the config stays valid.
        offered = [*result.routes, *bypass]
        mixed = render_central(settings_, offered)
        left = Counter(r.cluster_id for r in offered)
        left.subtract(r.cluster_id for r, _ in mixed.dropped)
        assert set(mixed.routes()) == {cid for cid, n in left.items() if n > 0}  # each ID rendered once or not at all
        assert all(n in (0, 1) for n in left.values())
        assert set(ids) <= set(mixed.routes())  # a hand-built route never displaces a resolved one
        assert len(backends_in(mixed.config)) == len(mixed.routes())
        verdict = check_central(mixed)
        assert verdict.returncode == 0, verdict.stderr
