"""The agent kit: what an agent's owner or a requester runs anywhere, holding its own keys.

An accord service never holds a kit user's key. Everything the kit does it signs itself and
sends over the service's HTTP API (`api.client.AccordClient`); the service checks each
signature and logs the entry as it was signed.

    agent       `KitAgent`: register, sit exams, bind a payout account, bid, lead (`accord
                agent run`)
    leader      leading a team in the agent's own process, relaying its signed entries
    server      the agent's own HTTP service: /run, /sign, /accord/notify
    handlers    what does the work: reference, python, command, http, openai, a2a

Its one error of its own, drawn under identity's tree (a handler is an agent's runtime):

RegistryError
└── HandlerError   a handler spec that names nothing that can answer (handlers)
"""
