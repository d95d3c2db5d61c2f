"""Listing clusters page by page, with a filter Kubernetes cannot apply: facts (`?fact=key=value`).

Without a fact filter a page is one Kubernetes list call, and its continue token is passed through as it is.
With one, the API keeps asking Kubernetes for chunks until the page has `limit` matches, so it usually stops
in the middle of a chunk. Its continue token then says where: the Kubernetes continue token that fetched that
chunk (a consistent snapshot, so asking again gives the same chunk) and the key (namespace/name) of the last
cluster returned. Resuming fetches that chunk again and skips every cluster up to that key; the first chunk
has no snapshot token, and a fresh list skipped by key still returns each cluster at most once, because
Kubernetes lists in key order. The token also carries a fingerprint of the filters, so it cannot be replayed
with other ones.

A request scans at most MAX_CHUNKS chunks of CHUNK clusters (fewer, larger ones when `limit` is larger than
CHUNK; never more than MAX_CHUNKS * CHUNK clusters, whatever `limit` or the continue token's chunk size, which
the caller can rewrite, asks): when those hold fewer matches, the page is
short (even empty) and its continue token points at the next chunk. So a filter that matches little costs each
request a bounded amount of Kubernetes and worker time, and the caller (who follows `continue` until it is
null, as with any list) pays for the rest in requests, which CallerLimits counts.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError

from automation.api.models import section

TOKEN_PREFIX = "cnf1."  # a fact-filtered list's continue token (Kubernetes' own never starts with it)
# Clusters per Kubernetes list call while filtering by facts. Small because the scan's cost is the clusters it
# fetches (kube-apiserver serializing, this process parsing JSON under the GIL): at 500 (kubectl's chunk size)
# one scan of 2 chunks was ~110 ms of kube-apiserver CPU and ~30 ms of the GIL, and another tenant's list under
# a flood of them waited that long (bench.registry_flood: p99 6x alone; at 100, under 3x).
CHUNK = 100
MAX_CHUNKS = 2  # Kubernetes list calls one fact-filtered request makes at most (then a short page)

Fetch = Callable[[int, "str | None"], Mapping[str, Any]]  # (limit, continue) -> a Kubernetes list


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    continue_: str | None


def parse_facts(values: Sequence[str]) -> list[tuple[str, str]]:
    """`key=value` pairs of ?fact= (the value may itself contain '='); 422 naming the parameter otherwise."""
    pairs = []
    for value in values:
        key, sep, wanted = value.partition("=")
        if not sep or not key:
            raise RequestValidationError([{"loc": ("query", "fact"), "type": "value_error",
                                           "msg": f"fact={value!r} is not key=value (e.g. ?fact=cloud=aws)"}])
        pairs.append((key, wanted))
    return pairs


def has_facts(doc: Mapping[str, Any], wanted: Sequence[tuple[str, str]]) -> bool:
    """Every wanted fact is a static fact (spec.facts) or a latest dynamic fact (status.facts.facts) of `doc`."""
    static = section(section(doc, "spec"), "facts")
    dynamic = section(section(section(doc, "status"), "facts"), "facts")
    return all(static.get(key) == value or dynamic.get(key) == value for key, value in wanted)


def fingerprint(*filters: Any) -> str:
    return hashlib.sha256(json.dumps(filters, sort_keys=True).encode()).hexdigest()[:16]


def _key(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def _encode(snapshot: str | None, after: str, chunk: int, filters: str) -> str:
    raw = json.dumps({"k": snapshot, "a": after, "n": chunk, "f": filters}, separators=(",", ":"))
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(token: str, filters: str) -> tuple[str | None, str, int]:
    bad = HTTPException(400, "continue: not a token from a list with these filters: start again without "
                             "continue, or pass the same tenant, labelSelector and fact parameters")
    if not token.startswith(TOKEN_PREFIX):
        raise bad
    try:
        body = token[len(TOKEN_PREFIX):]
        decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        snapshot, after, chunk, seen = decoded["k"], decoded["a"], int(decoded["n"]), decoded["f"]
    except (ValueError, KeyError, TypeError):
        raise bad from None
    if seen != filters or not isinstance(after, str) or not 0 < chunk <= 10_000 or \
            not isinstance(snapshot, (str, type(None))):
        raise bad
    return snapshot, after, chunk


def page(fetch: Fetch, *, limit: int | None, token: str | None, keep: Callable[[Mapping[str, Any]], bool] | None,
         filters: str = "") -> Page:
    """One page of at most `limit` items (all of them when None) that `keep`, and the token of the next page."""
    if keep is None:
        found = fetch(limit or 0, token)
        return Page(list(found.get("items") or []), (found.get("metadata") or {}).get("continue") or None)
    snapshot, after, chunk = _decode(token, filters) if token else (None, "", max(CHUNK, limit or 0))
    chunk = min(chunk, MAX_CHUNKS * CHUNK)  # the scan's bound in clusters, whatever limit or the token say
    items: list[dict[str, Any]] = []
    for _ in range(max(1, MAX_CHUNKS * CHUNK // chunk)):
        found = fetch(chunk, snapshot)
        chunk_items = list(found.get("items") or [])
        following = (found.get("metadata") or {}).get("continue") or None
        for doc in chunk_items:
            if after and _key(doc) <= after or not keep(doc):
                continue
            items.append(doc)
            if limit is not None and len(items) == limit:
                last = doc is chunk_items[-1]
                if not last:
                    return Page(items, _encode(snapshot, _key(doc), chunk, filters))
                return Page(items, _encode(following, "", chunk, filters) if following else None)
        if following is None:
            return Page(items, None)
        snapshot, after = following, ""
    return Page(items, _encode(snapshot, "", chunk, filters))  # MAX_CHUNKS scanned: the rest on the next page
