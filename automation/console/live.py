"""Live pages: GET /events?view=fleet|mesh|runs|cluster:NS/NAME, a server-sent event stream that says "changed"
whenever something the page shows may have changed, and nothing else: no name, no count, no namespace. The page's
script then asks for its <main> again (app.FRAGMENT), through the same access checks as any page.

A change is the viewer's when it was in a namespace they may see (a cluster page: in the cluster's namespace, and
they may see it); a change outside every namespace (the HubConfig) counts for the mesh page only. The stream polls
the cache's version (cheap: no Kubernetes call) every POLL seconds, so a change reaches the browser well within
2 s; it ends when the session does.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse

from automation.console.app import Console, console, session
from automation.console.cache import EVERYWHERE
from automation.console.pages import may_see, seen_namespaces
from stacks.names import CLUSTERS, STACKRUNS

router = APIRouter()
POLL = 0.25  # seconds between looks at the cache's version
QUIET = 0.5  # at most one event this often (a burst of changes is one reload)
HEARTBEAT = 15.0  # a comment line this often, so proxies keep the stream open


def _mine(c: Console, signed, view: str, changed: set[str] | None) -> bool:  # noqa: ANN001
    if view.startswith("cluster:"):
        namespace = view.removeprefix("cluster:").partition("/")[0]
        return (changed is None or namespace in changed) and may_see(c, signed, namespace)
    allowed = seen_namespaces(c, signed, STACKRUNS if view == "runs" else CLUSTERS)
    if changed is None:
        return True
    if EVERYWHERE in changed and view == "mesh":
        return True
    return bool(changed - {EVERYWHERE}) if allowed is None else bool(changed & set(allowed))


@router.get("/events")
async def events(request: Request, view: str = "fleet") -> StreamingResponse:
    c, signed = console(request), session(request)
    if view not in ("fleet", "mesh", "runs") and not view.startswith("cluster:"):
        raise HTTPException(404, "no such view")

    async def stream() -> AsyncIterator[bytes]:
        seen = c.cache.version
        beat = sent = time.monotonic()
        pending = False
        yield b"retry: 2000\n\n"
        while not await request.is_disconnected():
            # Every change the cache took before this look is judged before the session is: a stream ends only
            # after it has passed over what happened while it was open.
            if c.cache.version != seen:
                version, changed = c.cache.changed_since(seen)
                seen = version
                pending = pending or await asyncio.to_thread(_mine, c, signed, view, changed)
            now = time.monotonic()
            if pending and now - sent >= QUIET:
                pending, sent = False, now
                yield b"event: change\ndata: \n\n"
            if c.sessions.get(signed.id) is None:
                yield b"event: signed-out\ndata: \n\n"
                return
            if now - beat >= HEARTBEAT:
                beat = now
                yield b": keep-alive\n\n"
            await asyncio.sleep(POLL)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
