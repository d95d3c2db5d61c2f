"""The service as deployed: what deploy/ renders, applied to a real kube-apiserver, and its pod run the way a
kubelet would run it, in a bubblewrap sandbox built from the Dockerfile and the rendered Deployment.

    render()      deploy/__main__.py under Pulumi's mock runtime: every object's inputs as `pulumi up` sends them
    render_component()  one of deploy/'s components (components/) the same way, built by the caller
    (`python -m automation install --render`, automation.adapters.files.install, renders the same components to files)
    apply()       the CRDs (from the ConfigGroup), then everything else by server-side apply, as pulumi-kubernetes
    pod_of()      the Deployment's pod: a name like `<deployment>-<rs hash>-<pod hash>`, its spec
    kubelet_env() image ENV < service links < envFrom < env (fieldRef, secretKeyRef resolved), like the kubelet
    sandbox()     bwrap argv: uid/gid 65532, a read-only root with the image's files at the Dockerfile's paths,
                  writable only the pod's volumes, the service account token at its usual path, own pid and uts
                  namespaces (the container's process is pid 1), the host's network (the apiserver is on loopback)
    running()     all of the kubelet's part together: the init containers run to completion in the sandbox, then the
                  container started in its sandbox and ready, stopped after

Stand-ins for what the image holds: the venv's python for the image's, .tools/bin (pulumi) bound at
/usr/local/bin where the image puts the CLI. The repository itself is hidden inside the sandbox: the service
can import only what the Dockerfile COPYs.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import http.server
import json
import os
import re
import runpy
import secrets
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pulumi
from kubernetes import client, dynamic

from automation.adapters.engine import proctree
from automation.adapters.files.install import objects_of
from automation.adapters.engine.plan import StackPlan, record
from tests.dockerfile import DOCKERFILE, Image
from tests.dockerfile import image as image_of
from tests.envtest import TOOLS_BIN, install_crds
from doubles.service_env import wait_until

ROOT = DOCKERFILE.parent
VENV_BIN = (ROOT / ".venv" / "bin").resolve()  # resolved: the repository is hidden in the sandbox
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
IMAGE_PATH = f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin"  # python:3.11-slim's PATH, with the venv's python first
NEEDS = ("bwrap", "pulumi", "etcd", "kube-apiserver")


def missing() -> str | None:
    """Why the live deploy test cannot run here, or None."""
    gone = [b for b in NEEDS if not (TOOLS_BIN / b).is_file() and shutil.which(b) is None]
    gone += [p for p in image_of().entrypoint[:1] if not os.access(p, os.X_OK)]  # the sandbox uses the host's
    if gone:
        return (f"{', '.join(gone)} not found: bwrap and tini come from Debian's packages (apt-get install "
                f"bubblewrap tini, .ci/run does), the others from scripts/tools.sh into {TOOLS_BIN}")
    probe = subprocess.run(["bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bwrap cannot make user and pid namespaces here: {probe.stderr.strip()}"
    return None


# --------------------------------------------------------------------------- render and apply

def render(config: Mapping[str, Any]) -> StackPlan:
    """deploy/__main__.py with stack config `hubwright-deploy:<key>` = value (`values`: an object, as
    `pulumi config set --path values.<key>` makes it), under the mock runtime."""
    def build() -> None:
        pulumi.runtime.set_all_config({f"hubwright-deploy:{k}": v if isinstance(v, str) else json.dumps(v)
                                       for k, v in config.items()})
        runpy.run_path(str(ROOT / "deploy" / "__main__.py"))
    return record(build, stack="live", project="hubwright-deploy")


def render_component(build: Callable[[Any], Any]) -> StackPlan:
    """`build(provider)` under the mock runtime, as deploy/__main__.py builds its components (one Kubernetes
    provider for all): for a test that deploys a component on its own, with arguments of its choosing."""
    def program() -> None:
        import pulumi_kubernetes as k8s
        build(k8s.Provider("k8s", kubeconfig="{}"))
    return record(program, stack="live", project="hubwright-deploy")


def objects(plan: StackPlan) -> list[dict]:
    """Every Kubernetes object of the plan, the ConfigGroup's (the CRDs) included (as the install's render)."""
    return objects_of(plan)


def apply(api_client: client.ApiClient, objs: list[dict]) -> None:
    """CRDs first (waited for until served), then Namespaces, then the rest, by server-side apply (pulumi-kubernetes'
    default), which refuses fields the schema does not know."""
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    install_crds(api_client, crds)
    api = dynamic.DynamicClient(api_client)
    rest = sorted((o for o in objs if o not in crds), key=lambda o: o["kind"] != "Namespace")
    for obj in rest:
        kind = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        api.server_side_apply(kind, body=obj, name=obj["metadata"]["name"],
                              namespace=obj["metadata"].get("namespace"), field_manager="pulumi-kubernetes",
                              force_conflicts=True)


def one(objs: list[dict], kind: str, name: str) -> dict:
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# --------------------------------------------------------------------------- the kubelet's part

@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    spec: dict

    @property
    def container(self) -> dict:
        [only] = self.spec["containers"]
        return only

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        return next(p["containerPort"] for p in self.container["ports"] if p.get("name") == name_or_number)


def pod_of(deployment: dict) -> Pod:
    suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(15))
    return Pod(f"{deployment['metadata']['name']}-{suffix[:10]}-{suffix[10:]}", deployment["metadata"]["namespace"],
               copy.deepcopy(deployment["spec"]["template"]["spec"]))


def _service_links(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """The docker-links variables the kubelet adds for each Service of the pod's namespace (enableServiceLinks)."""
    env: dict[str, str] = {}
    for svc in core.list_namespaced_service(namespace).items:
        if not svc.spec.cluster_ip or svc.spec.cluster_ip == "None":
            continue
        name, ip = svc.metadata.name.upper().replace("-", "_"), svc.spec.cluster_ip
        first = svc.spec.ports[0]
        env[f"{name}_SERVICE_HOST"], env[f"{name}_SERVICE_PORT"] = ip, str(first.port)
        env[f"{name}_PORT"] = f"{first.protocol.lower()}://{ip}:{first.port}"
        for port in svc.spec.ports:
            if port.name:
                env[f"{name}_SERVICE_PORT_{port.name.upper().replace('-', '_')}"] = str(port.port)
            key = f"{name}_PORT_{port.port}_{port.protocol}"
            env.update({key: f"{port.protocol.lower()}://{ip}:{port.port}", f"{key}_PROTO": port.protocol.lower(),
                        f"{key}_PORT": str(port.port), f"{key}_ADDR": ip})
    return env


