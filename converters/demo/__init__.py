"""The main job (``edge-deploy demo``): ``host`` (convert, enroll, recognise on the host), then ``pi`` (the
target's bundle, verified and run on an emulated Pi, latency over MQTT)."""
