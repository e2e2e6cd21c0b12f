"""accord identity: DIDs, keys, verifiable credentials and capability exams.

Built so far, as pure cores with their tests: Data Integrity eddsa-jcs-2022 proofs
(`dataintegrity`), capability credentials with a numbered verification checklist
(`credentials`), Bitstring Status Lists (`status`), DID-auth presentations and single-use
nonces (`presentations`), payout-address bindings (`payout`), and capability exams
(`challenges`). The exam service that ties them to the ledger, and the CLI, come next.
"""
