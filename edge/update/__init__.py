"""Over-the-air updates of a device's bundle: download, A/B slots, the golden-set acceptance check."""
