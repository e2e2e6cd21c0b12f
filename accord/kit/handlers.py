"""What does a kit agent's work: a handler, given the exam and team item format and answering
with the capability's answer (JSON), as `accord.identity.runtimes.AgentRuntime` does.

    reference               the built-in reference solver
    python:MODULE:FUNCTION  a Python callable `f(item) -> answer`
    command:PROGRAM ARG...  a program: the item as JSON on stdin, the answer on stdout
    http:URL                an HTTP agent service: POST {"item": ...}, read {"answer": ...}
    openai:MODEL[@BASE_URL] an OpenAI-compatible chat model (OPENAI_BASE_URL, OPENAI_API_KEY)
    a2a:CARD_URL            an A2A v1.0 agent, by its signed agent card

A handler that cannot answer raises `AgentRuntimeError` (retriable or not); the kit answers
the caller 422 and the leader may give the part to someone else.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from accord.identity.challenges import JSON, JSONObject, validate_output
from accord.identity.errors import RegistryError
from accord.identity.runtimes import (
    A2ARuntime,
    AgentRuntime,
    AgentRuntimeError,
    CommandRuntime,
    HttpRuntime,
    ReferenceRuntime,
    a2a_interface,
    fetch_agent_card,
    openai_runtime,
)
from accord.ledger.errors import AccordError


class HandlerError(RegistryError):
    """A handler spec that names nothing that can answer."""


@dataclass(frozen=True)
class CallableRuntime:
    """A Python callable as a handler: `function(item) -> answer`. Any exception it raises
    becomes a non-retriable AgentRuntimeError (the message names it)."""

    function: Callable[[JSONObject], JSON]

    def answer(self, item: JSONObject) -> JSON:
        try:
            return self.function(item)
        except AgentRuntimeError:
            raise
        except Exception as exc:
            raise AgentRuntimeError(f"{type(exc).__name__}: {exc}", retriable=False) from exc


def handler_from_spec(
    spec: str, *, allow_private: bool = False, agent_did: str | None = None
) -> AgentRuntime:
    """The handler a spec names (see the module's table). An `a2a` agent's signed card names
    the DID that signed it: given the kit agent's own `agent_did`, the two must be one, so the
    agent keeps its card's DID (run the kit with the key that signs the card).

    Raises HandlerError for a spec that names no handler, a module or function that cannot be
    imported, a bad URL, a card that does not verify or is signed by another DID."""
    kind, _, rest = spec.partition(":")
    try:
        if kind == "reference" and not rest:
            return ReferenceRuntime()
        if kind == "python" and rest.count(":") == 1:
            module, function = rest.split(":")
            found = getattr(importlib.import_module(module), function)
            if not callable(found):
                raise HandlerError(f"{rest} is not callable")
            return CallableRuntime(found)
        if kind == "command" and rest.strip():
            return CommandRuntime(shlex.split(rest))
        if kind == "http" and rest:
            return HttpRuntime(rest, allow_private=allow_private)
        if kind == "openai" and rest:
            model, _, base_url = rest.partition("@")
            return openai_runtime(model, endpoint=base_url or None, validate=validate_output)
        if kind == "a2a" and rest:
            card = fetch_agent_card(rest, allow_private=allow_private)
            interface = a2a_interface(card)
            if agent_did is not None and interface.did not in (None, agent_did):
                raise HandlerError(
                    f"the agent card at {rest} is signed by {interface.did}, not by this "
                    f"agent's {agent_did}: run the kit with the key that signs the card "
                    "(--key), so the agent keeps its card's DID"
                )
            return A2ARuntime(interface.url, interface.tenant, allow_private=allow_private)
    except HandlerError:
        raise
    except (AccordError, ImportError, AttributeError, ValueError) as exc:
        raise HandlerError(f"handler {spec!r}: {exc}") from exc
    raise HandlerError(
        f"no handler {spec!r}: use reference, python:MODULE:FUNCTION, command:PROGRAM ..., "
        "http:URL, openai:MODEL[@BASE_URL] or a2a:CARD_URL"
    )
