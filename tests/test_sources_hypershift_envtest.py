"""HyperShift's HostedCluster as a cluster source, on the real kube-apiserver with HyperShift's real CRDs
(hostedclusters and hostedcontrolplanes: served at v1alpha1 and v1beta1, stored at v1beta1, no conversion webhook)
and the service running, its sources controller watching both (automation/service/sources.py,
stacks/sources/hypershift.py, docs/sources.md):

1. the control-plane namespace is trusted only through HyperShift's own link: another tenant's namespace that
   happens to be `<namespace>-<name>`, or a HostedControlPlane linked to another HostedCluster, is refused with a
   Warning Event on the HostedCluster, and no HubCluster is written;
2. an opted-in HostedCluster, created at v1beta1 or at v1alpha1, becomes a HubCluster of its namespace's account;
3. its shared-ingress route, published by the service in the shared-ingress ConfigMap, carries traffic through the
   real HAProxy 3.0 running that ConfigMap as published, to a stand-in for the hosted kube-apiserver reached by
   its Service name, as the central proxy's pod reaches it;
4. PrivateLink asked of hubwright while HyperShift builds its own is refused, naming HyperShift's field;
5. deleting a taken HostedCluster deletes its HubCluster (its stack destroyed first) and releases our finalizer.

The service watches every namespace (no --watch-namespace: the control-plane namespace is not the tenant's), on a
server of this module's own; each test's namespaces are unique and emptied afterwards.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.engine import RecordingEngine
from doubles.envtest import free_port, install_crds
from doubles.factories import OWNER_ANNOTATION, namespace_doc
from doubles.service_env import ServiceEnv, quiet, wait_until
from doubles.sources import POD_NETWORKS, control_plane_namespace_doc, hosted_cluster_doc, hosted_control_plane_doc
from doubles.thirdparty import crds
from automation.service.serve import Service
from stacks.haproxy import CONFIG_DIR, CONFIG_FILE, published_routes, split_backends
from stacks.names import CLUSTERS, GROUP, SHARED_INGRESS_CONFIGMAP, SOURCE_FINALIZER, VERSION
from stacks.sources.hypershift import CLUSTER_LINK, CONTROL_PLANE_LABEL, ENDPOINT_ACCESS, control_plane_namespace
from stacks.sources.kinds import HOSTED_CLUSTER, HOSTED_CONTROL_PLANE, SourceKind
from stacks.sources.outcome import SOURCE_REFUSED
from tests.envtest import kube_apiserver_alone  # noqa: F401 - the fixture
from tests.haproxy import HAPROXY, MISSING, wait_for_master, wait_for_port

pytestmark = pytest.mark.live

ACCOUNT, OTHER_ACCOUNT = "222222222222", "333333333333"  # the tenant's, another tenant's (both test accounts)
ROLES_ACCOUNT = "999999999999"  # the account of the HostedCluster's rolesRef ARNs: never the HubCluster's
HOSTED_KINDS = (HOSTED_CLUSTER, HOSTED_CONTROL_PLANE)
WAIT = 30  # seconds: a bound for a loaded machine, not a speed


# --------------------------------------------------------------------------- the server and the objects

@pytest.fixture(scope="module")
def api(kube_apiserver_alone) -> Iterator[client.ApiClient]:  # noqa: F811 - the fixture
    api_client = kube_apiserver_alone.api_client()
    wanted = {f"{kind.plural}.{kind.group}" for kind in HOSTED_KINDS}
    found = [crd for crd in crds("hypershift") if crd["metadata"]["name"] in wanted]
    assert len(found) == 2
    install_crds(api_client, found)
    yield api_client
    api_client.close()


def kind_of(doc: dict[str, Any]) -> SourceKind:
    return next(kind for kind in HOSTED_KINDS if kind.kind == doc["kind"])


def create(api: client.ApiClient, doc: dict[str, Any]) -> dict[str, Any]:
    """Create `doc` at its own apiVersion (its status through the status subresource, as HyperShift writes it);
    the object as the API server keeps it."""
    kind, version = kind_of(doc), doc["apiVersion"].rpartition("/")[2]
    meta = {k: v for k, v in doc["metadata"].items() if k not in ("uid", "creationTimestamp")}
    body = {**{k: v for k, v in doc.items() if k != "status"}, "metadata": meta}
    custom = client.CustomObjectsApi(api)
    made = custom.create_namespaced_custom_object(kind.group, version, meta["namespace"], kind.plural, body)
    if doc.get("status"):
        made = custom.patch_namespaced_custom_object_status(kind.group, version, meta["namespace"], kind.plural,
                                                            meta["name"], {"status": doc["status"]})
    return made


def read(api: client.ApiClient, kind: SourceKind, namespace: str, name: str,
         version: str | None = None) -> dict[str, Any] | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(kind.group, version or kind.versions[-1],
                                                                         namespace, kind.plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def hosted(name: str, ns: str, n: int, **kw: Any) -> dict[str, Any]:
    """A HostedCluster of its own VPC, CIDR, infra ID and API host (one VPC is one cluster's: stacks.claims)."""
    return hosted_cluster_doc(name, ns, infra_id=f"{name}-{n:05d}", vpc=f"vpc-0{ns[-6:]}{n}",
                              cidr=f"10.{40 + n}.0.0/16", endpoint=f"api-{name}.{ns}.example.com", **kw)


def control_plane(api: client.ApiClient, ns: str, name: str, *, link: str | None = None,
                  annotations: dict[str, str] | None = None) -> str:
    """What HyperShift makes for HostedCluster ns/name: its control-plane namespace, labelled as HyperShift labels
    it, and the HostedControlPlane in it with HyperShift's link annotation (`link`: another value). Its name."""
    client.CoreV1Api(api).create_namespace(control_plane_namespace_doc(ns, name, annotations=annotations))
    create(api, hosted_control_plane_doc(ns, name, link=link))
    return control_plane_namespace(ns, name)


def events(api: client.ApiClient, ns: str, name: str, reason: str) -> list[tuple[str, str]]:
    """(type, message) of the Events with `reason` on HostedCluster ns/name."""
    items = client.CoreV1Api(api).list_namespaced_event(ns).items
    return [(e.type, e.message) for e in items if e.reason == reason and e.involved_object.name == name
            and e.involved_object.kind == HOSTED_CLUSTER.kind]


def refusals(api: client.ApiClient, ns: str, name: str) -> list[str]:
    return [message for type_, message in events(api, ns, name, SOURCE_REFUSED) if type_ == "Warning"]


def settled(service: Service) -> None:
    """Nothing left to do: the stacks' pipeline quiet (doubles.service_env.quiet) and the sources controller's queue
    empty, so a HubCluster not there now is not on its way."""
    assert service.pipeline is not None
    sources = next(c for c in service.pipeline.manager.controllers if c.name == "sources")
    quiet(service)
    wait_until(lambda: sources.queue.idle() and ((due := sources.queue.next_due()) is None or due > 1.0), WAIT,
               what="the sources controller to have nothing to do")


@contextlib.contextmanager
def world(api: client.ApiClient) -> Iterator[ServiceEnv]:
    """A tenant namespace acme-<suffix> (owner account ACCOUNT), the service's namespace and a HubConfig of their
    own; afterwards every object of ours and HyperShift's in the namespaces the test made is removed."""
    suffix = uuid.uuid4().hex[:6]
    env = ServiceEnv(api, namespace=f"acme-{suffix}", system_namespace=f"sys-{suffix}", hub_name=f"hub-{suffix}")
    body = namespace_doc("acme", ACCOUNT)
    body["metadata"]["name"] = env.ns
    env.core.create_namespace(body)
    env.namespace(env.system_namespace, owner=None)
    env.hub()
    try:
        yield env
    finally:
        clean(api, env.ns)


def clean(api: client.ApiClient, prefix: str) -> None:
    """Strip every finalizer from and delete the HubClusters, HostedClusters and HostedControlPlanes in the
    namespaces named `prefix`*: the next test's service (which watches every namespace) never sees them."""
    custom = client.CustomObjectsApi(api)
    namespaces = [ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items
                  if ns.metadata.name.startswith(prefix)]
    kinds = [(GROUP, VERSION, CLUSTERS)] + [(k.group, k.versions[-1], k.plural) for k in HOSTED_KINDS]
    for ns in namespaces:
        for group, version, plural in kinds:
            for item in custom.list_namespaced_custom_object(group, version, ns, plural)["items"]:
                name = item["metadata"]["name"]
                with contextlib.suppress(ApiException):
                    custom.patch_namespaced_custom_object(group, version, ns, plural, name,
                                                          {"metadata": {"finalizers": None}})
                    custom.delete_namespaced_custom_object(group, version, ns, plural, name)


# --------------------------------------------------------------------------- 1. the attack

def test_another_tenants_namespace_named_like_a_control_plane_is_never_routed_to(api):
    """Tenant acme-<s>'s HostedCluster `prod` asks for shared ingress; the namespace HyperShift would run its control
    plane in, acme-<s>-prod, is another tenant's (it owns another account), and its owner has dressed it up as
    HyperShift would: HyperShift's label and a HostedControlPlane `prod` whose link even names acme-<s>/prod. Had
    it been trusted, the central proxy would send acme's nodes to kube-apiserver.acme-<s>-prod.svc, a Service the
    other tenant runs. It is refused, on the HostedCluster, naming that namespace; no HubCluster is written."""
    with world(api) as env:
        ns, engine = env.ns, RecordingEngine()
        with env.running(engine, sources="hypershift") as service:
            create(api, hosted("prod", ns, 1, shared_ingress=True))
            # Not there yet: it waits for HyperShift (Normal Events: the endpoint, which create() reports a moment
            # after the object, then the control-plane namespace), and is not taken meanwhile.
            wait_until(lambda: [m for t, m in events(api, ns, "prod", "SourcePending")
                                if t == "Normal" and "has not made its control-plane namespace" in m], WAIT,
                       what="prod waiting for its control-plane namespace")
            # Another tenant's namespace of that name appears (the namespace watch derives prod again), dressed up.
            squatted = control_plane_namespace(ns, "prod")
            assert squatted == f"{ns}-prod"
            control_plane(api, ns, "prod", annotations={OWNER_ANNOTATION: OTHER_ACCOUNT})
            assert env.core.read_namespace(squatted).metadata.labels[CONTROL_PLANE_LABEL] == "true"
            wait_until(lambda: refusals(api, ns, "prod"), WAIT, what="a SourceRefused Warning on prod")
            (message,) = refusals(api, ns, "prod")
            assert f"HostedCluster.hypershift.openshift.io {ns}/prod" in message
            assert "metadata.annotations[hubwright.io/shared-ingress]" in message
            assert f"namespace {squatted}" in message and "is a tenant's namespace" in message
            assert OTHER_ACCOUNT in message
            settled(service)
            assert env.get("prod") is None
            assert engine.count() == 0  # no stack anywhere, so nothing was routed either

            # A control-plane namespace that is no tenant's, but whose HostedControlPlane HyperShift made for
            # another HostedCluster (its link annotation says whose): refused too, naming that object and field.
            create(api, hosted("edge", ns, 2, shared_ingress=True))
            linked = control_plane(api, ns, "edge", link=f"{ns}/prod")
            wait_until(lambda: refusals(api, ns, "edge"), WAIT, what="a SourceRefused Warning on edge")
            (message,) = refusals(api, ns, "edge")
            assert message.startswith(f"HostedControlPlane.hypershift.openshift.io {linked}/edge: "
                                      f"metadata.annotations[{CLUSTER_LINK}]: ")
            assert f"'{ns}/prod', not {ns}/edge" in message and "another HostedCluster's control plane" in message
            settled(service)
            assert env.get("edge") is None and engine.count() == 0


# --------------------------------------------------------------------------- 2. taken

def test_an_opted_in_hosted_cluster_at_either_served_version_is_a_hubcluster_of_its_namespaces_account(api):
    """Created at v1beta1 and at v1alpha1 (both served), each endpoint reported through the status subresource: a
    HubCluster of the namespace's owner account (never the account of anything the object names), its region,
    infra ID, API URL and network read from the object, controlled by it, which our finalizer holds."""
    with world(api) as env:
        ns, engine = env.ns, RecordingEngine()
        with env.running(engine, sources="hypershift"):
            beta = create(api, hosted("hc-beta", ns, 1))
            written = hosted("hc-alpha", ns, 2, version="v1alpha1")
            assert written["spec"]["networking"]["machineCIDR"] == "10.42.0.0/16"  # v1alpha1's own field
            alpha = create(api, written)
            # What the API server keeps of the v1alpha1 object: it stores v1beta1 with no conversion webhook, and
            # prunes what v1beta1 has no field for, at once: spec.networking.machineCIDR is gone whatever version
            # it is read at (as are v1alpha1's *Creds). So its machine network never reaches hubwright.
            for version in HOSTED_CLUSTER.versions:
                kept = read(api, HOSTED_CLUSTER, ns, "hc-alpha", version)
                assert kept is not None and kept["apiVersion"] == f"{HOSTED_CLUSTER.group}/{version}"
                assert kept["spec"]["networking"] == {"networkType": "OVNKubernetes",
                                                      POD_NETWORKS: [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}
                assert "controlPlaneOperatorCreds" not in kept["spec"]["platform"]["aws"]
            assert alpha["spec"]["platform"]["aws"]["rolesRef"]["ingressARN"].startswith(
                f"arn:aws:iam::{ROLES_ACCOUNT}:")  # kept: rolesRef is v1beta1's too
            assert alpha["status"]["controlPlaneEndpoint"] == {"host": f"api-hc-alpha.{ns}.example.com", "port": 6443}

            for source, n in ((beta, 1), (alpha, 2)):
                name = source["metadata"]["name"]
                wait_until(lambda n_=name: env.ready(n_), WAIT, what=f"HubCluster {name} Ready")
                kept = env.get(name)
                spec = kept["spec"]
                assert spec["accountID"] == ACCOUNT  # the namespace's owner account
                assert ROLES_ACCOUNT not in json.dumps(kept)  # nothing of the object's accounts
                assert (spec["region"], spec["infraID"], spec["apiURL"]) == (
                    "us-east-1", f"{name}-{n:05d}", f"https://api-{name}.{ns}.example.com:6443")
                assert kept["metadata"]["annotations"]["hubwright.io/region"] == "us-east-1"
                assert kept["metadata"]["ownerReferences"] == [{
                    "apiVersion": f"{HOSTED_CLUSTER.group}/v1beta1",  # as the service watches it: the stored one
                    "kind": HOSTED_CLUSTER.kind, "name": name, "uid": source["metadata"]["uid"],
                    "controller": True, "blockOwnerDeletion": True}]
                assert "sharedIngress" not in spec or not spec["sharedIngress"].get("enabled")
                now = read(api, HOSTED_CLUSTER, ns, name)
                assert SOURCE_FINALIZER in now["metadata"]["finalizers"]
                assert engine.count("up", f"{ns}.{name}") >= 1
            assert env.get("hc-beta")["spec"]["network"] == {"vpcID": f"vpc-0{ns[-6:]}1", "cidr": "10.41.0.0/16"}
            # The v1alpha1 one: its VPC, and no declared CIDR (machineCIDR was pruned above); discovery, where it
            # runs, reads the VPC's CIDRs.
            assert env.get("hc-alpha")["spec"]["network"] == {"vpcID": f"vpc-0{ns[-6:]}2"}


# --------------------------------------------------------------------------- 3. the shared ingress, end to end

class NameServer:
    """The cluster DNS as the central proxy's pod asks it, on <address>:53 (UDP): one A record per name in `names`,
    NXDOMAIN for any other name. What it was asked is kept."""

    def __init__(self, address: str, names: dict[str, str]):
        self.names = names
        self.asked: list[tuple[str, int]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, 53))
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                query, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                self.sock.sendto(self._answer(query), peer)
            except (OSError, IndexError, UnicodeDecodeError, struct.error):
                continue

    def _answer(self, query: bytes) -> bytes:
        ident, flags = struct.unpack("!HH", query[:4])
        labels, at = [], 12
        while query[at]:
            labels.append(query[at + 1:at + 1 + query[at]].decode("ascii"))
            at += 1 + query[at]
        qtype, qclass = struct.unpack("!HH", query[at + 1:at + 5])
        name = ".".join(labels).lower()
        self.asked.append((name, qtype))
        address = self.names.get(name)
        answer = struct.pack("!HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(address) \
            if address is not None and (qtype, qclass) == (1, 1) else b""
        flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | (0 if address is not None else 3)  # QR AA RD RA rcode
        return struct.pack("!HHHHHH", ident, flags, 1, 1 if answer else 0, 0, 0) + query[12:at + 5] + answer

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


class KubeAPIServer:
    """A stand-in for the hosted kube-apiserver behind its Service: TLS on <address>:6443 with its own certificate,
    answering each line with 'kube-apiserver:<line>'."""

    def __init__(self, address: str, cert: Path, key: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 6443))
        self.sock.listen(16)
        self.served = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                for line in tls.makefile("rb"):
                    self.served += 1
                    tls.sendall(b"kube-apiserver:" + line)
        except (OSError, ssl.SSLError):
            pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def certificate(folder: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate for `host` (the hosted kube-apiserver's serving certificate) and its key."""
    cert, key = folder / "kas.crt", folder / "kas.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=kube-apiserver",
                    "-addext", f"subjectAltName=DNS:{host}"], check=True, capture_output=True, timeout=60)
    return cert, key


def loopback_address() -> str:
    """A loopback address of this test's own (127.0.0.0/8 is all loopback): its port 53 and 6443 are free."""
    for _ in range(50):
        address = f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}.{random.randrange(2, 250)}"
        with contextlib.ExitStack() as probes:
            try:
                for kind, port in ((socket.SOCK_DGRAM, 53), (socket.SOCK_STREAM, 6443)):
                    probe = probes.enter_context(socket.socket(socket.AF_INET, kind))
                    probe.bind((address, port))
            except OSError:
                continue
            return address
    raise AssertionError("no free loopback address for the name server and the kube-apiserver")


