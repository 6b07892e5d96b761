"""The service's ASGI application as a module attribute, for ASGI servers other than ``python -m service`` that
want ``module:app`` (bench/asgi_servers.py runs it under uvicorn with httptools, hypercorn and granian). Settings
come from the environment as for ``python -m service``; the slow-client protections of service/api/http_protocol.py
are not in it (they are part of ``python -m service``'s uvicorn set-up)."""

from service.app import create_app

app = create_app()
