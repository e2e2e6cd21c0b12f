"""accord audit: re-check a finished collaboration from the log and the chain alone.

It sits above every other package (it replays identity, market and coordinator rules), so it
is its own package rather than part of `ledger/`, which imports nothing of ours.
"""