@contextlib.contextmanager
def central_proxy(data: dict[str, str], folder: Path, nameserver: str, port: int) -> Iterator[Path]:
    """The real HAProxy running the shared-ingress ConfigMap's files as the central proxy's pod runs them: mounted at
    CONFIG_DIR, `haproxy -W -f CONFIG_DIR/haproxy.cfg`, the cluster's DNS in /etc/resolv.conf. In a mount namespace
    of its own (unshare -m: the test runs as root, as the project's machines and CI do), where CONFIG_DIR's parent
    is `folder`/etc and /etc/resolv.conf names `nameserver`: nothing changes outside it. Yields its log."""
    etc = folder / "etc"
    (etc / Path(CONFIG_DIR).name).mkdir(parents=True)
    for name, text in data.items():
        (etc / Path(CONFIG_DIR).name / name).write_text(text)
    (folder / "resolv.conf").write_text(f"nameserver {nameserver}\n")
    master = os.path.join(tempfile.mkdtemp(prefix="hcp-"), "master.sock")  # unix paths stop at 107 bytes
    script = (f'mount --bind "{folder / "resolv.conf"}" /etc/resolv.conf && '
              f'mount --bind "{etc}" "{Path(CONFIG_DIR).parent}" && '
              f'exec "{HAPROXY}" -W -db -S "{master}" -f "{CONFIG_DIR}/{CONFIG_FILE}"')
    log = folder / "central.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["unshare", "--mount", "sh", "-c", script], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, log)
        wait_for_master(master, proc, log)
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def proxy_v2(cluster_id: str) -> bytes:
    """The PROXY protocol v2 header a guest's proxy sends (PROXY, TCP over IPv4), the cluster ID in the UNIQUE_ID
    TLV (the hub's default wire mode, unique-id)."""
    body = socket.inet_aton("10.40.1.7") + socket.inet_aton("10.0.0.1") + struct.pack("!HH", 40000, 6443)
    body += struct.pack("!BH", 0x05, len(cluster_id)) + cluster_id.encode()
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


