"""The broker's main job, end to end (part of `make demo`).

1. Create the external record (a SQLite database of invoices) and the broker's secret file.
2. Start `contain broker serve` in its own process.
3. Run a model-written script in a sandbox whose manifest names `records`: it updates alice's
   invoice (allowed), tries bob's (refused), makes a large change (queued for review), and retries
   after a lost response (replayed: no second write).
4. A reviewer approves the large change: a grant bound to its argument digest; the sandbox retries.
5. Stop the broker; `contain ledger verify` and `contain ledger show`.

Run: .venv/bin/python examples/broker/demo.py   (needs bubblewrap and user namespaces)
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import invoice_actions  # noqa: E402

from contain.boundary import load_boundary  # noqa: E402
from contain.broker import attachments_for  # noqa: E402
from contain.broker.tokens import TokenKey  # noqa: E402
from contain.gate.grants import GrantKey, GrantScope, mint_grant  # noqa: E402
from contain.runtime import Sandbox  # noqa: E402

CONTAIN = [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())"]


def invoices(db: str) -> str:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT id, owner, amount_cents FROM invoices ORDER BY id").fetchall()
    finally:
        conn.close()
    return ", ".join(f"{i} ({o}) {a / 100:.2f}" for i, o, a in rows)


def run_agent(boundary: object, attachments: list, env: dict[str, str]) -> list[dict]:
    script = (HERE / "agent_script.py").read_text()
    with Sandbox(boundary, attachments=attachments, extra_env=env) as sb:  # type: ignore[arg-type]
        result = sb.run(["python3", "-c", script], timeout=60)
    if result.exit_code != 0:
        raise SystemExit(f"agent script failed: {result.stderr.data.decode()}")
    steps = [json.loads(line) for line in result.stdout.data.decode().splitlines()]
    for s in steps:
        body = s["body"]
        what = body.get("result") or body.get("error") or body.get("reason")
        print(f"  sandbox> {s['step']:40} -> {s['http_status']} {body['status']}"
              f"{' (replayed)' if body.get('replayed') else ''}: {json.dumps(what, sort_keys=True)}")
    return steps


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="contain-broker-demo-"))
    work.chmod(0o755)  # the sandbox user must reach the socket; state/ stays private
    state = work / "state"
    state.mkdir(mode=0o700)
    db = str(state / "invoices.db")
    invoice_actions.create_database(db, api_key="demo-invoices-api-key")
    secrets = state / "broker.secrets.json"
    fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps({"invoices_api_key": "demo-invoices-api-key"}).encode())
    os.close(fd)
    config = {
        "storage": {"sqlite": str(state / "broker.db")},
        "socket_path": str(work / "broker.sock"),
        "token_key_file": str(state / "token.key"),
        "grant_key_file": str(state / "grant.key"),
        "checkpoint_key_file": str(state / "checkpoint.key"),
        "ledger_checkpoints": str(state / "ledger.checkpoints"),
        "secrets_file": str(secrets),
        "import_paths": [str(HERE)],
        "actions": [{"ref": "invoice_actions:update_invoice", "options": {"database": db}}],
    }
    config_path = state / "broker.yaml"
    config_path.write_text(json.dumps(config, indent=2))
    print(f"== work dir {work} (broker state in {state}, mode 0700)")
    print(f"== invoices before: {invoices(db)}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]))
    broker = subprocess.Popen([*CONTAIN, "broker", "serve", "--config", str(config_path)], stderr=subprocess.PIPE,
                              env=env, text=True)
    assert broker.stderr is not None
    print(f"== {broker.stderr.readline().strip()}")
    try:
        boundary = load_boundary(HERE / "contain.yaml")
        token_key = TokenKey.load_or_create(config["token_key_file"])
        attachments = attachments_for(boundary, socket_path=config["socket_path"], token_key=token_key, ttl_s=600)
        print("== sandbox run 1 (task invoices-demo, principal alice):")
        steps = run_agent(boundary, attachments, {})
        pending = next(s["body"] for s in steps if s["http_status"] == 202)
        grant = mint_grant(GrantKey.load_or_create(config["grant_key_file"]), principal="alice", tool=pending["tool"],
                           tool_digest=pending["tool_digest"], argument_digest=pending["argument_digest"],
                           scope=GrantScope.once(now=__import__("time").time()), reviewer="carol",
                           reason="customer signed the upgrade")
        print(f"== reviewer carol approves {pending['argument_digest'][:20]}... once")
        print("== sandbox run 2 (with the grant):")
        run_agent(boundary, attachments, {"GRANT": grant})
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
    print(f"== invoices after:  {invoices(db)}")
    print("== contain ledger verify")
    verify = subprocess.run([*CONTAIN, "ledger", "verify", "--config", str(config_path)], env=env)
    print("== contain ledger show --all")
    show = subprocess.run([*CONTAIN, "ledger", "show", "--all", "--config", str(config_path)], env=env)
    return verify.returncode or show.returncode


if __name__ == "__main__":
    sys.exit(main())
