"""accord coordinator: IoA-style team conversations (not built yet)."""
