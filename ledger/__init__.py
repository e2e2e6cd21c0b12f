"""accord ledger."""
