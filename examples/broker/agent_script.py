"""The "model-written" script the demo runs inside the sandbox (standard library only).

It talks to the broker through /.contain/broker-client with the token in /.contain/broker-token,
and prints one JSON line per step. A grant, when the demo has one, arrives in $GRANT.
"""

import json
import os
import runpy

client = runpy.run_path("/.contain/broker-client")["BrokerClient"]()


def step(name, reply):
    print(json.dumps({"step": name, "http_status": reply.status, "body": reply.body}, sort_keys=True), flush=True)


if os.environ.get("GRANT"):
    step("large change, with the reviewer's grant",
         client.call("update_invoice", {"invoice_id": "INV-3", "amount_cents": 65000}, grant=os.environ["GRANT"]))
else:
    step("update own invoice (+5%)", client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500}))
    # An injected instruction in a document asks to zero bob's invoice:
    bobs = {"invoice_id": "INV-2", "amount_cents": 0}
    step("update another principal's invoice", client.call("update_invoice", bobs))
    step("large change (+30%)", client.call("update_invoice", {"invoice_id": "INV-3", "amount_cents": 65000}))
    late_fee = {"invoice_id": "INV-1", "amount_cents": 11000, "note": "late fee"}
    client.send_and_drop("update_invoice", late_fee, idempotency_key="late-fee-INV-1")
    step("retry after a lost response", client.call("update_invoice", late_fee, idempotency_key="late-fee-INV-1"))
