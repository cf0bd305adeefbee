"""Unix sockets inside bound host trees are hidden unless the manifest names them (issue 16, item 3)."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from contain.boundary import Boundary
from contain.runtime import Sandbox

pytestmark = [pytest.mark.needs_bwrap]

DIAL = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.settimeout(2)\n"
    "try:\n"
    "    s.connect(sys.argv[1]); print('connected')\n"
    "except OSError as e:\n"
    "    print('refused', e.errno)\n"
)


class Listener:
    """A host Unix socket (mode 0777, so only the hiding can stop a connection) counting accepts."""

    def __init__(self, path: str) -> None:
        self.accepted = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o777)
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def tree(tmp_path):
    os.chmod(tmp_path, 0o755)
    (tmp_path / "sub").mkdir()
    listeners = {name: Listener(str(tmp_path / name)) for name in ("sub/agent.sock", "named.sock")}
    yield tmp_path, listeners
    for listener in listeners.values():
        listener.close()


@pytest.mark.parametrize("access", ["read", "write"])
def test_a_socket_in_a_bind_is_unconnectable_and_reported(tree, access):
    root, listeners = tree
    manifest = Boundary.model_validate({"files": [{"host": str(root), "path": "/inputs/t", "access": access}]})
    with Sandbox(manifest) as sb:
        result = sb.run(["python3", "-c", DIAL, "/inputs/t/sub/agent.sock"])
        layers = sb.layers
    assert result.stdout.data.startswith(b"refused"), result.stdout.data
    assert listeners["sub/agent.sock"].accepted == 0
    assert "/inputs/t/sub/agent.sock" in layers["unix sockets"]
    assert "/inputs/t/named.sock" in layers["unix sockets"]


def test_a_socket_the_manifest_names_stays_connectable(tree):
    root, listeners = tree
    manifest = Boundary.model_validate(
        {"files": [{"host": str(root), "path": "/inputs/t", "access": "read", "allow_sockets": ["named.sock"]}]}
    )
    with Sandbox(manifest) as sb:
        named = sb.run(["python3", "-c", DIAL, "/inputs/t/named.sock"])
        other = sb.run(["python3", "-c", DIAL, "/inputs/t/sub/agent.sock"])
    assert named.stdout.data == b"connected\n"
    assert listeners["named.sock"].accepted == 1
    assert other.stdout.data.startswith(b"refused")
    assert listeners["sub/agent.sock"].accepted == 0