def through(port: int, cluster_id: str, line: str, ca: Path, host: str) -> str | None:
    """One connection to the central proxy on 127.0.0.1:`port` carrying `cluster_id`, then TLS to `host` verified
    against `ca` (the hosted kube-apiserver's own: the proxy passes TLS through), one line; the reply, or None when
    the proxy refused the connection."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(proxy_v2(cluster_id))
            with ssl.create_default_context(cafile=str(ca)).wrap_socket(sock, server_hostname=host) as tls:
                tls.sendall(line.encode() + b"\n")
                return tls.makefile("rb").readline().decode().rstrip("\n") or None
    except (OSError, ssl.SSLError):
        return None


@pytest.mark.skipif(HAPROXY is None, reason=MISSING)
def test_a_hosted_clusters_route_reaches_its_kube_apiserver_through_the_real_central_proxy(api, tmp_path):
    """HyperShift's control-plane namespace (its label, no tenant's) holding the HostedControlPlane linked to the
    HostedCluster: the HubCluster is routed to kube-apiserver.<cpns>.svc:6443, the service publishes the route, and
    the central proxy (real HAProxy 3.0, the published files as they are) sends a connection carrying the
    cluster's ID to a TLS stand-in for that kube-apiserver, found by its Service name through the cluster DNS (a
    stand-in answering that name with a loopback address: the model refuses loopback only as a literal address,
    and the name is what it admits, under the hub's allowedBackends `svc`). Another ID reaches nothing."""
    with world(api) as env:
        ns, engine = env.ns, RecordingEngine()
        ingress_ns, bind = f"ingress-{ns}", free_port()
        env.namespace(ingress_ns, owner=None)  # where the central proxy runs, as deploy/ makes it
        env.core.create_namespaced_config_map(ingress_ns, {"metadata": {"name": SHARED_INGRESS_CONFIGMAP},
                                                           "data": {}})
        # The hub administrator lets the central proxy dial Services (*.svc) only.
        env.patch_hub({"spec": {"sharedIngress": {"address": "ingress.example.com:6443", "bind": f"127.0.0.1:{bind}",
                                                  "namespace": ingress_ns, "allowedBackends": ["svc"]}}})
        with env.running(engine, sources="hypershift"):
            cpns = control_plane(api, ns, "prod")  # HyperShift's namespace, no tenant's, and its HostedControlPlane
            assert OWNER_ANNOTATION not in (env.core.read_namespace(cpns).metadata.annotations or {})
            create(api, hosted("prod", ns, 1, shared_ingress=True))
            backend = f"kube-apiserver.{cpns}.svc"
            wait_until(lambda: ((env.get("prod") or {}).get("spec") or {}).get("sharedIngress"), WAIT,
                       what="HubCluster prod with its shared ingress")
            routed = env.get("prod")["spec"]["sharedIngress"]
            assert (routed["enabled"], routed["backend"]) == (True, f"{backend}:6443")  # (proxyBind: our CRD's default)

            def data() -> dict[str, str]:
                return env.core.read_namespaced_config_map(SHARED_INGRESS_CONFIGMAP, ingress_ns).data or {}

            wait_until(lambda: f"{ns}/prod" in published_routes(data()), WAIT,
                       what="the service to publish prod's route")
            published = data()
            cluster_id = published_routes(published)[f"{ns}/prod"]
            assert cluster_id == f"{ns}.prod"  # the default ID: <namespace>.<name>
            section = split_backends(published[CONFIG_FILE])[1][f"cluster_{cluster_id}"]
            assert f"server api {backend}:6443 resolvers dns init-addr libc,none" in section

        # The central proxy runs the files as published; the Service name resolves, as in the pod, through the
        # cluster DNS (a stand-in), to the stand-in for HyperShift's kube-apiserver.
        address = loopback_address()
        cert, key = certificate(tmp_path, backend)
        dns, kas = NameServer(address, {backend: address}), KubeAPIServer(address, cert, key)
        try:
            with central_proxy(published, tmp_path / "central", address, bind) as log:
                reply = wait_until(lambda: through(bind, cluster_id, "GET /version", cert, backend), WAIT,
                                   what="a reply from the hosted kube-apiserver through the central proxy",
                                   diagnose=log.read_text)
                assert reply == "kube-apiserver:GET /version"
                assert through(bind, cluster_id, "again", cert, backend) == "kube-apiserver:again"
                served = kas.served
                assert through(bind, f"{ns}.other", "nope", cert, backend) is None  # an ID it does not route
                assert through(bind, "prod", "nope", cert, backend) is None
                assert kas.served == served
            assert (backend, 1) in dns.asked  # the central proxy asked the cluster DNS for the Service's name
        finally:
            dns.close()
            kas.close()


