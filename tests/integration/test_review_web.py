"""The review page in real headless Chromium: log in with the token, approve one request with a
scope, deny another with a reason, and check the store. The server is `contain review serve`,
started as a subprocess exactly as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contain.boundary import ToolVerdict
from contain.gate import GrantKey, RequestStatus, ReviewStore, decode_grant, verify_grant
from contain.gate.model import Decision, ToolCall

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
REVIEW = Decision(ToolVerdict.REVIEW, "tools[1]", "tools[1] (review fs__write_file) requires a human review")


@pytest.fixture
def served(tmp_path):
    db, key = tmp_path / "review.db", tmp_path / "grant.key"
    store = ReviewStore(db)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())",
         "review", "serve", "--port", "0", "--db", str(db), "--key", str(key), "--reviewer", "web:tester"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CONTAIN_STATE_DIR": str(tmp_path / "state")},
    )
    try:
        url_line = proc.stdout.readline()
        token_line = proc.stdout.readline()
        url = re.fullmatch(r"review page: (http://127\.0\.0\.1:\d+/)\n", url_line)
        token = re.fullmatch(r"token: (\S+)\n", token_line)
        assert url and token, (url_line, token_line, proc.stderr.read() if proc.poll() is not None else "")
        yield store, key, url.group(1), token.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _submit(store: ReviewStore, path: str):
    call = ToolCall("alice", "fs", "fs__write_file", "sha256:tooldigest", {"path": path, "content": "<b>hello</b>"})
    return store.submit(call, REVIEW)


def test_review_page_in_chromium_approves_one_and_denies_another(served):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    store, key_path, url, token = served
    first = _submit(store, "/work/out/report.txt")
    second = _submit(store, "/etc/cron.d/evil")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(url)
            assert page.url.endswith("/login")
            # A wrong token shows nothing.
            page.fill("input[name=token]", "not-the-token")
            page.click("button[type=submit]")
            assert "Wrong token" in page.content()
            assert first.request_id not in page.content()

            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_selector(f"#req-{first.request_id}")
            card = page.locator(f"#req-{first.request_id}")
            text = card.inner_text()
            assert '"path": "/work/out/report.txt"' in text
            assert '"content": "<b>hello</b>"' in text  # escaped, shown literally, not rendered
            assert first.argument_digest in text and "sha256:tooldigest" in text
            assert "allows principal alice to call fs__write_file" in text

            # Approve the first for up to 2 uses.
            card.locator("input[name=scope][value=uses]").check()
            card.locator("input[name=uses]").fill("2")
            card.locator("form.approve input[name=reason]").fill("report output is fine")
            card.locator("form.approve button[type=submit]").click()
            page.wait_for_selector("#message")
            assert f"{first.request_id} approved: up to 2 times" in page.locator("#message").inner_text()

            # Deny the second with a reason.
            other = page.locator(f"#req-{second.request_id}")
            other.locator("form.deny input[name=reason]").fill("writes to cron")
            other.locator("form.deny button[type=submit]").click()
            page.wait_for_selector("#message")
            assert f"{second.request_id} denied" in page.locator("#message").inner_text()
            assert "0 pending request(s)" in page.content()
        finally:
            browser.close()

    approved = store.get(first.request_id)
    assert approved.status is RequestStatus.APPROVED
    assert (approved.reviewer, approved.review_reason) == ("web:tester", "report output is fine")
    grant = decode_grant(approved.grant_token)
    assert (grant.scope.kind, grant.scope.uses) == ("uses", 2)
    denied = store.get(second.request_id)
    assert (denied.status, denied.review_reason, denied.grant_token) == (RequestStatus.DENIED, "writes to cron", None)

    # The grant the page minted verifies for exactly the approved call, twice, with the served key.
    key = GrantKey.load_or_create(key_path)
    check = dict(principal="alice", tool="fs__write_file", tool_digest="sha256:tooldigest",
                 argument_digest=first.argument_digest, uses=store.uses)
    assert verify_grant(key, approved.grant_token, **check).ok
    assert verify_grant(key, approved.grant_token, **check).ok
    assert "already used 2/2" in verify_grant(key, approved.grant_token, **check).reason
    assert "argument digest differs" in verify_grant(
        key, approved.grant_token, **{**check, "argument_digest": second.argument_digest}).reason
