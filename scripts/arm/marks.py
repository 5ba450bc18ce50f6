"""Region marks for the instruction-counting plugin (scripts/arm/insncount.c), shared by the guest scripts.

A mark is a syscall the plugin recognises by its number and key; without the plugin it fails harmlessly
with ENOSYS. ``marker(True)(region, stop)`` starts (stop=0) or stops (stop=1) counting ``region``.
"""

from __future__ import annotations

from collections.abc import Callable

MARK_SYSCALL, MARK_KEY = 0x7ED0, 0x45444745  # as in scripts/arm/insncount.c


def marker(enabled: bool) -> Callable[[int, int], object]:
    """The mark function, or a no-op when counting is off."""
    if not enabled:
        return lambda region, stop: None
    import ctypes

    syscall = ctypes.CDLL(None, use_errno=True).syscall
    args = (ctypes.c_long(MARK_SYSCALL), ctypes.c_long(MARK_KEY))
    return lambda region, stop: syscall(*args, ctypes.c_long(region), ctypes.c_long(stop))
