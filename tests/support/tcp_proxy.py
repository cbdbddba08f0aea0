"""A loopback TCP proxy for fault tests: it forwards both ways until told to
swallow what the server sends (the client then never hears answers the
server did send) or what the client sends (the server never hears it), to
refuse new connections (accepted and closed at once), and drops every
connection on demand. It listens on a loopback address of its own choosing
(`host`, `port`: 127.0.0.1 and a free port unless given), so a broker can
advertise the proxy's address while it binds 127.0.0.1 itself."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(
        self,
        target_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        target_host: str = "127.0.0.1",
    ) -> None:
        self.target_port = target_port
        self.target_host = target_host
        self._listener = socket.create_server((host, port))
        self.port: int = self._listener.getsockname()[1]
        self.swallow_replies = threading.Event()
        self.swallow_requests = threading.Event()
        self.refuse_new = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refuse_new.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection((self.target_host, self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets.update((client, server))
            # Both pumps of a connection; the last one to end closes it.
            running = [2]
            self._spawn(self._pump, client, server, False, running)
            self._spawn(self._pump, server, client, True, running)

    def _pump(
        self, source: socket.socket, sink: socket.socket, from_server: bool, running: list[int]
    ) -> None:
        swallow = self.swallow_replies if from_server else self.swallow_requests
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if swallow.is_set():
                    continue
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                running[0] -= 1
                last = running[0] == 0
                if last:
                    self._sockets.difference_update((source, sink))
            if last:
                source.close()
                sink.close()

    def drop_connections(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.drop_connections()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)
