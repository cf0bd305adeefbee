"""A fake host for inventory tests: home, working tree, file system root and procfs, all in a
short temporary directory (Unix socket paths are limited to 108 bytes), with planted secrets."""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import socket
import string
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# /proc/net/route of a host with a default route via 192.0.2.1 and a /24 on eth0.
ROUTE_WITH_DEFAULT = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
)
IPV6_ROUTE = (
    "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n"
    "00000000000000000000000000000001 80 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo\n"
)
TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    "   0: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
    "   1: 0100007F:D431 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0\n"
)
TCP6 = (
    "  sl  local_address                         remote_address                        st\n"
    "   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A\n"
)
STATUS = "Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000200000\n"
MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "23 22 0:5 / /proc rw,nosuid - proc proc rw\n"
    "24 22 0:40 / /mnt/share rw,relatime - nfs4 fileserver:/export rw\n"
    "25 22 0:41 / /media/usb\\040stick ro,relatime - vfat /dev/sdb1 ro\n"
)


def rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


@dataclass
class FakeHost:
    base: Path
    home: Path
    cwd: Path
    root: Path
    proc: Path
    environ: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)  # every planted value that must never show
    sockets: list[socket.socket] = field(default_factory=list)

    def plant(self, value: str) -> str:
        self.secrets.append(value)
        return value

    def write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def unix_socket(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(1)
        self.sockets.append(sock)
        return path


def build_fake_host(base: Path) -> FakeHost:
    host = FakeHost(base=base, home=base / "h", cwd=base / "h" / "proj", root=base / "r", proc=base / "p")
    host.cwd.mkdir(parents=True)
    gh = host.plant("ghp_" + rand(36))
    akia = host.plant("AKIA" + rand(16, string.ascii_uppercase + string.digits))
    aws_secret = host.plant(rand(40))
    slack = host.plant("xoxb-" + rand(24))
    openai = host.plant("sk-proj-" + rand(40))
    db_password = host.plant("Pw" + rand(18))
    proxy_password = host.plant("Px" + rand(14))
    jwt_body = host.plant("eyJ" + rand(20) + ".eyJ" + rand(30) + "." + rand(30))
    pem = host.plant("-----BEGIN OPENSSH PRIVATE KEY-----\n" + rand(64) + "\n-----END OPENSSH PRIVATE KEY-----")
    host.environ.update(
        {
            "PATH": "/usr/bin:/bin",
            "HOME": str(host.home),
            "PWD": str(host.cwd),
            "KEYBOARD_LAYOUT": "us",
            "XDG_SESSION_ID": "3",
            "GIT_COMMIT": "0123456789abcdef0123456789abcdef01234567",
            "GITHUB_TOKEN": gh,
            "AWS_ACCESS_KEY_ID": akia,
            "AWS_SECRET_ACCESS_KEY": aws_secret,
            "AWS_REGION": "eu-west-1",
            "NOTIFY_HOOK_VALUE": slack,  # name says nothing; the value's shape does
            "MY_SETTING": openai,
            "DATABASE_URL": f"postgres://app:{db_password}@db.internal.test:5432/prod",
            "HTTPS_PROXY": f"http://proxyuser:{proxy_password}@proxy.corp.test:3128",
            "SESSION_BLOB": jwt_body,
            "DEPLOY_MATERIAL": pem,
            "NO_AUTH": "1",
        }
    )
    ssh_key = host.plant(rand(200))
    host.write(
        host.home / ".ssh" / "id_ed25519",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{ssh_key}\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    host.write(host.home / ".ssh" / "id_ed25519.pub", "ssh-ed25519 AAAA fake\n")
    host.write(
        host.home / ".ssh" / "deploy",
        "-----BEGIN RSA PRIVATE KEY-----\n" + host.plant(rand(120)) + "\n-----END RSA PRIVATE KEY-----\n",
    )
    host.write(
        host.home / ".aws" / "credentials",
        f"[default]\naws_access_key_id = {akia}\naws_secret_access_key = {aws_secret}\n[prod]\naws_access_key_id = x\n",
    )
    kube_token = host.plant(rand(48))
    host.write(
        host.home / ".kube" / "config",
        json.dumps(
            {
                "apiVersion": "v1",
                "clusters": [{"name": "prod", "cluster": {"server": "https://k8s.example.test:6443"}}],
                "contexts": [{"name": "prod-admin", "context": {"cluster": "prod", "user": "admin"}}],
                "users": [{"name": "admin", "user": {"token": kube_token}}],
            }
        ),
    )
    registry_auth = host.plant(base64.b64encode(f"bob:{rand(20)}".encode()).decode())
    host.write(
        host.home / ".docker" / "config.json", json.dumps({"auths": {"registry.example.test": {"auth": registry_auth}}})
    )
    netrc_password = host.plant(rand(22))
    host.write(host.home / ".netrc", f"machine api.example.test login bob password {netrc_password}\n")
    git_token = host.plant("ghp_" + rand(36))
    host.write(host.home / ".git-credentials", f"https://bob:{git_token}@github.com\n")
    gh_token = host.plant("gho_" + rand(36))
    host.write(host.home / ".config" / "gh" / "hosts.yml", f"github.com:\n  user: bob\n  oauth_token: {gh_token}\n")
    npm_token = host.plant("npm_" + rand(36))
    host.write(host.home / ".npmrc", f"//registry.npmjs.org/:_authToken={npm_token}\n")
    pg_password = host.plant(rand(16))
    host.write(host.home / ".pgpass", f"pg.example.test:5432:billing:alice:{pg_password}\n")
    env_key = host.plant("sk-ant-" + rand(40))
    host.write(host.cwd / ".env", f"ANTHROPIC_API_KEY={env_key}\nDEBUG=1\n")
    host.write(host.cwd / ".env.example", "ANTHROPIC_API_KEY=changeme\n")
    home_env_secret = host.plant(rand(30))
    host.write(host.home / ".env", f"export SERVICE_PASSWORD='{home_env_secret}'\n")
    host.write(host.cwd / "README.md", "project\n")
    # file system root: daemon sockets, resolv.conf, passwd, shared tmp
    host.write(host.root / "etc" / "resolv.conf", "search example.test\nnameserver 10.0.0.53\n")
    host.write(host.root / "etc" / "passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/h:/bin/sh\n")
    (host.root / "tmp").mkdir(parents=True)
    host.unix_socket(host.root / "run" / "docker.sock")
    host.unix_socket(host.root / "tmp" / ".X11-unix" / "X0")
    runtime = host.base / "u"
    host.unix_socket(runtime / "podman" / "podman.sock")
    host.unix_socket(runtime / "bus")
    host.environ["XDG_RUNTIME_DIR"] = str(runtime)
    host.environ["SSH_AUTH_SOCK"] = str(host.unix_socket(host.base / "agent.sock"))
    # procfs
    host.write(host.proc / "net" / "route", ROUTE_WITH_DEFAULT)
    host.write(host.proc / "net" / "ipv6_route", IPV6_ROUTE)
    host.write(host.proc / "net" / "tcp", TCP)
    host.write(host.proc / "net" / "tcp6", TCP6)
    host.write(
        host.proc / "net" / "unix",
        "Num       RefCount Protocol Flags    Type St Inode Path\n"
        "0000000000000000: 00000002 00000000 00010000 0001 01 1001 "
        "/run/systemd/journal/stdout\n"
        "0000000000000000: 00000002 00000000 00010000 0001 01 1002 @/tmp/.X11-unix/X0\n"
        "0000000000000000: 00000003 00000000 00000000 0001 03 1003 /run/client-side\n",
    )
    host.write(host.proc / "self" / "status", STATUS)
    host.write(host.proc / "self" / "mountinfo", MOUNTINFO)
    for pid in ("1", "42", "43"):
        (host.proc / pid).mkdir()
    return host


@pytest.fixture
def fake_host() -> Iterator[FakeHost]:
    base = Path(tempfile.mkdtemp(prefix="inv", dir="/tmp"))
    host = build_fake_host(base)
    try:
        yield host
    finally:
        for sock in host.sockets:
            sock.close()
        shutil.rmtree(base, ignore_errors=True)
