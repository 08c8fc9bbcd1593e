"""The web console of ``statekeep standalone``, served at ``/ui`` (issue 16).

``router`` is a FastAPI :class:`APIRouter` with the pages (:mod:`.pages`), the
console's JSON endpoints (:mod:`.api`) and its server-sent event streams (:mod:`.events`). Templates and
static files ship in this package (no CDN, no build step). The pages are server-rendered shells; a little
vanilla JS (``static/console.js``) fills them from the REST API and the console's endpoints, with the
token the console prompts for when the server has auth on (kept in the browser's localStorage and in a
``SameSite=Strict`` cookie read only by GET endpoints).

Pages: ``/ui/functions`` (status, records, records/s per micro-batch, create, start/stop, delete),
``/ui/functions/T/N/F`` (state keys), ``/ui/functions/T/N/F/changelog`` (live tail, compaction point,
snapshots, followers), ``/ui/metadata?path=`` (the store's tree), ``/ui/handles?root=`` (state handles,
blobs, orphans), ``/ui/topics?topic=`` (statekeep's Pulsar topics and their messages). Every URL can be bookmarked.
"""

from __future__ import annotations

from fastapi import APIRouter

from statekeep.server.ui import api, events, pages, topics

#: the console's routes: ``app.include_router(ui.router)``
router = APIRouter(include_in_schema=False)
for _part in (pages, topics, api, events):
    router.include_router(_part.router)