# --------------------------------------------------------------------------- 4. PrivateLink twice

def test_privatelink_asked_of_hubwright_while_hypershift_builds_its_own_is_refused(api):
    """endpointAccess Private: HyperShift builds its own endpoint service and private zone of the API host; a
    HostedCluster asking hubwright for PrivateLink besides is refused, naming HyperShift's field."""
    with world(api) as env:
        ns, engine = env.ns, RecordingEngine()
        with env.running(engine, sources="hypershift") as service:
            create(api, hosted("private", ns, 1, endpoint_access="Private", privatelink=True))
            wait_until(lambda: refusals(api, ns, "private"), WAIT, what="a SourceRefused Warning on private")
            (message,) = refusals(api, ns, "private")
            assert message.startswith(f"HostedCluster.hypershift.openshift.io {ns}/private: {ENDPOINT_ACCESS}: "
                                      "is Private, and metadata.annotations[hubwright.io/privatelink] asks")
            assert "HyperShift builds its own" in message
            settled(service)
            assert env.get("private") is None and engine.count() == 0


# --------------------------------------------------------------------------- 5. deleting it

def test_deleting_a_taken_hosted_cluster_deletes_its_hubcluster_then_releases_it(api):
    """The HostedCluster's DELETE: the service deletes the HubCluster it controls (whose stack is destroyed first),
    then releases its finalizer hubwright.io/source, and the HostedCluster is gone."""
    with world(api) as env:
        ns, engine = env.ns, RecordingEngine()
        with env.running(engine, sources="hypershift"):
            create(api, hosted("gone", ns, 1))
            wait_until(lambda: env.ready("gone"), WAIT, what="HubCluster gone Ready")
            assert SOURCE_FINALIZER in read(api, HOSTED_CLUSTER, ns, "gone")["metadata"]["finalizers"]
            # No garbage collector runs here (no kube-controller-manager): the service deletes the HubCluster itself.
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                HOSTED_CLUSTER.group, "v1beta1", ns, HOSTED_CLUSTER.plural, "gone")
            wait_until(lambda: read(api, HOSTED_CLUSTER, ns, "gone") is None, WAIT,
                       what="HostedCluster gone released by our finalizer and deleted")
            assert env.get("gone") is None
            assert engine.count("destroy", f"{ns}.gone") == 1  # its stack destroyed before the HubCluster went
            deleted = [message for _, message in events(api, ns, "gone", "HubClusterDeleted")]
            assert deleted == [f"HubCluster {ns}/gone deleted: its stack is destroyed first"]
