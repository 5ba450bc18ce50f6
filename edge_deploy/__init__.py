"""The ``edge-deploy`` command line (the only module that sees both ``edge`` and ``converters``)."""
