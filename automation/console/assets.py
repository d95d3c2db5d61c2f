"""The console's own script and style, files of this package served from /assets/ (a fixed list: no path from the
request reaches the file system). Nothing is loaded from anywhere else: the CSP allows this origin only."""
from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
router = APIRouter()


@cache
def asset(name: str) -> bytes:
    return (STATIC / name).read_bytes()


@router.get("/assets/{name}", include_in_schema=False)
async def assets(name: str) -> Response:
    media = ASSETS.get(name)
    if media is None:
        raise HTTPException(404, "no such asset")
    return Response(asset(name), media_type=media, headers={"Cache-Control": "public, max-age=3600"})
