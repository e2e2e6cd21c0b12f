"""What vulture reports as unused but is used, each with who uses it (`make lint` reads this
file with the product code; see [tool.vulture] in pyproject.toml). The tests are not read: a
name only a test uses is dead product code, unless it is listed below with its reason."""

from accord._home import Home
from accord.client import AccordClient
from accord.identity.exams import regrade_from_ledger
from accord.identity.presentations import InMemoryNonceStore
from accord.ledger.chain.memory_chain import MemoryAnchorChain
from accord.ledger.note import parse_checkpoint, verify_note
from accord.market.escrow.memory_chain import MemoryEscrowChain

# -- the library's API (README, accord/__init__.py): callers outside this repository --------
Home.reveal_bids  # README.md's example, accord/__init__.py's docstring
AccordClient.health  # accord.Client: GET /health, for a caller waiting on a service
verify_note  # C2SP signed notes (ledger/note.py): what a witness or monitor runs on /checkpoint
parse_checkpoint  # the same, a checkpoint note's body
anchor_timer  # app.state.anchor_timer (api/app.py): the running app's anchor timer, for who
# embeds the app (tests/api/test_audits.py watches it), beside app.state.lifecycle
regrade_from_ledger  # docs/agents.md: anyone holding the log re-grades an exam from it

# -- the in-memory doubles DESIGN.md names ("a fast in-memory one for unit tests"): their
# controls, which stand for what the real chain or store does by itself ----------------------
InMemoryNonceStore  # the NonceStore seam's in-memory side (identity/presentations.py)
MemoryAnchorChain.mine_empty  # a block with no anchor in it (anvil mines one by itself)
MemoryAnchorChain.rewind  # a reorg (a real chain's)
MemoryEscrowChain.advance_time  # block time moving on (anvil's evm_increaseTime)
MemoryEscrowChain.spend_nonce  # another sender's transaction using a nonce (a real mempool's)

# -- record fields: part of a value that is stored, logged or shown as a whole ---------------
transcript  # a credential's exam transcript hash (identity/credentials.py), in the document
reason_args  # an escrow revert's arguments (market/escrow/values.py), in its message
from_bond  # a dispute's payout record (market/panel.py), logged with the settlement

# -- protocols: names Python calls --------------------------------------------------------
trace  # __exit__'s third argument (accord/client.py): the context-manager protocol
frame  # a signal handler's second argument (api/identity_cli.py, coordinator/agent_service.py)
checker  # a jsonschema type checker's first argument (identity/challenges/skills.py)
curve_order  # eth_keyfile.keyfile reads it from the placeholder module (accord/_bls.py)
