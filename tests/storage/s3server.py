"""An S3 server on loopback (moto's server mode) for tests that talk S3 through the minio SDK."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from minio import Minio
from moto.server import ThreadedMotoServer

ACCESS_KEY = "cube-test-access"
SECRET_KEY = "cube-test-secret-key"


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # "http://127.0.0.1:PORT"

    def client(self) -> Minio:
        return Minio(
            self.endpoint.removeprefix("http://"),
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            secure=False,
            region="us-east-1",
        )

    def new_bucket(self) -> str:
        """A fresh, empty bucket, so tests sharing the server never see each other's objects."""
        name = f"cube-{uuid.uuid4().hex[:16]}"
        self.client().make_bucket(name)
        return name


@contextmanager
def s3_server() -> Iterator[S3Server]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()


class FaultyEndpoint(threading.Thread):
    """A TCP endpoint on loopback that counts connections and answers each with `reply` (None: never
    answers, holding the connection open)."""

    def __init__(self, reply: bytes | None) -> None:
        super().__init__(daemon=True)
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.held: list[socket.socket] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.reply is None:
                self.held.append(conn)
                continue
            conn.recv(65536)
            conn.sendall(self.reply)
            conn.close()

    def __enter__(self) -> FaultyEndpoint:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()
