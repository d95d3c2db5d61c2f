"""The real kubectl as every test runs it: one binary, one kubeconfig, a discovery cache of its own, a timeout on
each request and on the process, and a read the API server was too loaded to answer tried again.

Why the retry: before it writes anything, kubectl reads the server's discovery and OpenAPI documents (for
`apply`'s validation, `explain`, the short names). An API server busy beside a real engine on a loaded 2-core
machine once took longer than kubectl's own 32 s to build /openapi/v2, and `kubectl apply` failed on that GET
(CI, test_gitrepo_e2e). Only such a GET is tried again, and only for a command that is the same when repeated
(SAME_TWICE): a write that timed out is reported as it failed, never sent twice.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from doubles.envtest import BUILD_HINT, EnvTest, find_binary

# A GET kubectl made for itself (discovery, OpenAPI, the object before a patch) that the server did not answer in time.
UNANSWERED_READ = re.compile(r'(?:Get|GET) "?https?://\S+?"?: (?:net/http: request canceled|net/http: TLS handshake '
                             r'timeout|context deadline exceeded|dial tcp \S+: i/o timeout|read tcp \S+: i/o timeout)')
# Commands that do the same thing when run twice.
SAME_TWICE = {"get", "explain", "describe", "api-resources", "api-versions", "apply", "wait", "version", "auth",
              "diff"}
REQUEST_TIMEOUT_S = 30  # each request's (--request-timeout); another try is made only with room for one more


def binary() -> str:
    found = find_binary("kubectl")
    assert found, f"kubectl not found: {BUILD_HINT}"
    return found


def _verb(args: tuple[str, ...]) -> str:
    """The command of `args` (the first word that is not a flag or a flag's value given apart)."""
    words = iter(args)
    for word in words:
        if word.startswith("-"):
            if "=" not in word and word in ("-n", "--namespace", "--context", "--kubeconfig", "--cache-dir"):
                next(words, None)
            continue
        return word
    return ""


@dataclass(frozen=True)
class Kubectl:
    """`Kubectl(kubeconfig, cache)(*args)`: the real kubectl against one API server; a CompletedProcess. With
    check (the default) a non-zero exit fails the test with kubectl's own words."""
    kubeconfig: Path
    cache: Path

    def command(self, *args: str) -> list[str]:
        return [binary(), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache}",
                f"--request-timeout={REQUEST_TIMEOUT_S}s", *args]

    def __call__(self, *args: str, stdin: Optional[str] = None, check: bool = True, timeout: float = 180,
                 cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(self.command(*args), input=stdin, capture_output=True, text=True, cwd=cwd, env=env,
                                  timeout=max(1.0, deadline - time.monotonic()))
            room = deadline - time.monotonic() > REQUEST_TIMEOUT_S + 5
            if done.returncode == 0 or not again(args, done.stderr) or not room:
                break
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        return done


def against(env: EnvTest) -> Kubectl:
    """The runner for `env`'s server as its admin, with the server's own discovery cache."""
    return Kubectl(env.kubeconfig(), env.workdir / "kubectl-cache")


def again(args: tuple[str, ...], stderr: str) -> bool:
    """Whether a failed `kubectl ARGS` is tried again: a read the server did not answer, of a command that is the
    same when repeated."""
    return _verb(args) in SAME_TWICE and UNANSWERED_READ.search(stderr) is not None
