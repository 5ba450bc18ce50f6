"""Verify on an emulated Raspberry Pi: ``guest`` (arm64 rootfs under qemu-user), ``cost`` (executed
instructions), ``face`` and ``text`` (the device pipelines in the guest against the host)."""
