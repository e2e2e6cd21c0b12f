"""accord market: tasks, escrow, sealed bids, auctions and settlement (not built yet)."""
