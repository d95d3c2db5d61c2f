"""`python -m automation api`: the registry API in one process (uvicorn, one worker), next to the service.

It reaches Kubernetes as --kubeconfig/--context says, else as the pod's ServiceAccount: that client is the API's
own (the few rights docs/registry.md lists); every other call is made as the request's bearer token. The facts
history goes to --facts-db: SQLite for one replica, PostgreSQL for several (rate limits are per replica). The run
history (automation.api.history) is read from --history-store, beside the state backend by default.

Nothing secret reaches the log: the access log shows paths without their query strings (the install endpoint
takes its one-time token as ?token=), any `token=` or bearer token left in a message is masked, and the facts
database URL is logged without its password. SIGTERM (and Ctrl+C) stop it gracefully: uvicorn finishes the
requests in flight, then the process exits 0.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import signal
import sys
import tempfile
from typing import Any, Mapping

import uvicorn

from automation.adapters.facts import FactsStore
from automation.adapters.history.options import store_from
from automation.adapters.kube.kubeconfig import kube_client
from automation.api import agents, bootstrap, facts, gitrepos, history, tenants
from automation.api.app import ApiSettings, ClientCache, Registry, create_app
from stacks.errors import InvalidSpec
from stacks.names import parse_host_port
from stacks.options import API, HelpFormatter, add_options, option, values
from stacks.release import image_problem

LOG = logging.getLogger("hubwright.api")
FACTS_FILE = "registry-facts.db"
ROUTERS = (tenants.router, facts.router, bootstrap.router, agents.router, gitrepos.router,  # every resource module's
           history.router)  # routes
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


def add_api_command(subparsers: Any, environ: Mapping[str, str] | None = None) -> None:
    """Register `api` on the CLI's subparsers: one flag per `api` option of the one table (stacks/options.py),
    each named with the environment variable that sets its default (read here, once)."""
    api = subparsers.add_parser(
        "api", formatter_class=HelpFormatter,
        help="run the registry's REST API (tenants, clusters, facts, bootstrap tokens)",
        description="Serve the registry's REST API: tenants, clusters, dynamic facts and one-time bootstrap over "
                    "the Tenant and Cluster resources. Callers send their own Kubernetes bearer token; RBAC "
                    "decides. OpenAPI at /openapi.json, interactive docs at /docs. Every option may be given by "
                    "its environment variable instead (a flag wins).")
    add_options(api, API, os.environ if environ is None else environ)
    api.set_defaults(func=api_command)


def settings_from(args: argparse.Namespace) -> ApiSettings:
    problem = image_problem(args.agent_image)
    if problem:  # every cluster installed from this API would run it: refused before anything starts
        raise InvalidSpec.one("python -m automation api", "--agent-image",
                              f"{problem} (env {option('agent-image').env})")
    host, port = listen_on(args.bind)
    public = args.public_url or f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    names = {f.name for f in dataclasses.fields(ApiSettings)} - {"public_url"}
    return ApiSettings(**values(args, API, names), public_url=public)


def api_command(args: argparse.Namespace) -> int:
    problem = state_dir_problem(args)
    if problem is not None:  # a usage error, before anything starts (not SQLAlchemy's traceback)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    host, port = listen_on(args.bind)
    settings = settings_from(args)
    runs = store_from(args, "python -m automation api")  # a bad --history-store: exit 2, before anything is opened
    LOG.info("run history %s", f"in {runs.location}" if runs is not None else "off")
    own = kube_client(args.kubeconfig, args.context)
    url = facts_url(args)
    store = FactsStore(url, retention=args.facts_retention)
    LOG.info("facts history in %s (keeping %d versions per cluster)", redact_url(url), args.facts_retention)
    reg = Registry(settings=settings, own=own, callers=ClientCache(own.configuration, settings.token_cache),
                   facts=store, history=runs)  # times every client (Registry.__post_init__)
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
