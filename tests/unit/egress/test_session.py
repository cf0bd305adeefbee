import contain.egress
from contain.egress.session import RESOLV_CONF_TEXT, plan_sandbox_env


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
    }
    assert set(contain.egress.__all__) == public - modules


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
