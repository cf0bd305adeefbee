"""Attachment.validate: only normalised paths under /.contain/, exactly one source, bounded data."""

from __future__ import annotations

import pytest

from contain.errors import SandboxStartError
from contain.runtime.attachments import MAX_ATTACHMENT_BYTES, Attachment


@pytest.mark.parametrize(
    "attachment",
    [
        Attachment("/.contain/broker-token", data=b"t0k3n"),
        Attachment("/.contain/broker.sock", host_path="/run/contain/broker.sock"),
        Attachment("/.contain/client.py", data=b"x" * MAX_ATTACHMENT_BYTES),
    ],
    ids=["data", "socket", "data-at-the-limit"],
)
def test_a_well_formed_attachment_is_accepted(attachment):
    attachment.validate()


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/.contain",
        "/.contain/../etc/shadow",
        "/.contain//token",
        "/.contain/./token",
        "/.contain/t\x00k",
    ],
)
def test_a_path_outside_or_not_normalised_under_dot_contain_is_refused(path):
    with pytest.raises(SandboxStartError, match=r"must be a normalised path under /\.contain/"):
        Attachment(path, data=b"x").validate()


def test_an_attachment_needs_exactly_one_source():
    with pytest.raises(SandboxStartError, match="exactly one of data or host_path"):
        Attachment("/.contain/token").validate()
    with pytest.raises(SandboxStartError, match="exactly one of data or host_path"):
        Attachment("/.contain/token", data=b"x", host_path="/run/x.sock").validate()


def test_data_larger_than_the_pipe_budget_is_refused():
    with pytest.raises(SandboxStartError, match=f"larger than {MAX_ATTACHMENT_BYTES} bytes"):
        Attachment("/.contain/token", data=b"x" * (MAX_ATTACHMENT_BYTES + 1)).validate()
