"""accord identity: DIDs, keys, verifiable credentials and capability exams.

Built so far: Data Integrity eddsa-jcs-2022 proofs (`identity.dataintegrity`) and the pure core
of capability exams (`identity.challenges`). Credentials, status lists, DID-auth and payout
bindings are being added.
"""
