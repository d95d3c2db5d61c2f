"""`/docs`: Swagger UI from the files of the pinned `fastapi-offline` package (requirements.txt; Swagger UI
5.32.6), served by this API, under a strict Content-Security-Policy.

FastAPI's own /docs loads Swagger UI from a CDN at whatever version the CDN serves, with no integrity check, on
the page where bearer tokens are typed. Here every script and style is a file of the installed package, served
from /docs/assets/ (a fixed list: no path from the request reaches the file system), the page has no inline
script (its start-up is /docs/init.js), and the CSP lets the page load only from this origin and talk only to
it: a script injected into the page, or swapped on the way, cannot run or send a token elsewhere.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, Response

STATIC = Path(fastapi_offline.__file__).resolve().parent / "static"  # only its files are used, not its app

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
ASSETS = {  # name under /docs/assets/ -> media type
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="stylesheet" type="text/css" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"""
INIT = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""


@cache
def asset(name: str) -> bytes:
    """An asset of the installed package (read once: they never change while the process runs)."""
    return (STATIC / name).read_bytes()


def add_docs(app: FastAPI) -> None:
    """GET /docs, /docs/init.js and /docs/assets/{name} (the names in ASSETS), each with the CSP."""
    page = PAGE.format(title=f"{app.title} - Swagger UI")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=HEADERS)

    @app.get("/docs/init.js", include_in_schema=False)
    async def init() -> Response:
        return Response(INIT, media_type="text/javascript; charset=utf-8", headers=HEADERS)

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def assets(name: str) -> Response:
        media = ASSETS.get(name)
        if media is None:
            raise HTTPException(404, "no such asset")
        return Response(asset(name), media_type=media,
                        headers={**HEADERS, "Cache-Control": "public, max-age=86400"})
