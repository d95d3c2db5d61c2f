"""The Automation API's in-process language server, quiet after a failed update.

An inline program runs behind a gRPC server in this process (pulumi.automation's LanguageServer). When an update
fails, the `pulumi` CLI exits while the program is still calling its resource monitor, and grpcio logs each such
call as "Exception calling application" with a chained traceback (logger `grpc._server`): about 60 lines per
failed run, after the run's own error was already reported whole (EngineError, from the CLI's output). Those
records, the ones whose exception is the monitor being gone (UNAVAILABLE), are dropped; any other error of the
language server is still logged.
"""
from __future__ import annotations

import logging

import grpc

LOGGER = "grpc._server"


class MonitorGone(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        code = getattr(exc, "code", None)
        return not (isinstance(exc, grpc.RpcError) and callable(code) and code() == grpc.StatusCode.UNAVAILABLE)


_FILTER = MonitorGone()


def quiet_language_server() -> None:
    """Install the filter once per process (idempotent)."""
    logger = logging.getLogger(LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