def _secret(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    data = core.read_namespaced_secret(name, namespace).data or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def kubelet_env(pod: Pod, core: client.CoreV1Api, image: Image, apiserver_port: int,
                container: dict | None = None) -> dict[str, str]:
    """The container's environment (the pod's container, or one of its initContainers): the image's ENV, then
    what the kubelet sets, lowest precedence first. An optional envFrom source that does not exist is skipped."""
    fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace,
              "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
              "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1", "spec.nodeName": "envtest"}
    env = {"PATH": IMAGE_PATH, "HOME": "/", "HOSTNAME": pod.name, "LANG": "C.UTF-8", **image.env}
    env.update(_service_links(core, pod.namespace))
    env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(apiserver_port))
    container = container or pod.container
    for source in container.get("envFrom", []):
        ref = source.get("secretRef") or source.get("configMapRef")
        if ref.get("optional") and not _exists(core, pod.namespace, "secretRef" in source, ref["name"]):
            continue
        if "secretRef" in source:
            values = _secret(core, pod.namespace, source["secretRef"]["name"])
        else:
            values = core.read_namespaced_config_map(source["configMapRef"]["name"], pod.namespace).data or {}
        env.update({source.get("prefix", "") + k: v for k, v in values.items()})
    for var in container.get("env", []):
        ref = var.get("valueFrom", {})
        if "value" in var or not ref:
            value = expand(var.get("value", ""), env)
        elif "fieldRef" in ref:
            value = fields[ref["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in ref:
            value = _secret(core, pod.namespace, ref["secretKeyRef"]["name"])[ref["secretKeyRef"]["key"]]
        else:
            raise NotImplementedError(f"env {var['name']}: {ref}")
        env[var["name"]] = value
    return env


def _exists(core: client.CoreV1Api, namespace: str, secret: bool, name: str) -> bool:
    read = core.read_namespaced_secret if secret else core.read_namespaced_config_map
    try:
        read(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion in args and env values (unknown references stay as they are)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def process_argv(pod: Pod, image: Image, env: Mapping[str, str], container: dict | None = None) -> list[str]:
    """What the container runtime executes: `command` (else the image's ENTRYPOINT), then `args`, expanded."""
    container = container or pod.container
    return [*(expand(a, env) for a in container.get("command", image.entrypoint)),
            *(expand(a, env) for a in container.get("args", []))]


def service_account_dir(core: client.CoreV1Api, pod: Pod, ca_file: str, where: Path) -> Path:
    """token (TokenRequest API, as the kubelet's projected volume), ca.crt and namespace."""
    token = core.create_namespaced_service_account_token(
        pod.spec["serviceAccountName"], pod.namespace, {"spec": {"expirationSeconds": 3607}}).status.token
    where.mkdir(parents=True)
    (where / "token").write_text(token)
    (where / "namespace").write_text(pod.namespace)
    shutil.copyfile(ca_file, where / "ca.crt")
    return where


def volume_dirs(pod: Pod, where: Path) -> dict[str, Path]:
    """A fresh host directory for each volume the pod declares (emptyDir, or a claim: both start empty here)."""
    dirs = {}
    for volume in pod.spec.get("volumes", []):
        kind = next(k for k in volume if k != "name")
        if kind not in ("emptyDir", "persistentVolumeClaim"):
            raise NotImplementedError(f"volume {volume['name']}: {kind}")
        dirs[volume["name"]] = where / volume["name"]
        dirs[volume["name"]].mkdir(parents=True)
    return dirs


# --------------------------------------------------------------------------- the sandbox

def _root(mountpoints: list[Path], hidden: set[Path]) -> list[str]:
    """A read-only view of the host's / in which each mountpoint can be made: host entries are bound one by one,
    and only the directories on a mountpoint's path are split further (inside a bound directory nothing can be
    created). `hidden` directories appear empty."""
    args: list[str] = []

    def walk(folder: Path) -> None:
        for entry in sorted(os.listdir(folder)):
            path = folder / entry
            if path in (Path("/proc"), Path("/dev")) or path in mountpoints:
                continue
            if path in hidden:
                args.extend(["--dir", str(path)])
            elif path.is_symlink():
                args.extend(["--symlink", os.readlink(path), str(path)])
            elif path.is_dir() and any(path in m.parents for m in [*mountpoints, *hidden]):
                args.extend(["--dir", str(path)])
                walk(path)
            else:
                args.extend(["--ro-bind", str(path), str(path)])

    walk(Path("/"))
    return args


def sandbox(pod: Pod, image: Image, volumes: Mapping[str, Path], sa_dir: Path, bwrap: str,
            container: dict | None = None) -> list[str]:
    """bwrap argv that runs the container's args (the pod's container, or one of its initContainers) as its
    user, with the container's filesystem view."""
    container, security = container or pod.container, pod.spec.get("securityContext", {})
    if not container.get("securityContext", {}).get("readOnlyRootFilesystem"):
        raise AssertionError("the sandbox models a read-only root filesystem only")
    uid = str(container.get("securityContext", {}).get("runAsUser", security.get("runAsUser", image.user)))
    gid = str(security.get("runAsGroup", security.get("fsGroup", uid)))  # one group only: fsGroup owns the volumes
    ro = [(ROOT / src, dest) for src, dest in image.copies]  # the image's files where the Dockerfile puts them
    ro += [(sa_dir, SA_DIR), (TOOLS_BIN, "/usr/local/bin")]  # the token volume; pulumi where the image has it
    if ROOT in VENV_BIN.parents:  # a venv inside the (hidden) repository stays reachable at its own path
        ro.append((VENV_BIN.parent, str(VENV_BIN.parent)))
    rw = [(volumes[m["name"]], m["mountPath"]) for m in container.get("volumeMounts", [])]
    binds = sorted([(src, Path(os.path.realpath(dest)), "--ro-bind") for src, dest in ro]
                   + [(src, Path(os.path.realpath(dest)), "--bind") for src, dest in rw], key=lambda b: len(b[1].parts))
    args = [bwrap, "--unshare-user", "--uid", uid, "--gid", gid, "--unshare-pid", "--as-pid-1", "--unshare-uts",
            "--hostname", pod.name, "--unshare-ipc", "--die-with-parent",
            *_root([dest for _, dest, _ in binds], hidden={ROOT}), "--dev", "/dev", "--proc", "/proc"]
    for src, dest, how in binds:
        args.extend([how, str(src), str(dest)])
    return [*args, "--remount-ro", "/", "--chdir", container.get("workingDir", image.workdir), "--"]


# --------------------------------------------------------------------------- AWS

class AwsTripwire:
    """An HTTP endpoint for AWS_ENDPOINT_URL that records every request and answers 500: a call shows up here."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        record = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                record.append(f"{self.command} {self.path} {self.headers.get('X-Amz-Target', '')} {body[:120]!r}")
                self.send_error(500, "hubwright test: no AWS call was expected")

            do_GET = do_PUT = do_DELETE = do_POST  # noqa: N815

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @contextlib.contextmanager
    def running(self) -> Iterator["AwsTripwire"]:
        thread = threading.Thread(target=self.server.serve_forever, name="aws-tripwire", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(5)


# --------------------------------------------------------------------------- the container

class Container:
    """The sandboxed container process; `stop()` does what the kubelet does when the pod is deleted."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log: Path):
        self.log = log
        self.stopped: tuple[int | None, float] | None = None  # (exit status, seconds) once stopped
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self._pid1()
        self.pid_namespace = os.readlink(f"/proc/{self.pid}/ns/pid")

    def _pid1(self, timeout: float = 10) -> int:
        """The container's own process (pid 1 in its namespace): bwrap's descendant that runs the args."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            for pid in proctree.descendants(self.proc.pid):
                with contextlib.suppress(OSError, IndexError):
                    status = Path(f"/proc/{pid}/status").read_text()
                    if status.split("NSpid:")[1].splitlines()[0].split()[-1] == "1":
                        return pid
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        raise RuntimeError(f"the container did not start (exit {self.proc.wait(10)}):\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def in_namespace(self) -> list[int]:
        """Every process still alive in the container's pid namespace."""
        found = []
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and os.readlink(f"/proc/{entry.name}/ns/pid") == self.pid_namespace:
                    found.append(int(entry.name))
        return found

    def stop(self, grace: float) -> tuple[int | None, float]:
        """SIGTERM to the container's process; SIGKILL for everything after `grace` s (terminationGracePeriodSeconds).
        Returns (exit status, or None when it had to be killed; seconds it took)."""
        started = time.monotonic()
        proctree.kill(self.pid, signal.SIGTERM)
        try:
            status: int | None = self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            status = None
            self.kill()
        return status, time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL the container's pid 1 (the kernel then kills its whole pid namespace) and bwrap."""
        proctree.kill(self.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@contextlib.contextmanager
def running(pod: Pod, image: Image, core: client.CoreV1Api, apiserver_port: int, ca_file: str, where: Path,
            ready_within: float = 60) -> Iterator[tuple[Container, dict[str, Path]]]:
    """The pod's container, started as the kubelet would and ready (its readinessProbe, an httpGet, answers 200);
    stopped after (SIGTERM, then SIGKILL after terminationGracePeriodSeconds). Yields it and the host directories
    of its volumes; `container.stopped` is (exit status, seconds) afterwards."""
    env = kubelet_env(pod, core, image, apiserver_port)
    volumes = volume_dirs(pod, where / "volumes")
    tokens = service_account_dir(core, pod, ca_file, where / "serviceaccount")
    for init in pod.spec.get("initContainers", []):  # in order, each to completion, as the kubelet runs them
        init_env = kubelet_env(pod, core, image, apiserver_port, init)
        done = subprocess.run([*sandbox(pod, image, volumes, tokens, str(shutil.which("bwrap")), init),
                               *process_argv(pod, image, init_env, init)], env=init_env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"init container {init['name']} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    argv = sandbox(pod, image, volumes, tokens, str(shutil.which("bwrap")))
    box = Container([*argv, *process_argv(pod, image, env)], env, where / "log")
    try:
        probe = pod.container["readinessProbe"]["httpGet"]
        url = f"http://127.0.0.1:{pod.port(probe['port'])}{probe['path']}"
        wait_until(lambda: answers(url) or box.proc.poll() is not None, ready_within,
                   what=f"{url} (the readiness probe)")
        assert box.proc.poll() is None, box.tail()
        yield box, volumes
    finally:
        box.stopped = box.stop(pod.spec.get("terminationGracePeriodSeconds", 30))
        wait_until(lambda: box.in_namespace() == [], 5, what="no process of the container left")


def answers(url: str) -> bool:
    """Does `url` answer 200 (what an httpGet probe counts as success, near enough)?"""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False
