"""MQTT telemetry for edge devices: typed messages, a durable SQLite outbox and a broker client.

``schema`` owns the wire format, ``outbox`` keeps every report on disk until the broker acknowledged it,
``mqtt`` connects, drains the outbox and publishes the device's status; ``homeassistant`` builds the
optional discovery messages. Only the standard library and paho-mqtt are used here.
"""
