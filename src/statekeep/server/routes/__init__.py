"""The REST routes, one router per resource: :mod:`.functions` (create/update/get/delete/list and
status), :mod:`.state` (a function's state keys), :mod:`.followers` (read-only followers) and
:mod:`.ops` (``/metrics``, ``/health``). Each router is guarded by
:data:`statekeep.server.auth.authorize` except ``ops``; ``create_app`` includes them."""
