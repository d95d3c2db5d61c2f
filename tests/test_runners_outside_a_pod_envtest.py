"""Runners outside a pod (docs/service.md, "Runners outside a pod"): the service and a runner run as processes on
this machine against a hub, with --executor runners.

Against a real kube-apiserver of this module's own (the run-author policy matches every HubStackRun on it), with the
real kubectl and the real `python -m automation serve` and `runner` processes (the real worker pool and `pulumi`, a
file backend; the HubCluster's stack needs no AWS):

- the section's first two blocks, run as written: the install for the runners executor (its cluster-wide part and
  the two ServiceAccounts with their Roles), then a kubeconfig for each with a ServiceAccount token;
- as its third block says, the service acting as its ServiceAccount creates the run, and a runner named after this
  host claims and executes it: the HubCluster becomes Ready;
- the service acting as a cluster administrator says once, at start, that its runs will be refused, and each refusal
  carries the policy's own message into the run's log line and the HubCluster's condition, never a bare Forbidden.

In-process (no server): the refusals the section shows are the ones the code words (each named there, exactly); a
runner whose name is not its host's, or does not match --runner-hosts, exits 2 before it starts anything; the API
server's refusal reads as its Status message wherever it is turned into text, and what of it reaches a tenant is
redacted as every run message is.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import EngineError, RunLimits
from automation.adapters.kube.calls import error_text
from automation.api.app import kube_error
from automation.cli import build_parser
from automation.kit.objects import HUBSTACKRUNS, SECRETS, ApiError
from automation.kit.runtime import Manager
from automation.runner import command
from automation.runner.command import identity_problem
from automation.runner.runner import hosts_problem
from automation.service.executor import RunnerEngine
from automation.service.runs import Runs
from components.install import SERVICE
from doubles.engine import RecordingEngine
from doubles.objects import FakeObjects
from doubles.service_env import ENGINE_RUN, ServiceEnv, wait_until
from stacks.names import GROUP, STACKRUNS, VERSION
from stacks.options import default
from stacks.runs.admission import STACKRUN_POLICY, author_problem, refusal_hint
from tests.docblocks import automation_commands, blocks, repository_copy, script
from tests.envtest import kube_apiserver_alone, require_binaries  # noqa: F401 - the fixture
from tests.test_runner_direct import inputs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "service.md"
HEADING = "Runners outside a pod"
SYSTEM = "hubwright-system"  # the namespace the section's commands name
HUB = {"endpointVPCInventory": [], "associatedVPCs": []}  # nothing that would make the service count endpoints
BARE = {"privateLink": {"enabled": False}}  # a cluster whose stack has no AWS resource: no AWS needed
POLICY_SAYS = f"only the hubwright service (system:serviceaccount:{SYSTEM}:{SERVICE}) creates {STACKRUNS}"
REFUSED = (f'hubstackruns.hubwright.io "acme-prod-1-up" is forbidden: ValidatingAdmissionPolicy \'{STACKRUN_POLICY}\' '
           f"with binding '{STACKRUN_POLICY}' denied request: {POLICY_SAYS}")
STATUS_403 = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": REFUSED,
                         "reason": "Forbidden", "code": 403})


# --------------------------------------------------------------------------- in-process: the words

def test_the_section_shows_each_refusal_as_the_code_words_it(monkeypatch):
    text = DOC.read_text(encoding="utf-8")
    assert author_problem("kubernetes-admin", SYSTEM) in text
    assert refusal_hint(REFUSED) in text and refusal_hint("secrets is forbidden") == ""
    assert hosts_problem("build-1", default("runner-hosts")) in text
    monkeypatch.setattr(socket, "gethostname", lambda: "build-1")
    monkeypatch.delenv("POD_NAME", raising=False)
    args = build_parser("runner").parse_args(["runner", "--identity", "hubwright-runner-a-1"])
    assert identity_problem(args) in text
    assert [note.not_run for note in blocks(DOC, HEADING)] == [
        None, None, "tests/test_runners_outside_a_pod_envtest.py starts these two commands itself, on free ports"]


@pytest.mark.parametrize("argv, environ, says", [
    (["--kubeconfig", "k"], {}, "runner 'build-1' (its name: --identity or POD_NAME, else its host name) does not "
                                "match --runner-hosts 'hubwright-runner-[a-z0-9]+-[a-z0-9]+'"),
    (["--kubeconfig", "k", "--runner-hosts", "build-1"], {"POD_NAME": "hubwright-runner-a-1"},
     "runner --identity 'hubwright-runner-a-1' (or POD_NAME) is not this host's name 'build-1'"),
])
def test_a_runner_outside_a_pod_is_told_what_to_pass_once_and_starts_nothing(monkeypatch, caplog, argv, environ,
                                                                             says):
    monkeypatch.setattr(socket, "gethostname", lambda: "build-1")
    monkeypatch.delenv("POD_NAME", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(command, "WorkerPool", lambda *a, **kw: pytest.fail("workers started before the check"))
    monkeypatch.setattr(command.logs, "configure", lambda *a, **kw: None)  # the process's logging, not this one's
    args = build_parser("runner").parse_args(["runner", *argv])
    with pytest.raises(SystemExit) as exit_:
        args.func(args)
    assert exit_.value.code == 2
    said = [r.getMessage() for r in caplog.records if r.name == "hubwright.runner"]
    assert len(said) == 1 and says in said[0] and "--runner-hosts 'build-1'" in said[0], said
    assert 'docs/service.md, "Runners outside a pod"' in said[0]


def test_a_refusal_reads_as_the_api_servers_message_wherever_it_is_turned_into_text():
    raised = ApiException(status=403, reason="Forbidden")
    raised.body = STATUS_403.encode()
    assert error_text(raised) == f"403 Forbidden: {REFUSED}"
    assert str(ApiError(403, "Forbidden", STATUS_403)) == error_text(ApiError(403, "Forbidden", STATUS_403)) \
        == f"403 Forbidden: {REFUSED}"
    assert kube_error(raised).detail == REFUSED  # the registry API passes it on
    proxy = ApiException(status=502, reason="Bad Gateway")
    proxy.body = "<html>a proxy's page</html>"
    assert error_text(proxy) == "502 Bad Gateway"  # not a Status: left out
    assert error_text(ConnectionRefusedError(111, "Connection refused")) == "[Errno 111] Connection refused"


@contextlib.contextmanager
def refusing_executor(body: str) -> Iterator[tuple[RunnerEngine, FakeObjects]]:
    """The runners executor, started, on an object port whose every HubStackRun create is refused with `body`."""
    kube = FakeObjects()
    kube.fail("create", HUBSTACKRUNS, ApiError(403, "Forbidden", body))
    engine = RunnerEngine(kube, local=RecordingEngine(), namespace=SYSTEM, limits=RunLimits(timeout=60))
    manager = Manager()
    engine.attach(manager, identity="hubwright-0")
    manager.start()
    try:
        yield engine, kube
    finally:
        manager.stop()


def test_the_executor_fails_a_refused_run_with_the_policys_message_and_what_to_do():
    with refusing_executor(STATUS_403) as (engine, kube), pytest.raises(EngineError) as failed:
        engine.up(inputs("one"), message="first")
    assert str(failed.value) == (f"up runs-a.one: a call for its HubStackRun failed: 403 Forbidden: {REFUSED}"
                                 + refusal_hint(REFUSED))
    assert f"kubectl create token {SERVICE} -n {SYSTEM}" in str(failed.value)
    assert kube.objects_of(SECRETS) == {}  # the run's Secret went with the refused run


def test_a_refusal_shown_to_the_tenant_is_redacted_as_every_run_message_is():
    """What reaches the HubCluster's condition goes through the runs' gate: an ID of another tenant the API server
    quoted is redacted there (stacks.disclosure), the policy's words stay; the log line keeps the whole text."""
    quoted = REFUSED + " (peer arn:aws:iam::444444444444:role/hubwright)"
    body = json.dumps({"kind": "Status", "message": quoted, "reason": "Forbidden", "code": 403})
    with refusing_executor(body) as (engine, _), pytest.raises(EngineError) as shown:
        Runs().run("up", lambda: engine.up(inputs("one"), message="first"), stack="runs-a.one",
                   cluster="runs-a/one", shown_to=())
    assert POLICY_SAYS in str(shown.value) and "arn:[redacted]" in str(shown.value)
    assert "444444444444" not in str(shown.value)


