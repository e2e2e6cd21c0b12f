"""accord ledger: the signed, append-only log every other package writes to, and its anchors.

Canonical JSON (RFC 8785, `canonical`), the event envelope and its Ed25519 signatures
(`events`, `signing`), the RFC 9162 Merkle tree and its proofs (`merkle`), the log store on
SQLite or PostgreSQL (`store`) and the service that appends to it (`service`), checkpoints and
C2SP signed notes (`checkpoint`, `note`), the chain client and the local anvil devnet
(`chain`, `devnet`, `contracts`), anchoring checkpoints on chain (`anchoring`) through the
transaction-journal engine (`txjournal`) and the anchor journal (`anchor_journal`), and the
verification checklist (`verify`); settings and opening them (`settings`, `wiring`), and one
error tree (`errors`). It imports nothing else of accord's.
"""
