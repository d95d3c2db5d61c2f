"""Shared ingress end to end with real HAProxy on 127.0.0.1.

    client ─► guest haproxy (one per cluster) ══ PROXY v2 + ID ══► central haproxy (master-worker) ─► echo "API server"

Each echo server answers a line with "<its name>:<line>", so a reply says which backend it came from.
"""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from automation.cli import main
from stacks.haproxy import CentralConfig, CentralSettings, Route, render_central, render_guest
from automation.adapters.atomic import write_atomically
from automation.adapters.files.haproxy import CentralRuntime, Debouncer, Loaded, MasterCLI, ReloadFailed, watch
from stacks.inputs import SharedIngressInputs
from doubles.factories import cluster_doc, hub_doc, namespace_doc
from doubles.service_env import wait_until
from tests.envtest import free_port
from tests.haproxy import HAPROXY, MISSING, OLD_HAPROXY, check, version, wait_for_master, wait_for_port

pytestmark = [pytest.mark.live, pytest.mark.skipif(HAPROXY is None, reason=MISSING)]


def haproxy_version() -> tuple[int, int]:
    return version(HAPROXY)


WIRE_MODES = [
    "unique-id",
    pytest.param("custom-tlv", marks=pytest.mark.skipif(
        HAPROXY is not None and haproxy_version() < (2, 9),
        reason="this haproxy is older than 2.9: it has no fc_pp_tlv / set-proxy-v2-tlv-fmt "
               "(test_custom_tlv_is_refused_by_haproxy_older_than_2_9 shows it refuses the config)")),
]
TLV_TYPE = 0xE3


# --- loopback helpers --------------------------------------------------------------

class Echo:
    """A tiny TCP server standing for one cluster's API server: answers each line with '<name>:<line>'."""

    def __init__(self, name: str):
        self.name = name
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            for line in conn.makefile("rb"):
                conn.sendall(self.name.encode() + b":" + line)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Client:
    """One TCP connection kept open; `ask` returns the reply line, or None once the far end closed it."""

    def __init__(self, port: int, preamble: bytes = b""):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.reader = self.sock.makefile("rb")
        if preamble:
            self.sock.sendall(preamble)

    def ask(self, text: str) -> str | None:
        try:
            self.sock.sendall(text.encode() + b"\n")
            line = self.reader.readline()
        except OSError:  # reset, broken pipe
            return None
        return line.decode().rstrip("\n") or None

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def ask_once(port: int, text: str, preamble: bytes = b"") -> str | None:
    client = Client(port, preamble)
    try:
        return client.ask(text)
    finally:
        client.close()


def proxy_v2(tlvs: list[tuple[int, bytes]], src: str = "127.0.0.1", dst: str = "127.0.0.1") -> bytes:
    """A PROXY protocol v2 header (PROXY command, TCP over IPv4) with the given TLVs."""
    body = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!HH", 40000, 6443)
    body += b"".join(struct.pack("!BH", kind, len(value)) + value for kind, value in tlvs)
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


def id_tlv(wire_mode: str, cluster_id: str) -> tuple[int, bytes]:
    return (0x05 if wire_mode == "unique-id" else TLV_TYPE), cluster_id.encode()


# --- the fleet on loopback -------------------------------------------------------------

