"""A requester in a process of its own, holding its own keys, speaking A2A to the service:

    python -m tests.integration.a2a_requester --server URL --key ME.json --eth-key ME.eth.json
        --spec TASK.json

It prepares its `task.posted` (`POST /tasks/prepare`), signs it, posts it with the a2a-sdk
client (`SendMessage`, the entry in `metadata.accord.entry`, every request signed by its own
did:key), makes the deposit the answer names from its own Ethereum account, then follows the
task with `SubscribeToTask` until it is `TASK_STATE_COMPLETED` (settled), and takes back
what the escrow credits it (the unpaid rest of the budget). One JSON line per step on stdout:
`posted`, `deposited`, `state` (each new accord state), `settled` (the artifact and the
settlement), `withdrew`; exit 0 once settled, 1 on a failure (stderr says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from accord.client import AccordClient
from accord.kit.requester import Requester
from accord.kit.wallet import Wallet
from accord.ledger.signing import read_keyfile
from tests.api.test_a2a_server import a2a_client

RESUBSCRIBE_LIMIT = 200


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def accord_of(task: Any) -> dict[str, Any]:
    data: dict[str, Any] = MessageToDict(task.metadata).get("accord", {})
    return data


async def post(server: str, signer: Any, message: Message) -> Any:
    async with a2a_client(server, signer) as client:
        events = [e async for e in client.send_message(SendMessageRequest(message=message))]
    [event] = events
    return event.task


async def follow(server: str, signer: Any, task_id: str) -> Any:
    """The task once settled: its stream is followed (a status update at each change of
    state, an artifact update when the deliverable changes), and taken up again if it breaks
    off first; a task that settled meanwhile is read with GetTask."""
    seen = None
    for _ in range(RESUBSCRIBE_LIMIT):
        try:
            async with a2a_client(server, signer, streaming=True) as client:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    if event.HasField("task"):
                        status, metadata = event.task.status, event.task.metadata
                    elif event.HasField("status_update"):
                        status = event.status_update.status
                        metadata = event.status_update.metadata
                    else:  # an artifact update: the deliverable, read once settled
                        continue
                    state = MessageToDict(metadata).get("accord", {}).get("state")
                    if state != seen:
                        seen = state
                        say("state", state=state, a2a=TaskState.Name(status.state))
                    if status.state == TaskState.TASK_STATE_COMPLETED:
                        return await client.get_task(GetTaskRequest(id=task_id))
        except Exception as exc:  # the stream broke off, or the task is terminal already
            async with a2a_client(server, signer) as client:
                task = await client.get_task(GetTaskRequest(id=task_id))
            if task.status.state == TaskState.TASK_STATE_COMPLETED:
                return task
            say("resubscribe", reason=f"{type(exc).__name__}: {exc}"[:200])
        await asyncio.sleep(0.5)
    raise SystemExit("the task did not settle")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--server", required=True)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--eth-key", required=True, type=Path)
    parser.add_argument("--spec", required=True, type=Path)
    args = parser.parse_args(argv)
    signer = read_keyfile(args.key)
    spec = json.loads(args.spec.read_text())
    message_id = str(uuid.uuid4())
    with AccordClient(args.server, signer=signer) as client:
        requester = Requester(client, Wallet.from_key_file(args.eth_key, client.get("/chain")))
        prepared = requester.prepare(spec, idempotency_key=message_id)
        entry = requester.sign_prepared(prepared)
    message = Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        parts=[Part(text="post the task my entry signs")],
        metadata=ParseDict({"accord": {"entry": entry}}, struct_pb2.Struct()),
    )
    task = asyncio.run(post(args.server, signer, message))
    call = accord_of(task)["escrow"]
    say("posted", task_id=task.id, requester=signer.did)
    sent = requester.wallet.deposit(task.id, {**call, "deadline": int(call["deadline"])})
    say("deposited", task_id=task.id, tx_hash=sent.tx_hash, value=str(call["value"]))
    settled = asyncio.run(follow(args.server, signer, task.id))
    artifact = [MessageToDict(a) for a in settled.artifacts]
    say("settled", task_id=task.id, accord=accord_of(settled), artifacts=artifact)
    credit = requester.wallet.credit()
    if credit > 0:
        withdrawn = requester.wallet.withdraw()
        say("withdrew", amount=str(credit), tx_hash=withdrawn.tx_hash)
    return 0


if __name__ == "__main__":
    sys.exit(main())
