"""accord identity: DIDs, keys, verifiable credentials and capability exams (not built yet)."""
