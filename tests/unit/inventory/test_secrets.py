from __future__ import annotations

import pytest

from contain.inventory.secrets import (
    NOT_SECRET_NAMES,
    SECRET_SHAPES,
    is_secret_name,
    secret_shape_of,
)

# One example per SECRET_SHAPES row (fake values with the documented shapes).
SHAPE_EXAMPLES = {
    "private-key": "-----BEGIN EC PRIVATE KEY-----\nMHc...",
    "aws-access-key": "AKIAZ7Q2X4M5N6P8R9T0",
    "github-token": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
    "gitlab-token": "glpat-aB3dE5fG7hJ9kL1mN3pQ",
    "slack-token": "xoxp-1234567890-abcdef",
    "anthropic-key": "sk-ant-api03-aB3dE5fG7hJ9kL1mN3pQ5r",
    "openai-key": "sk-aB3dE5fG7hJ9kL1mN3pQ5rS7t",
    "stripe-key": "sk_live_aB3dE5fG7hJ9kL1mN3",
    "google-api-key": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "npm-token": "npm_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    "pypi-token": "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAx",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
    "url-password": "https://user:hunter2@example.test/path",
    "high-entropy": "q8Zr2Lk9Vx3Mp7Ty1Nw5Bc4Hd6Gf0JsA",
}
# One name per NOT_SECRET_NAMES row that contains a marker word.
NOT_SECRET_EXAMPLES = {
    r"PWD|OLDPWD": "OLDPWD",
    r"SSH_AUTH_SOCK": "SSH_AUTH_SOCK",
    r"SSH_AGENT_PID": "SSH_AGENT_PID",
    r"XDG_SESSION_[A-Z_]+": "XDG_SESSION_TYPE",
    r"DESKTOP_SESSION|SESSION_MANAGER|TERM_SESSION_ID": "SESSION_MANAGER",
    r"DBUS_SESSION_BUS_ADDRESS": "DBUS_SESSION_BUS_ADDRESS",
    r"GPG_AGENT_INFO": "GPG_AGENT_INFO",
    r"[A-Z_]*_KEYMAP|KEYMAP": "XKB_KEYMAP",
    r"GIT_ASKPASS|SSH_ASKPASS|SUDO_ASKPASS": "GIT_ASKPASS",
}


def test_every_shape_row_has_an_example_that_it_names() -> None:
    assert set(SHAPE_EXAMPLES) == {s.id for s in SECRET_SHAPES}
    for shape in SECRET_SHAPES:
        found = secret_shape_of(SHAPE_EXAMPLES[shape.id])
        assert found is not None and found.id == shape.id, shape.id


def test_every_not_secret_row_has_an_example_it_excuses() -> None:
    assert set(NOT_SECRET_EXAMPLES) == {row.pattern for row in NOT_SECRET_NAMES}
    for name in NOT_SECRET_EXAMPLES.values():
        assert not is_secret_name(name), name


@pytest.mark.parametrize(
    "name",
    [
        "API_KEY",
        "GITHUB_TOKEN",
        "DB_PASSWORD",
        "PGPASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "SESSION_COOKIE",
        "MYAPPTOKEN",
        "BASIC_AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["PATH", "KEYBOARD", "HOME", "PWD", "MONKEY", "AUTHOR", "TOKENIZERS_PARALLELISM", "PASSTHROUGH", "LANG"]
)
def test_names_that_only_look_like_secrets(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "value",
    [
        "0123456789abcdef0123456789abcdef01234567",  # a commit id: hex tops out at 4 bits/char
        "/usr/local/lib/python3.11/site-packages/something/else/entirely",
        "en_US.UTF-8",
        "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01",
        "https://example.test/no/password",
    ],
)
def test_values_that_are_not_secrets(value: str) -> None:
    assert secret_shape_of(value) is None
