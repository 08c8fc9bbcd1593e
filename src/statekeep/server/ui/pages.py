"""The console's HTML pages and static files. Pages are server-rendered shells (layout, navigation,
the page's parameters); ``static/console.js`` fills them through the JSON endpoints and the REST API,
so nothing secret is rendered before the browser has presented a token."""

from __future__ import annotations

import html
import json
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from statekeep.errors import NotFoundError
from statekeep.server.ui.batches import batch_history

STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
NAV = (("functions", "Functions", "/ui/functions"), ("metadata", "Metadata", "/ui/metadata"),
       ("handles", "State handles", "/ui/handles"), ("topics", "Topics", "/ui/topics"))


def _read(directory: str, name: str) -> bytes:
    return resources.files("statekeep.server.ui").joinpath(directory, name).read_bytes()


def render(page: str, title: str, **params: str) -> HTMLResponse:
    """The shell for ``page`` with ``params`` (JSON in a data attribute, escaped)."""
    template = _read("templates", "base.html").decode()
    section = "functions" if page in ("state", "changelog") else page
    nav = "".join(f'<a href="{href}"{" class=active" if key == section else ""}>{label}</a>'
                  for key, label, href in NAV)
    body = (template.replace("{{title}}", html.escape(title)).replace("{{nav}}", nav)
            .replace("{{page}}", html.escape(page)).replace("{{params}}", html.escape(json.dumps(params))))
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


router = APIRouter(include_in_schema=False)


@router.get("/ui")
@router.get("/ui/")
async def start() -> Response:
    return RedirectResponse("/ui/functions", status_code=307)


@router.get("/ui/functions")
async def functions(request: Request) -> Response:
    batch_history(request)  # the records/s plot starts from the console's first visit
    return render("functions", "Functions")


@router.get("/ui/functions/{tenant}/{namespace}/{name}")
async def state(tenant: str, namespace: str, name: str) -> Response:
    return render("state", f"{tenant}/{namespace}/{name} · state", tenant=tenant, namespace=namespace,
                  name=name)


@router.get("/ui/functions/{tenant}/{namespace}/{name}/changelog")
async def changelog(tenant: str, namespace: str, name: str) -> Response:
    return render("changelog", f"{tenant}/{namespace}/{name} · changelog", tenant=tenant,
                  namespace=namespace, name=name)


@router.get("/ui/metadata")
async def metadata(path: str = "/") -> Response:
    return render("metadata", "Metadata", path=path)


@router.get("/ui/handles")
async def handles(root: str = "") -> Response:
    return render("handles", "State handles", root=root)


@router.get("/ui/static/{filename}")
async def static(filename: str) -> Response:
    if filename not in STATIC:
        raise NotFoundError(f"no static file {filename!r}")
    return Response(_read("static", filename), media_type=STATIC[filename],
                    headers={"Cache-Control": "max-age=60"})


@router.get("/favicon.ico")
async def favicon() -> Response:  # browsers ask for it; a 404 would be a console error
    return Response(_read("static", "favicon.svg"), media_type=STATIC["favicon.svg"])
