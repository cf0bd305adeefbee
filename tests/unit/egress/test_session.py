import pytest

import contain.egress
from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.egress.policy import EgressPolicy
from contain.egress.session import RESOLV_CONF_TEXT, plan_loopback_captures, plan_sandbox_env
from contain.errors import SandboxStartError


def test_sandbox_env_points_every_proxy_variable_at_the_in_sandbox_listener() -> None:
    env = plan_sandbox_env("http://127.0.0.1:3128")
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "PIP_PROXY",
    ):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_resolv_conf_names_only_the_stub() -> None:
    lines = RESOLV_CONF_TEXT.splitlines()
    assert [line for line in lines if line.startswith("nameserver")] == ["nameserver 127.0.0.1"]
    assert RESOLV_CONF_TEXT.endswith("\n")


def test_package_exports_exactly_its_public_names() -> None:
    public = {name for name in vars(contain.egress) if not name.startswith("_")}
    modules = {
        "addresses",
        "log",
        "policy",
        "resolve",
        "session",
        "capture",
        "dnsstub",
        "netns",
        "proxy",
        "tunnel",
        "standalone",
    }
    assert set(contain.egress.__all__) == public - modules


def _policy(*allow: dict) -> EgressPolicy:
    return EgressPolicy.from_boundary(plain_boundary(Boundary.model_validate({"network": {"allow": list(allow)}})))


def test_named_loopback_addresses_get_a_capture_listener_per_port() -> None:
    policy = _policy(
        {"host": "127.0.0.1", "ports": [8080, 5432]},
        {"host": "::1", "ports": [9000]},
        {"host": "pypi.org"},
        {"host": "127.0.0.0/8", "ports": [7000]},  # a range: through the proxy only
        {"host": "10.1.2.3", "ports": [80]},  # not loopback: reachable directly through the proxy
    )
    assert plan_loopback_captures(policy) == (("127.0.0.1", 5432), ("127.0.0.1", 8080), ("::1", 9000))


@pytest.mark.parametrize("port", [3128, 53])
def test_a_named_loopback_destination_on_an_egress_listener_is_refused(port: int) -> None:
    with pytest.raises(SandboxStartError, match="sandbox's own egress listener"):
        plan_loopback_captures(_policy({"host": "127.0.0.1", "ports": [port]}))


def test_a_named_loopback_destination_among_the_placeholders_is_refused() -> None:
    with pytest.raises(SandboxStartError, match="sandbox's own egress listener"):
        plan_loopback_captures(_policy({"host": "127.77.0.9", "ports": [80]}))


def test_connections_over_the_limit_are_aborted_and_recorded_while_others_are_served() -> None:
    import asyncio

    from contain.egress.log import EventLog
    from contain.egress.session import ConnectionLimit

    class FakeTransport:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    class FakeWriter:
        def __init__(self) -> None:
            self.transport = FakeTransport()

    async def scenario() -> tuple[list[bool], list[str], int]:
        log = EventLog()
        limit = ConnectionLimit(log.record, limit=2)
        release, both_started = asyncio.Event(), asyncio.Event()
        served: list[bool] = []

        async def handler(reader: object, writer: object) -> None:
            served.append(True)
            if len(served) == 2:
                both_started.set()
            await release.wait()

        wrapped = limit.wrap(handler, via="connect")  # type: ignore[arg-type]
        writers = [FakeWriter() for _ in range(3)]
        held = [asyncio.ensure_future(wrapped(None, w)) for w in writers[:2]]  # type: ignore[arg-type]
        await both_started.wait()  # both handlers hold their slot
        await wrapped(None, writers[2])  # type: ignore[arg-type]
        release.set()
        await asyncio.gather(*held)
        events = log.drain().events
        return [w.transport.aborted for w in writers], [e.rule_id or "" for e in events], limit.open

    aborted, rules, still_open = asyncio.run(scenario())
    assert aborted == [False, False, True]
    assert rules == ["egress.connection_limit"]
    assert still_open == 0  # slots come back when handlers finish
