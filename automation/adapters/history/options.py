"""The history store a command's options name (--history-store, --backend, --state-dir): the service, the runners,
the registry API and `python -m automation history` find the same one from the same options."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from automation.adapters.history import HistoryStore
from automation.adapters.history.select import NoStore, store_of
from stacks.errors import InvalidSpec
from stacks.options import option

LOG = logging.getLogger("hubwright.history")


def store_from(args: Any, command: str) -> HistoryStore | None:
    """The store, or None: --history-store off, or the default on a backend that keeps no objects (Pulumi Cloud:
    said once, as a warning). A value that names no store is InvalidSpec naming the option (the CLI says it, exit 2)."""
    spec = getattr(args, "history_store", None) or "backend"
    try:
        return store_of(spec, backend=getattr(args, "backend", None) or None,
                        state_dir=Path(getattr(args, "state_dir", None) or "state"))
    except NoStore as exc:
        LOG.warning("the run history is off: %s", exc)
        return None
    except ValueError as exc:
        text = str(exc) if "--history-store" in str(exc) else f"--history-store {spec!r}: {exc}"
        raise InvalidSpec.one(command, "", f"{text} (the flag, else env {option('history-store').env})") from None
