"""The listening socket of ``kevlike serve``, bound before anything heavy is imported: a busy port fails at
once (the command binds first, then imports the server, torch and the models)."""

from __future__ import annotations

import socket


class ListenError(OSError):
    """:func:`serve` cannot listen on its host and port (address in use, no permission, unknown
    host); raised before any model is loaded. ``str()`` is one line,
    ``cannot listen on HOST:PORT: REASON`` (``kevlike serve`` exits with code 3)."""


def listen_socket(host: str, port: int, backlog: int = 2048):
    """A TCP socket bound to ``(host, port)`` and listening, made as uvicorn makes its own
    (``SO_REUSEADDR``; IPv6 when ``host`` contains ``:``), to hand to :meth:`uvicorn.Server.run`.
    Connections that arrive before the server runs wait in the backlog (2048, uvicorn's default).

    Raises:
        ListenError: the address cannot be resolved, bound or listened on.
    """

    ipv6 = ":" in host
    sock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except (OSError, OverflowError) as e:  # OverflowError: a port outside 0-65535
        sock.close()
        reason = getattr(e, "strerror", None) or str(e)
        raise ListenError(f"cannot listen on {f'[{host}]' if ipv6 else host}:{port}: {reason}") from None
    return sock
