"""What vulture reports as unused but is used, each with who uses it (`make lint` reads this
file with the code; see [tool.vulture] in pyproject.toml)."""

from accord._home import Home

Home.reveal_bids  # the library's API: README.md's example, accord/__init__.py's docstring
trace  # __exit__'s third argument (api/client.py): the context-manager protocol
frame  # a signal handler's second argument (api/identity_cli.py, coordinator/agent_service.py)
checker  # a jsonschema type checker's first argument (identity/challenges/skills.py)
sums_in  # a fixture the shapley tests request for its parameters (numpy sums or Python's)
curve_order  # eth_keyfile.keyfile reads it from the placeholder module (accord/_bls.py)
cycle  # ties a provider to itself (tests/ledger/test_web3_transport.py)
