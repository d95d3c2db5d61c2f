"""The history store a command's options name (--history-store, --backend, --state-dir): the service, the runners,
the registry API and `python -m automation history` find the same one from the same options."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from automation.adapters.history import HistoryStore
from automation.adapters.history.select import store_of


def store_from(args: Any) -> HistoryStore | None:
    """The store, or None (--history-store off); a value that names none stops the command, saying why."""
    try:
        return store_of(getattr(args, "history_store", None) or "backend", backend=getattr(args, "backend", None) or None,
                        state_dir=Path(getattr(args, "state_dir", None) or "state"))
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
