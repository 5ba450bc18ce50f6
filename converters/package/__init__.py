"""Package for a device: ``stages`` (cached model stages), ``wheelhouse`` (aarch64 wheels), ``bundle``
(``edge-deploy build``: the bundle and its manifest), ``web`` (the browser build)."""
