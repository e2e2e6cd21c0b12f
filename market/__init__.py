"""accord market: the requester's work (parts and checks), tasks and their lifecycle, escrow
on chain, sealed bids and the auction, reputation, and settlement by Shapley value over the
checks' results."""