@dataclass
class Ingress:
    wire_mode: str
    folder: Path
    central_port: int
    echoes: dict[str, Echo]
    runtime: CentralRuntime | None = None
    guests: dict[str, int] = field(default_factory=dict)  # cluster ID → its guest proxy's port
    procs: list[subprocess.Popen] = field(default_factory=list)
    locked_cidrs: tuple[str, ...] = ("10.0.0.0/8",)

    def render(self, ids, extra=(), **settings) -> CentralConfig:
        routes = [Route(i, self.echoes[i].address, self.locked_cidrs if i == "locked" else ()) for i in ids]
        routes += list(extra)  # routes built by hand, past the model
        settings = CentralSettings(map_path=str(self.folder / "clusters.map"), bind=f"127.0.0.1:{self.central_port}",
                                   wire_mode=self.wire_mode, tlv_type=TLV_TYPE, health_bind=None, **settings)
        return render_central(settings, routes)

    def start_central(self, ids) -> None:
        first = self.render(ids)
        (self.folder / "clusters.map").write_text(first.map)
        (self.folder / "haproxy.cfg").write_text(first.config)
        sock = os.path.join(tempfile.mkdtemp(prefix="ingress-"), "master.sock")  # unix paths stop at 107 bytes
        proc = self._spawn(["-W", "-S", sock, "-f", str(self.folder / "haproxy.cfg")], "central")
        wait_for_port(self.central_port, proc, self.folder / "central.log")
        wait_for_master(sock, proc, self.folder / "central.log")
        self.runtime = CentralRuntime(MasterCLI(sock), config_path=str(self.folder / "haproxy.cfg"),
                                      loaded=Loaded.of(first))

    def start_guest(self, cluster_id: str) -> int:
        port = free_port()
        guest = SharedIngressInputs(cluster_id=cluster_id, central_address=f"127.0.0.1:{self.central_port}",
                                    proxy_bind=f"127.0.0.1:{port}", wire_mode=self.wire_mode, tlv_type=TLV_TYPE)
        path = self.folder / f"guest-{cluster_id}.cfg"
        path.write_text(render_guest(guest))
        proc = self._spawn(["-f", str(path)], f"guest-{cluster_id}")
        wait_for_port(port, proc, self.folder / f"guest-{cluster_id}.log")
        self.guests[cluster_id] = port
        return port

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")
        proc = subprocess.Popen([HAPROXY, "-db", *args], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for echo in self.echoes.values():
            echo.close()


@pytest.fixture(params=WIRE_MODES)
def ingress(request, tmp_path):
    """Central proxy routing a, b, c and 'locked' (only from 10.0.0.0/8); guests for a, b, c, d and an unknown ID."""
    fleet = Ingress(request.param, tmp_path, free_port(), {n: Echo(n) for n in ("a", "b", "c", "d", "locked")})
    try:
        fleet.start_central(["a", "b", "c", "locked"])
        for cluster_id in ("a", "b", "c", "d", "nope"):
            fleet.start_guest(cluster_id)
        yield fleet
    finally:
        fleet.stop()


# --- configs ---------------------------------------------------------------------

def _fleet_files(folder: Path, ingress: dict) -> None:
    with open(folder / "hub.yaml", "w") as fh:
        yaml.safe_dump(hub_doc(sharedIngress={"address": "ingress.example.com:16443", "bind": "127.0.0.1:16443",
                                              "allowedBackends": ["10.0.0.0/16"], **ingress}), fh)
    (folder / "clusters").mkdir()
    with open(folder / "clusters" / "fleet.yaml", "w") as fh:
        yaml.safe_dump_all([
            cluster_doc(f"prod-{n}", sharedIngress={"enabled": True, "backend": f"10.0.{n}.10:6443",
                                                    "proxyBind": f"127.0.0.1:{17000 + n}",
                                                    "allowedSourceCIDRs": ["10.0.0.0/8"] if n == 2 else []})
            for n in (1, 2, 3)
        ] + [namespace_doc("acme")], fh)


def test_rendered_central_and_guest_configs_pass_haproxy_check(tmp_path):
    _fleet_files(tmp_path, {})
    assert main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")]) == 0
    configs = sorted((tmp_path / "out").rglob("haproxy.cfg"))
    assert [str(p.relative_to(tmp_path / "out")) for p in configs] == [
        "central/haproxy.cfg", "guest/prod-1/haproxy.cfg", "guest/prod-2/haproxy.cfg", "guest/prod-3/haproxy.cfg"]
    for path in configs:
        result = check(path)
        assert result.returncode == 0, f"{path}:\n{result.stdout}{result.stderr}"


def test_custom_tlv_configs_pass_haproxy_2_9_or_later(tmp_path):
    _fleet_files(tmp_path, {"wireMode": "custom-tlv", "tlvType": TLV_TYPE, "image": "haproxy:3.0"})
    assert main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")]) == 0
    central, guest = tmp_path / "out/central/haproxy.cfg", tmp_path / "out/guest/prod-1/haproxy.cfg"
    assert haproxy_version() >= (2, 9), f"{HAPROXY} is older than 2.9: run scripts/tools.sh"
    for path in (central, guest):
        result = check(path)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(OLD_HAPROXY is None, reason="no HAProxy older than 2.9 installed (apt-get install haproxy on "
                                                "bookworm) to show the floor on")
def test_custom_tlv_is_refused_by_haproxy_older_than_2_9(tmp_path):
    """The version floor stated in docs/shared-ingress.md, shown on Debian bookworm's 2.6."""
    _fleet_files(tmp_path, {"wireMode": "custom-tlv", "tlvType": TLV_TYPE, "image": "haproxy:3.0"})
    assert main(["ingress", "render", "--hub", str(tmp_path / "hub.yaml"), "--clusters", str(tmp_path / "clusters"),
                 "--out", str(tmp_path / "out")]) == 0
    central = check(tmp_path / "out/central/haproxy.cfg", OLD_HAPROXY)
    guest = check(tmp_path / "out/guest/prod-1/haproxy.cfg", OLD_HAPROXY)
    assert central.returncode != 0 and "fc_pp_tlv" in central.stderr
    assert guest.returncode != 0 and "set-proxy-v2-tlv-fmt" in guest.stderr


# --- routing -----------------------------------------------------------------------

def test_each_guest_reaches_only_its_own_backend(ingress):
    for cluster_id in ("a", "b", "c"):
        for n in range(3):
            assert ask_once(ingress.guests[cluster_id], f"hello {n}") == f"{cluster_id}:hello {n}"
    # The same header written by hand reaches the same backend: the wire format is what the guest sends.
    header = proxy_v2([id_tlv(ingress.wire_mode, "b")])
    assert ask_once(ingress.central_port, "direct", header) == "b:direct"


def test_unknown_id_missing_id_and_missing_header_are_refused(ingress):
    assert ask_once(ingress.guests["nope"], "hello") is None  # a guest whose ID the central proxy does not know
    assert ask_once(ingress.guests["d"], "hello") is None  # not routed (yet)
    assert ask_once(ingress.central_port, "hello") is None  # no PROXY header at all
    assert ask_once(ingress.central_port, "hello", proxy_v2([])) is None  # a header without an ID
    assert ask_once(ingress.central_port, "hello", proxy_v2([(0xEE, b"a")])) is None  # the ID in another TLV
    assert ask_once(ingress.central_port, "hello", proxy_v2([id_tlv(ingress.wire_mode, "A")])) is None  # case counts
    assert ask_once(ingress.guests["a"], "still fine") == "a:still fine"


def test_allowed_source_cidrs_use_the_address_carried_in_the_proxy_header(ingress):
    locked = id_tlv(ingress.wire_mode, "locked")
    # Every connection really comes from 127.0.0.1; only the header's source address differs.
    assert ask_once(ingress.central_port, "hi", proxy_v2([locked], src="10.1.2.3")) == "locked:hi"
    assert ask_once(ingress.central_port, "hi", proxy_v2([locked], src="192.168.1.1")) is None
    assert ask_once(ingress.central_port, "hi", proxy_v2([id_tlv(ingress.wire_mode, "a")], src="192.168.1.1")) == "a:hi"


# --- changes while traffic flows ----------------------------------------------------------

def test_adding_and_removing_clusters_keeps_the_other_clusters_open_connections(ingress):
    open_conns = {cid: Client(ingress.guests[cid]) for cid in ("a", "b", "c")}
    for cid, conn in open_conns.items():
        assert conn.ask("before") == f"{cid}:before"
    cli = ingress.runtime.cli
    reloads = cli.processes().reloads

    # Add d, remove c: d's backend is new, so this is a hitless reload.
    change = ingress.runtime.apply(ingress.render(["a", "b", "d", "locked"]))
    assert change.kind == "reload" and cli.processes().reloads == reloads + 1
    for cid in ("a", "b"):
        assert open_conns[cid].ask("after reload") == f"{cid}:after reload"
        assert ask_once(ingress.guests[cid], "new") == f"{cid}:new"
    assert ask_once(ingress.guests["d"], "new") == "d:new"
    assert ask_once(ingress.guests["c"], "new") is None

    # Remove b: a map deletion through the runtime API, no reload.
    change = ingress.runtime.apply(ingress.render(["a", "d", "locked"]))
    assert change.kind == "runtime" and cli.processes().reloads == reloads + 1
    assert ask_once(ingress.guests["b"], "new") is None
    assert open_conns["a"].ask("after map update") == "a:after map update"
    assert open_conns["b"].ask("established") == "b:established"  # routing applies to new connections only

    # b again: its backend is still loaded, so a map addition brings it back, still without a reload.
    change = ingress.runtime.apply(ingress.render(["a", "b", "d", "locked"]))
    assert change.kind == "runtime" and cli.processes().reloads == reloads + 1
    assert ask_once(ingress.guests["b"], "back") == "b:back"
    assert open_conns["a"].ask("last") == "a:last"
    assert ingress.runtime.apply(ingress.render(["a", "b", "d", "locked"])).kind == "none"
    for conn in open_conns.values():
        conn.close()


def test_new_connections_are_not_refused_during_reloads_or_map_updates(ingress):
    stop, results = threading.Event(), []

    def hammer():
        while not stop.is_set():
            try:
                results.append(ask_once(ingress.guests["a"], "x") == "a:x")
            except OSError:
                results.append(False)

    def more_connections(count: int = 3) -> None:  # the hammer has gone on meanwhile
        made = len(results)
        wait_until(lambda: len(results) >= made + count, 30, what=f"{count} more connections")

    worker = threading.Thread(target=hammer)
    worker.start()
    durations = []
    try:
        more_connections()
        for n in range(5):  # a global setting changes every time: each step is a reload
            start = time.monotonic()
            change = ingress.runtime.apply(ingress.render(["a", "b", "c", "locked"], hard_stop_after=f"{10 + n}m"))
            durations.append(time.monotonic() - start)
            assert change.kind == "reload"
            more_connections()
        updates = []
        for n in range(10):  # b out and back in: map updates only
            start = time.monotonic()
            ids = ["a", "c", "locked"] + (["b"] if n % 2 else [])
            change = ingress.runtime.apply(ingress.render(ids, hard_stop_after="14m"))  # the last reload's setting
            updates.append(time.monotonic() - start)
            assert change.kind == "runtime"
    finally:
        stop.set()
        worker.join()
    assert results and all(results), f"{results.count(False)} of {len(results)} connections failed"
    print(f"\n[{ingress.wire_mode}] {len(results)} connections across 5 reloads and 10 map updates, 0 failed; "
          f"reload (apply → new worker) {min(durations) * 1000:.0f}-{max(durations) * 1000:.0f} ms; "
          f"map update {min(updates) * 1000:.1f}-{max(updates) * 1000:.1f} ms")


def test_a_burst_of_changes_is_one_reload(ingress):
    reloads = ingress.runtime.cli.processes().reloads
    now = [0.0]  # the debouncer's clock: the burst's timing is the test's, however slow the machine
    debouncer = Debouncer(ingress.runtime.apply, quiet=0.3, max_delay=5.0, clock=lambda: now[0])
    steps = [["a"], ["a", "b"], ["a", "b", "d"], ["a", "d"], ["a", "c", "d"]]
    for ids in steps:  # five changes in quick succession, as a burst of watch events would bring
        debouncer.offer(ingress.render(ids))
        now[0] += 0.1
        assert not debouncer.flush()
    now[0] += 0.3
    assert debouncer.flush()
    assert [c.kind for c in ingress.runtime.history] == ["reload"]
    assert ingress.runtime.cli.processes().reloads == reloads + 1
    assert ask_once(ingress.guests["d"], "in") == "d:in" and ask_once(ingress.guests["c"], "in") == "c:in"
    assert ask_once(ingress.guests["b"], "out") is None


def test_a_config_haproxy_refuses_leaves_the_running_one_serving(ingress):
    conn = Client(ingress.guests["a"])
    assert conn.ask("before") == "a:before"
    good = ingress.render(["a", "b", "c", "d", "locked"])
    broken = CentralConfig(good.config.replace("mode tcp", "mode tcpx", 1), good.map, good.map_path)
    with pytest.raises(ReloadFailed):
        ingress.runtime.apply(broken)
    assert conn.ask("after") == "a:after"
    assert ask_once(ingress.guests["b"], "new") == "b:new"
    assert ingress.runtime.apply(good).kind == "reload"  # the next good config goes through
    assert ask_once(ingress.guests["d"], "new") == "d:new"
    conn.close()


def test_a_bad_route_is_dropped_and_every_other_cluster_stays_routable_across_reloads(ingress):
    """The reported breakage: one tenant's `10.9.9.9 x:6443` made every later central reload fail. Built past
    the model, it is dropped by the renderer; new clusters are routed and removed ones unrouted as before."""
    bad = [Route("evil", "10.9.9.9 x:6443", cluster="evil/x"), Route("evil2", "10.0.0.1:6443\nprogram x")]
    conn = Client(ingress.guests["a"])
    assert conn.ask("before") == "a:before"
    reloads = ingress.runtime.cli.processes().reloads
    steps = [(["a", "b", "c", "d", "locked"], "reload"),  # d is new: a reload, with the bad routes offered too
             (["a", "c", "d", "locked"], "runtime"),  # b removed: a map update
             (["a", "b", "c", "d", "locked"], "runtime")]
    for n, (ids, kind) in enumerate(steps):
        rendered = ingress.render(ids, extra=bad)
        assert [route.cluster_id for route, _ in rendered.dropped] == ["evil", "evil2"]
        assert "evil" not in rendered.config and "program" not in rendered.config
        assert ingress.runtime.apply(rendered).kind == kind
        for cluster_id in ("a", "b", "c", "d"):
            assert ask_once(ingress.guests[cluster_id], f"step {n}") == (
                f"{cluster_id}:step {n}" if cluster_id in ids else None)
    assert ingress.runtime.cli.processes().reloads == reloads + 1
    assert conn.ask("after") == "a:after"  # the open connection never dropped
    conn.close()


def test_the_reloader_loop_applies_what_appears_in_its_source_folder(ingress):
    """What the sidecar does in the pod: the folder stands for the mounted ConfigMap."""
    conn = Client(ingress.guests["a"])
    runtime, stop = CentralRuntime(ingress.runtime.cli), threading.Event()  # knows nothing of the running config
    loop = threading.Thread(target=watch, args=(str(ingress.folder), runtime),
                            kwargs={"interval": 0.05, "quiet": 0.2, "max_delay": 2.0, "stop": stop})
    loop.start()

    def publish(ids):
        rendered = ingress.render(ids)
        write_atomically(rendered.map_path, rendered.map)
        write_atomically(str(ingress.folder / "haproxy.cfg"), rendered.config)

    def wait_for(predicate):
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline, f"not applied; history: {runtime.history}"
            time.sleep(0.05)

    try:
        wait_for(lambda: len(runtime.history) == 1)  # the first look: the running config is unknown
        assert runtime.history[0].kind == "reload"
        publish(["a", "b", "c", "d", "locked"])
        wait_for(lambda: len(runtime.history) == 2)
        assert runtime.history[1].kind == "reload" and ask_once(ingress.guests["d"], "x") == "d:x"
        publish(["a", "c", "d", "locked"])
        wait_for(lambda: len(runtime.history) == 3)
        assert runtime.history[2].kind == "runtime" and ask_once(ingress.guests["b"], "x") is None
        assert conn.ask("through it all") == "a:through it all"
    finally:
        stop.set()
        loop.join()
        conn.close()
