"""What the status-list tests read of a `StatusList`: every bit it has set."""

from __future__ import annotations

from accord.identity.status import StatusList


def set_bits(status_list: StatusList) -> list[int]:
    """Every index whose bit `StatusList.get` reads as set, ascending (only the bytes that are
    not zero are looked into, so a list of 2^17 bits is read at once)."""
    return [
        position * 8 + offset
        for position, byte in enumerate(status_list.bits)
        if byte
        for offset in range(8)
        if status_list.get(position * 8 + offset)
    ]
