"""`python -m automation api`: the registry API in one process (uvicorn, one worker), next to the service.

It reaches Kubernetes as --kubeconfig/--context says, else as the pod's ServiceAccount: that client is the API's
own (the few rights docs/registry.md lists); every other call is made as the request's bearer token. The facts
history goes to --facts-db: SQLite for one replica, PostgreSQL for several (rate limits are per replica).

Nothing secret reaches the log: the access log shows paths without their query strings (the install endpoint
takes its one-time token as ?token=), any `token=` or bearer token left in a message is masked, and the facts
database URL is logged without its password. SIGTERM (and Ctrl+C) stop it gracefully: uvicorn finishes the
requests in flight, then the process exits 0.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import tempfile
from typing import Any

import uvicorn

from automation.adapters.facts import FactsStore
from automation.adapters.kube.kubeconfig import kube_client
from automation.api import agents, bootstrap, facts, tenants
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from stacks.errors import InvalidSpec
from stacks.names import parse_host_port
from stacks.release import image_problem

LOG = logging.getLogger("hubwright.api")
DEFAULT_BIND = "127.0.0.1:8081"  # not serve's metrics port (8080): both run on one machine by hand; the pod binds 0.0.0.0:8080
FACTS_FILE = "registry-facts.db"
ROUTERS = (tenants.router, facts.router, bootstrap.router, agents.router)  # every resource module's routes
_SECRET = re.compile(r"(?i)((?:[?&;]|\b)token=|bearer\s+)[^\s&\"';]+")


class NoQueryString(logging.Filter):
    """uvicorn's access log line with its path cut at '?': a query string may carry a one-time token."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


class MaskSecrets(logging.Filter):
    """Any `token=...` or `Bearer ...` still in a message, whoever logged it, is masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _SECRET.sub(lambda found: found.group(1) + "***", message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(MaskSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    logging.getLogger("uvicorn.access").addFilter(NoQueryString())


def redact_url(url: str) -> str:
    """A database URL without its password."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def listen_on(bind: str) -> tuple[str, int]:
    """(host, port) for uvicorn from host:port; no host means every address."""
    host, port = parse_host_port(bind, bind=True)
    return ("0.0.0.0" if host is None else str(host)), port


def facts_url(args: argparse.Namespace) -> str:
    if args.facts_db:
        return args.facts_db
    return "sqlite:///" + os.path.abspath(os.path.join(args.state_dir, FACTS_FILE))


def state_dir_problem(args: argparse.Namespace) -> str | None:
    """Why the default SQLite history cannot live in --state-dir (None: it can, or --facts-db names another)."""
    if args.facts_db:
        return None
    path = os.path.abspath(args.state_dir)
    if not os.path.isdir(path):
        why = "is not a directory" if os.path.exists(path) else "does not exist"
    else:
        try:
            with tempfile.TemporaryFile(dir=path):  # as SQLite will: create a file there
                return None
        except OSError as exc:
            why = f"cannot be written ({exc.strerror or exc})"
    given = "--state-dir" if args.state_dir != "." else "the working directory (no --state-dir given)"
    return (f"{given} {path} {why}: the registry's facts history ({FACTS_FILE}) needs a directory it can write. "
            "Give --state-dir DIR (env HUBWRIGHT_STATE_DIR), or --facts-db URL (env HUBWRIGHT_FACTS_DB) for "
            "another database")


