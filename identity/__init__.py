"""accord identity: DIDs, keys, verifiable credentials and capability exams.

Data Integrity eddsa-jcs-2022 proofs (`dataintegrity`), capability credentials with a numbered
verification checklist (`credentials`), Bitstring Status Lists served at a URL (`status`),
DID-auth presentations over single-use nonces (`presentations`), payout-address bindings
(`payout`), capability exams and typed skills (`challenges`), the exam service on the ledger
(`exams`), agents and their runtimes (`agents`, `runtimes`, with the address guard), A2A agent
cards and their JWS (`agent_cards`, `jws`), RFC 9421 signed requests both ways, to the service
and from it to agents (`http_signatures` over RFC 8941 `structured_fields`; `http_auth` signs
httpx requests). Onboarding (`onboarding`) ties them together over
one ledger: DID-auth registration (`registration`), payout accounts and their bindings on the
log (`payout_accounts`), credentials issued and revoked (`issuance`), the published status
list (`status_lists`), and who signs for a team member (`remote_signing`).
"""