# --------------------------------------------------------------------------- against the API server, as a user

@pytest.fixture(scope="module")
def hub(kube_apiserver_alone, tmp_path_factory):  # noqa: F811 - the fixture
    """The section's first two blocks, run as written in a copy of the repository (the install, the kubeconfigs),
    with the administrator's KUBECONFIG; a HubConfig with no AWS part."""
    kubectl = require_binaries("kubectl")["kubectl"]
    where = tmp_path_factory.mktemp("outside")
    root = repository_copy(ROOT, where / "repo")
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("HUBWRIGHT_", "AWS_", "KUBERNETES_", "PULUMI_", "VIRTUAL_ENV", "POD_"))}
    environ.update(KUBECONFIG=str(kube_apiserver_alone.kubeconfig()), HOME=str(where),
                   AWS_EC2_METADATA_DISABLED="true", PYTHONDONTWRITEBYTECODE="1",
                   PATH=os.pathsep.join([str(ROOT / ".venv" / "bin"), str(Path(kubectl).parent),
                                         str(ROOT / ".tools" / "bin"), environ.get("PATH", "/usr/bin:/bin")]))
    text = script(blocks(DOC, HEADING)) + '\necho "WORK=$WORK"'  # the blocks' folder, for the third block's paths
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=root, env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    [work] = [line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("WORK=")]
    admin = kube_apiserver_alone.api_client()
    ServiceEnv(admin, system_namespace=SYSTEM).hub(**HUB)
    clean = repository_copy(ROOT, where / "clean")
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in clean.iterdir()), \
        "the blocks wrote into the repository's root"
    yield argparse.Namespace(root=root, work=Path(work), environ=environ, admin=admin, server=kube_apiserver_alone)
    admission = client.AdmissionregistrationV1Api(admin)  # leave no policy behind on this server
    for name in [p.metadata.name for p in admission.list_validating_admission_policy().items]:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
    admin.close()