def add_api_command(subparsers: Any) -> None:
    """Register `api` on the CLI's subparsers."""
    defaults = ApiSettings()
    env = os.environ.get
    api = subparsers.add_parser(
        "api", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="run the registry's REST API (tenants, clusters, facts, bootstrap tokens)",
        description="Serve the registry's REST API: tenants, clusters, dynamic facts and one-time bootstrap over "
                    "the Tenant and Cluster resources. Callers send their own Kubernetes bearer token; RBAC "
                    "decides. OpenAPI at /openapi.json, interactive docs at /docs.")
    kube = api.add_argument_group("Kubernetes")
    kube.add_argument("--kubeconfig", default=env("KUBECONFIG"),
                      help="kubeconfig file; unset: the in-cluster ServiceAccount in a pod, else ~/.kube/config "
                           "(env KUBECONFIG)")
    kube.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    kube.add_argument("--token-cache", type=int, default=defaults.token_cache,
                      help="Kubernetes clients kept, one per caller's token (least recently used go first)")
    kube.add_argument("--kube-connect-timeout", type=float, default=defaults.kube_connect_timeout,
                      help="seconds every Kubernetes call waits to connect (then the request answers 504)")
    kube.add_argument("--kube-read-timeout", type=float, default=defaults.kube_read_timeout,
                      help="seconds every Kubernetes call waits for each read of its answer (then 504)")

    serving = api.add_argument_group("serving")
    serving.add_argument("--bind", default=env("HUBWRIGHT_API_BIND", DEFAULT_BIND),
                         help="host:port to listen on (:8081 or 0.0.0.0:8081: every address; env HUBWRIGHT_API_BIND)")
    serving.add_argument("--public-url", default=env("HUBWRIGHT_PUBLIC_URL"),
                         help="where agents reach this API, written into their manifests (default: http://<bind>; "
                              "env HUBWRIGHT_PUBLIC_URL)")
    serving.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serving.add_argument("--caller-concurrency", type=int, default=defaults.caller_concurrency,
                         help="requests one caller (bearer token) may have in flight at once, per replica (429 beyond)")
    serving.add_argument("--caller-rate", type=float, default=defaults.caller_rate,
                         help="requests per second one caller (bearer token) may make, per replica (429 beyond)")
    serving.add_argument("--caller-burst", type=int, default=defaults.caller_burst,
                         help="requests one caller (bearer token) may make at once above --caller-rate, per replica")
    serving.add_argument("--caller-scan-rate", type=float, default=defaults.caller_scan_rate,
                         help="fact-filtered lists per second one caller may make (one at a time), per replica")
    serving.add_argument("--caller-scan-burst", type=int, default=defaults.caller_scan_burst,
                         help="fact-filtered lists one caller may make in a burst above --caller-scan-rate")

    facts = api.add_argument_group("facts history")
    facts.add_argument("--state-dir", default=env("HUBWRIGHT_STATE_DIR", "."),
                       help=f"where the default SQLite history lives ({FACTS_FILE}; env HUBWRIGHT_STATE_DIR)")
    facts.add_argument("--facts-db", default=env("HUBWRIGHT_FACTS_DB"),
                       help="SQLAlchemy URL of the history: sqlite:///path.db (one replica) or postgresql://... "
                            f"(several) (default: sqlite:///<state-dir>/{FACTS_FILE}; env HUBWRIGHT_FACTS_DB)")
    facts.add_argument("--facts-retention", type=int, default=1000,
                       help="versions kept per cluster (the oldest go first; the latest is always kept)")

    install = api.add_argument_group("bootstrap and install")
    install.add_argument("--install-rate", type=float, default=defaults.install_rate,
                         help="install requests per second per client address, per replica")
    install.add_argument("--install-burst", type=int, default=defaults.install_burst,
                         help="install requests a client address may make at once, per replica")
    install.add_argument("--trust-forwarded-for", action=argparse.BooleanOptionalAction,
                         default=defaults.trust_forwarded_for,
                         help="rate-limit by X-Forwarded-For: only behind a proxy you run that sets it")
    install.add_argument("--agent-image", default=env("HUBWRIGHT_AGENT_IMAGE", defaults.agent_image),
                         help="the facts agent's image: hubwright's, pinned by version or digest (repo@sha256:...), "
                              "never :latest (default: this release's; env HUBWRIGHT_AGENT_IMAGE)")
    install.add_argument("--agent-token-seconds", type=int, default=defaults.agent_token_seconds,
                         help="lifetime of the agent's ServiceAccount token (it requests a new one before expiry)")
    install.add_argument("--hub-name", default=env("HUBWRIGHT_HUB_NAME", defaults.hub_name),
                         help="the HubConfig whose shared ingress install answers use: the service's --hub-name "
                              "(env HUBWRIGHT_HUB_NAME)")
    # Agents rotate their token through this API now (automation.api.agents), never at the hub's Kubernetes API:
    # these two are accepted so existing command lines still start, and ignored.
    install.add_argument("--hub-url", default=None, help=argparse.SUPPRESS)
    install.add_argument("--hub-ca", default=None, help=argparse.SUPPRESS)
    api.set_defaults(func=api_command)


def settings_from(args: argparse.Namespace) -> ApiSettings:
    problem = image_problem(args.agent_image)
    if problem:  # every cluster installed from this API would run it: refused before anything starts
        raise InvalidSpec.one("python -m automation api", "--agent-image", f"{problem} (env HUBWRIGHT_AGENT_IMAGE)")
    host, port = listen_on(args.bind)
    public = args.public_url or f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    return ApiSettings(token_cache=args.token_cache, install_rate=args.install_rate,
                       install_burst=args.install_burst, agent_image=args.agent_image, public_url=public,
                       agent_token_seconds=args.agent_token_seconds, trust_forwarded_for=args.trust_forwarded_for,
                       hub_name=args.hub_name,
                       kube_connect_timeout=args.kube_connect_timeout, kube_read_timeout=args.kube_read_timeout,
                       caller_concurrency=args.caller_concurrency, caller_rate=args.caller_rate,
                       caller_burst=args.caller_burst, caller_scan_rate=args.caller_scan_rate,
                       caller_scan_burst=args.caller_scan_burst)


def api_command(args: argparse.Namespace) -> int:
    problem = state_dir_problem(args)
    if problem is not None:  # a usage error, before anything starts (not SQLAlchemy's traceback)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    host, port = listen_on(args.bind)
    settings = settings_from(args)
    own = kube_client(args.kubeconfig, args.context)
    url = facts_url(args)
    store = FactsStore(url, retention=args.facts_retention)
    LOG.info("facts history in %s (keeping %d versions per cluster)", redact_url(url), args.facts_retention)
    reg = Registry(settings=settings, own=own, callers=ClientCache(own.configuration, settings.token_cache),
                   facts=store)  # times every client (Registry.__post_init__)
    server = uvicorn.Server(uvicorn.Config(
        create_app(reg, routers=ROUTERS), host=host, port=port, workers=1, log_config=None, access_log=True, server_header=False,
        proxy_headers=False, timeout_graceful_shutdown=20))
    # uvicorn re-raises the signal that stopped it once it has shut down; a handler of ours makes that a no-op,
    # so a SIGTERM ends in a clean exit (0) after the graceful shutdown.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        store.close()
        reg.own.close()
        own.close()
    LOG.info("stopped")
    return 0 if server.started else 1
