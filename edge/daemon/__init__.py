"""The device daemon behind ``edge-deploy serve``: config, frame sources, face/text services, the loop."""

from pathlib import Path

#: The example config shipped next to this package (every key, documented); ``edge-deploy serve --example-config``
#: prints it.
EXAMPLE_CONFIG = Path(__file__).resolve().parent / "edge-deploy.example.toml"
