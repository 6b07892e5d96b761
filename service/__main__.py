"""``python -m service``: run the API with graceful draining on SIGTERM / SIGINT."""

from __future__ import annotations

import asyncio
import logging
import resource
import sys
import time

import uvicorn
from pydantic import ValidationError
from pydantic_settings import SettingsError

from service.api.http_protocol import HttpLimits, guarded_protocol
from service.app import create_app
from service.models.registry import RunnerWrapper
from service.observability import logs
from service.settings import ConnectionSettings, Settings

log = logging.getLogger("service")


class DrainingServer(uvicorn.Server):
    """First signal: readiness turns 503 and new requests get 503 at once; accepted requests finish
    (up to MT_DRAIN_SECONDS); then the server stops. A second signal stops at once."""

    def __init__(self, config: uvicorn.Config, state) -> None:
        super().__init__(config)
        self.mt_state = state
        self.fatal = False

    def handle_exit(self, sig: int, frame) -> None:
        if self.mt_state.draining:
            return super().handle_exit(sig, frame)
        self.mt_state.draining = True
        log.info("signal %s: draining (up to %.0f s)", sig, self.mt_state.settings.server.drain_seconds)
        asyncio.get_event_loop().call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain()))

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.mt_state.settings.server.drain_seconds
        while self.mt_state.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.mt_state.in_flight:
            log.warning("drain time over with %d requests still in flight", self.mt_state.in_flight)
        self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.mt_state.registry.failed:  # a failed model load exits non-zero rather than serving 503 forever
            self.fatal = True
            return True
        return await super().on_tick(counter)


FD_RESERVE = 256  # descriptors kept for everything but client connections (model files, logs, threads)
BACKLOG = 2048  # uvicorn's default listen backlog


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (many systems start processes at 1024); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # an unlimited hard limit some kernels refuse as a soft one
            log.warning("could not raise the file-descriptor limit from %d to %s: %s", soft, hard, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def accept_budget(max_connections: int, fd_limit: int) -> tuple[int, int]:
    """(connection cap, listen backlog) within the descriptor limit. asyncio accepts up to a backlog's worth of
    sockets per loop tick, and the cap's check (and the close of a shed connection) comes a tick or two later, so
    the cap leaves room for several backlogs: past the limit accept() fails, and asyncio logs every failure and
    stops accepting for a second, /healthz included (measured: 1500 slow connections against 1000 descriptors
    with cap + backlog just under the limit still hit it 737 times)."""
    if fd_limit == resource.RLIM_INFINITY:
        return max_connections, BACKLOG
    available = max(2, fd_limit - FD_RESERVE)
    backlog = max(1, min(BACKLOG, available // 16))
    cap = max(1, min(max_connections, available - 4 * backlog))
    if cap < max_connections:
        log.warning(
            "MT_MAX_CONNECTIONS %d lowered to %d, listen backlog %d: the file-descriptor limit is %d",
            max_connections,
            cap,
            backlog,
            fd_limit,
        )
    elif backlog < BACKLOG:  # nothing to act on: the connection cap holds as set
        log.debug(
            "listen backlog %d (uvicorn's default %d) so that MT_MAX_CONNECTIONS %d fits the file-descriptor limit %d",
            backlog,
            BACKLOG,
            cap,
            fd_limit,
        )
    return cap, backlog


def http_limits(connections: ConnectionSettings, max_connections: int) -> HttpLimits:
    return HttpLimits(
        header_timeout_s=connections.header_timeout_s,
        body_timeout_s=connections.body_timeout_s,
        max_connections=max_connections,
        max_header_bytes=connections.max_header_bytes,
        max_headers=connections.max_headers,
        max_url_bytes=connections.max_url_bytes,
    )


def load_settings() -> Settings | None:
    """Settings from the environment, or None after logging what is wrong as JSON lines (the setting's name, never
    its value, which may be a key): a refused start leaves a log a collector can parse, not a traceback."""
    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        logs.configure("info")
        if isinstance(exc, SettingsError):  # a value that does not parse as JSON (a dict setting)
            log.error("invalid settings: %s (the service refuses to start)", exc)
        else:
            for error in exc.errors(include_input=False):
                where = "MT_" + "_".join(str(part) for part in error["loc"]).upper()
                log.error("invalid setting %s: %s (the service refuses to start)", where, error["msg"])
        return None


def main(wrap_runner: RunnerWrapper | None = None) -> int:
    """``wrap_runner`` puts a wrapper between each scheduler and its engine (tests inject faults with it)."""
    settings = load_settings()
    if settings is None:
        return 2
    logs.configure(settings.server.log_level)
    app = create_app(settings, wrap_runner)
    max_connections, backlog = accept_budget(settings.connections.max_connections, raise_fd_limit())
    closed = app.state.mt.metrics.connections_closed
    limits = http_limits(settings.connections, max_connections)
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits, lambda reason: closed.labels(reason).inc()),
        backlog=backlog,
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        log_level=settings.server.log_level,
        timeout_graceful_shutdown=max(settings.server.drain_seconds, 1),
        timeout_keep_alive=settings.connections.keep_alive_s,
        access_log=False,
    )
    server = DrainingServer(config, app.state.mt)
    server.run()
    if server.fatal or app.state.mt.registry.failed:
        log.error("exiting: %s", app.state.mt.registry.failed)
        return 1
    if not server.started:
        return 3  # start-up failed (e.g. a bundle did not verify); the log names the file
    return 0


if __name__ == "__main__":
    sys.exit(main())
