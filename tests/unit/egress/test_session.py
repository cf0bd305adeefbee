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
