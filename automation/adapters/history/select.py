"""--history-store: which store keeps the run history. `backend` (the default) puts it beside the Pulumi state, in
the store hubwright already has credentials for: `file://<dir>` → `<dir>/.hubwright/history`, `s3://bucket/prefix?…`
→ `<prefix>/.hubwright/history` in the same bucket, reached as the Pulumi CLI reaches it (gocloud's S3 URL
parameters: endpoint, disableSSL, s3ForcePathStyle, region, profile). A file:// or s3:// URL names a store
directly (its path or prefix is the root, nothing added); `off` keeps no history.

Pulumi Cloud, gs://, azblob:// and postgres:// backends hold nothing hubwright can write objects to: they need an
explicit store, said at start-up rather than found at the first run's end.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from automation.adapters.history import HistoryStore
from automation.adapters.history.files import FileHistory
from automation.adapters.history.s3 import S3History

class NoStore(ValueError):
    """The default (`backend`) on a backend that keeps no objects hubwright can write: the history is off, said."""


BESIDE_STATE = ".hubwright/history"  # beside the backend's .pulumi/


def store_of(spec: str, *, backend: str | None, state_dir: Path) -> HistoryStore | None:
    """The store --history-store names (module docstring); `backend` None is the file backend on `state_dir`."""
    if spec == "off":
        return None
    if spec == "backend":
        url = backend or f"file://{state_dir.resolve()}"
        if url.startswith("file://"):
            return FileHistory(_file_path(url, url) / BESIDE_STATE)
        if url.startswith("s3://"):
            return _s3(url, url, BESIDE_STATE)
        shown = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)  # a postgres:// URL's password
        raise NoStore(f"--history-store backend: the backend {shown} keeps no objects hubwright can write (Pulumi "
                      "Cloud keeps each stack's own update history, in its console); set --history-store to a "
                      "file:// or s3:// URL to record each run's cause, diff and log, or off")
    if spec.startswith("file://"):
        return FileHistory(_file_path(spec, f"--history-store {spec}"))
    if spec.startswith("s3://"):
        return _s3(spec, f"--history-store {spec}", "")
    raise ValueError(f"--history-store {spec!r}: expected off, backend, a file:// URL or an s3:// URL")


def _file_path(url: str, said: str) -> Path:
    """The directory of a file:// URL as the Pulumi CLI reads it: `file://~/x` in the home directory, a query
    (the backend's options) not part of it."""
    path = url[len("file://"):].split("?", 1)[0]
    if not path:
        raise ValueError(f"{said}: names no directory")
    return Path(path).expanduser().absolute()


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("1", "t", "true")  # Go's strconv.ParseBool, which gocloud reads them with


def _s3(url: str, said: str, beside: str) -> S3History:
    """S3History on `url`'s bucket, under its prefix (and `beside`), with a boto3 client made from its parameters;
    the credentials are boto3's own (the environment, the profile, the instance's role), as the CLI's are."""
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"{said}: names no bucket")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    endpoint = query.get("endpoint") or None
    if endpoint and "://" not in endpoint:  # gocloud takes HOST:PORT, the scheme from disableSSL
        insecure = _true(query.get("disableSSL")) or _true(query.get("disable_https"))
        endpoint = f"{'http' if insecure else 'https'}://{endpoint}"
    path_style = _true(query.get("s3ForcePathStyle")) or _true(query.get("use_path_style"))
    try:
        session = boto3.Session(profile_name=query.get("profile") or None)
        # The CLI's order (AWS_REGION first); then botocore's own (AWS_DEFAULT_REGION, the profile's).
        region = query.get("region") or os.environ.get("AWS_REGION") or session.region_name or "us-east-1"
        client = session.client("s3", endpoint_url=endpoint, region_name=region,
                                config=Config(s3={"addressing_style": "path" if path_style else "auto"}))
    except (BotoCoreError, ValueError) as exc:  # an unknown profile; an endpoint that is no URL
        raise ValueError(f"{said}: {exc}") from None
    prefix = "/".join(p for p in (parts.path.strip("/"), beside) if p)
    return S3History(client, parts.netloc, prefix)
