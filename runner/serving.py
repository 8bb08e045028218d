"""Where the run's HTTP servers (the simulator, the gateway) listen: a port of their own, or the listening
socket the run bound for them and handed down (resources.ServerProcess), whose address the run's workers
were given before the server had finished importing."""

from __future__ import annotations

import socket
import ssl

from aiohttp import web

from runner.resources import BACKLOG


def site_for(
    runner: web.AppRunner, host: str, port: int, listen_fd: int | None, tls: ssl.SSLContext | None = None
) -> web.BaseSite:
    if listen_fd is None:
        return web.TCPSite(runner, host, port, backlog=BACKLOG, ssl_context=tls)
    return web.SockSite(runner, socket.socket(fileno=listen_fd), backlog=BACKLOG, ssl_context=tls)
