"""A TCP forwarder on loopback in front of a server, for faults between a client and a server that stays up:
the connection cut (``drop``), or connections the "server" accepts and never answers (``black_hole``), as a
server that is starting up may do (ZooKeeper 3.8, ZOOKEEPER-5051)."""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    """Forwards each connection to ``127.0.0.1:target_port`` from its own ``port``. Use as a context manager."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._holes = 0
        self._forwarded: list[socket.socket] = []
        self.held: list[socket.socket] = []  # the connections black-holed so far, in order
        self._closed = False
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def black_hole(self, connections: int) -> None:
        """The next ``connections`` connections are accepted and then neither forwarded nor answered; they stay
        open until their client closes them (or the proxy closes)."""
        with self._lock:
            self._holes += connections

    def drop(self) -> None:
        """Cut every forwarded connection (both ends), as a network fault would; the server stays up."""
        with self._lock:
            cut, self._forwarded = self._forwarded, []
        for sock in cut:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.drop()
        for sock in self.held:
            _close(sock)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._holes > 0:
                    self._holes -= 1
                    self.held.append(client)
                    continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._forwarded += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), name="tcp-proxy-pump", daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