def documented(hub, command: str) -> list[str]:
    """The third block's `serve` or `runner` command, as its shell would run it here, on a free port."""
    [text] = [block.text for block in blocks(DOC, HEADING) if block.not_run]
    [argv] = [argv for argv, _ in automation_commands(text) if argv[0] == command]
    here = [arg.replace("$(hostname)", socket.gethostname()).replace("$WORK", str(hub.work)) for arg in argv]
    return [sys.executable, "-m", "automation", *here, "--metrics-bind", "127.0.0.1", "--metrics-port", "0"]


class Process:
    """A command of the section, run from the repository copy, its output in a file."""

    def __init__(self, hub, argv: list[str], log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, cwd=hub.root, stdout=out, stderr=subprocess.STDOUT,
                                         env={**hub.environ, "PULUMI_CONFIG_PASSPHRASE": "outside-a-pod"},
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def tenant(hub, name: str) -> ServiceEnv:
    env = ServiceEnv(hub.admin, namespace=f"{name}-{uuid.uuid4().hex[:6]}", system_namespace=SYSTEM)
    env.namespace(env.ns)
    env.create("prod-1", **BARE)
    return env


def runs(env: ServiceEnv) -> list[dict]:
    return client.CustomObjectsApi(env.api_client).list_namespaced_custom_object(
        GROUP, VERSION, env.ns, STACKRUNS)["items"]


def test_the_documented_service_and_runner_outside_a_pod_run_a_clusters_stack(hub, pulumi_cli, tmp_path):
    """As the third block says: the service with its ServiceAccount's kubeconfig creates the run, a runner named
    after this host (--runner-hosts "$(hostname)") with the runner's claims and executes it, the cluster is Ready."""
    env = tenant(hub, "outside")
    (hub.work / "state").mkdir(exist_ok=True)  # the block's `mkdir -p "$WORK/state"`
    started = time.monotonic()
    service = Process(hub, [*documented(hub, "serve"), "--watch-namespace", env.ns], tmp_path / "serve.log")
    runner = Process(hub, documented(hub, "runner"), tmp_path / "runner.log")
    try:
        wait_until(lambda: env.ready("prod-1") or service.proc.poll() is not None or runner.proc.poll() is not None,
                   ENGINE_RUN, what="prod-1 Ready",
                   diagnose=lambda: f"{env.condition('prod-1')}\n{service.text()[-3000:]}\n{runner.text()[-3000:]}")
        assert env.ready("prod-1"), f"{service.text()[-3000:]}\n{runner.text()[-3000:]}"
        took = time.monotonic() - started
    finally:
        codes = service.stop(), runner.stop()
    [run] = runs(env)
    host = socket.gethostname()
    assert run["status"]["phase"] == "Succeeded" and run["status"]["runner"] == host
    assert run["status"]["claim"]["holder"] == host and run["spec"]["requestedBy"].startswith(f"{host}_")
    assert codes == (0, 0), (service.text()[-3000:], runner.text()[-3000:])
    for log in (service.text(), runner.text()):
        assert " ERROR " not in log and "Forbidden" not in log and "Traceback" not in log, log[-4000:]
    assert f"{host}: claimed {env.ns}/{run['metadata']['name']}" in runner.text()
    assert took < ENGINE_RUN


def test_the_service_as_a_cluster_administrator_says_the_policys_message_not_a_bare_forbidden(hub, tmp_path):
    """The first mistake: `serve` with the administrator's kubeconfig. Said once at start; then every run's create is
    refused by the policy, and its log line and the HubCluster's condition carry the policy's own words."""
    env = tenant(hub, "admin")
    argv = documented(hub, "serve")
    argv[argv.index("--kubeconfig") + 1] = hub.environ["KUBECONFIG"]
    service = Process(hub, [*argv, "--watch-namespace", env.ns, "--no-leader-election"], tmp_path / "serve.log")
    try:
        wait_until(lambda: STACKRUN_POLICY in ((env.condition("prod-1") or {}).get("message") or "")
                   or service.proc.poll() is not None, 120, what="the refusal on the HubCluster",
                   diagnose=lambda: f"{env.condition('prod-1')}\n{service.text()[-3000:]}")
        wait_until(lambda: "result=failed" in service.text(), 30, what="the run's log line")
    finally:
        code = service.stop()
    log = service.text()
    assert code == 0, log[-3000:]
    startup = [line for line in log.splitlines() if " ERROR hubwright.service: --executor runners" in line]
    assert len(startup) == 1 and author_problem("envtest-admin", SYSTEM) in startup[0], log[-3000:]
    [line] = [line for line in log.splitlines() if "hubwright.run:" in line and "result=failed" in line][:1]
    condition = env.condition("prod-1")
    assert condition is not None and condition["reason"] == "UpdateFailed"
    for said in (line, condition["message"]):
        assert f"ValidatingAdmissionPolicy '{STACKRUN_POLICY}' with binding '{STACKRUN_POLICY}' denied request: " \
               f"{POLICY_SAYS}" in said, said
        assert f"kubectl create token {SERVICE} -n {SYSTEM}" in said
        assert not re.search(r"failed: Forbidden\b", said) and said.strip() != "Forbidden"
    assert condition["message"].startswith("up ") and "403 Forbidden: hubstackruns.hubwright.io" in condition["message"]
    assert runs(env) == []  # refused: no run was made
    events = [message for type_, reason, message in env.events(name="prod-1") if reason == "UpdateFailed"]
    assert events and POLICY_SAYS in events[0]
