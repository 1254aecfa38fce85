"""``memoryctl ui``: the review page — memory, rules, provenance and history in a local browser page.

Its own process (the daemon opens no TCP port), talking to the daemon over the Unix socket like any client; a small
ASGI app (Starlette, Jinja2 templates, uvicorn) on 127.0.0.1, imported only by this verb (``pip install
'memoryd[ui]'``). Modules: ``server`` (start, port, URL, browser), ``guard`` (Host, Origin, session, CSRF, CSP),
``daemon`` (the calls and which workspaces may be shown), ``render`` (safe Markdown, diffs, SVG charts), ``app``
(routes and templates) and ``pages/`` (one module per page). docs/reference/ui.md says what each page shows.
"""
