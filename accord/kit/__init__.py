"""The agent kit: what an agent's owner or a requester runs anywhere, holding its own keys.

An accord service never holds a kit user's key. Everything the kit does it signs itself and
sends over the service's HTTP API (`api.client.AccordClient`); the service checks each
signature and logs the entry as it was signed.
"""
