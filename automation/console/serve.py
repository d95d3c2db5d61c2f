"""`python -m automation console`: the fleet console in one process (uvicorn, one worker), beside the service.

It reaches Kubernetes as --kubeconfig/--context says, else as the pod's ServiceAccount (its own rights: read the
kinds it shows, review tokens and access; docs/console.md). Its informers fill the cache before it answers; every
viewer's page is then served from that cache, filtered by the viewer's SubjectAccessReviews. The run history is
read from --history-store (beside the state backend by default), as the API reads it. SIGTERM stops it gracefully.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import threading
from typing import Any, Mapping

import uvicorn
from fastapi import FastAPI

from automation.adapters.history.options import store_from
from automation.adapters.kube.clients import ClientCache, timed
from automation.adapters.kube.informer import wait_synced
from automation.adapters.kube.kubeconfig import kube_client
from automation.console import actions, assets, live, pages
from automation.console.access import Access, Sessions
from automation.console.app import Console, ConsoleSettings, create_app
from automation.console.cache import ConsoleCache, informers
from automation.console.model import FleetModel
from stacks.errors import InvalidSpec
from stacks.names import parse_host_port
from stacks.options import CONSOLE, HelpFormatter, add_options

LOG = logging.getLogger("hubwright.console")
ROUTERS = (assets.router, pages.router, live.router, actions.router)
TOKEN_CACHE = 256  # viewers' clients kept (their actions are made with their own tokens)


def add_console_command(subparsers: Any, environ: Mapping[str, str] | None = None) -> None:
    parser = subparsers.add_parser(
        "console", formatter_class=HelpFormatter,
        help="run the fleet console: every cluster, its runs and its mesh, in a browser (docs/console.md)",
        description="Serve the fleet console. Viewers sign in with a bearer token of the hub (a ServiceAccount "
                    "token from `kubectl create token`, or an OIDC ID token); each sees what their RBAC allows. "
                    "Every option may be given by its environment variable instead (a flag wins).")
    add_options(parser, CONSOLE, os.environ if environ is None else environ)
    parser.set_defaults(func=console_command)


def build(args: argparse.Namespace, own: Any) -> tuple[FastAPI, Console]:
    """The application and its state, from the parsed flags and the console's own client (not started)."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise InvalidSpec.one("python -m automation console", "--tls-cert" if args.tls_key else "--tls-key",
                              "give both --tls-cert and --tls-key, or neither")
    history = store_from(args, "python -m automation console")
    timeout = (args.kube_connect_timeout, args.kube_read_timeout)
    own = timed(own, timeout)
    cache = ConsoleCache()
    state = Console(
        settings=ConsoleSettings(page_size=max(1, args.page_size),
                                 secure_cookies=bool(args.secure_cookies or args.tls_cert)),
        cache=cache, sessions=Sessions(own, hours=args.session_hours),
        access=Access(own, ttl=args.access_cache_seconds),
        callers=ClientCache(own.configuration, TOKEN_CACHE, timeout), history=history, model=FleetModel(cache))
    return create_app(state, routers=ROUTERS), state


def console_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    own = kube_client(args.kubeconfig, args.context)
    app, state = build(args, own)
    LOG.info("run history %s", f"in {state.history.location}" if state.history is not None else "off")
    watchers = informers(state.cache, own, hub_name=args.hub_name, namespace=args.namespace,
                         role_map=args.role_map_configmap)
    stop = threading.Event()
    for informer in watchers:
        informer.start()
    if not wait_synced(watchers, stop):
        return 1
    LOG.info("cache filled: %d clusters, %d runs", len(state.cache.rows), len(state.cache.runs.objects))
    gc.freeze()  # what the first lists filled stays: a full collection no longer walks it (bench/console.py)
    host, port = parse_host_port(args.console_bind, bind=True)
    server = uvicorn.Server(uvicorn.Config(
        app, host="0.0.0.0" if host is None else str(host), port=port, workers=1, log_config=None,
        access_log=False, server_header=False, proxy_headers=False, timeout_graceful_shutdown=5,
        ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        server.run()
    finally:
        for informer in watchers:
            informer.stop()
        state.access.close()
        state.model.close()
    LOG.info("stopped")
    return 0 if server.started else 1
