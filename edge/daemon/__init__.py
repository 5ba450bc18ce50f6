"""The device daemon behind ``edge-deploy serve``: config, frame sources, face/text services, the loop."""
