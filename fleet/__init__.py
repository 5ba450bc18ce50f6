"""The fleet monitor: ingest devices' MQTT reports into a store, show the fleet, serve a dashboard.

- ``records``: the one parse path for a message off the broker, and the rows the store returns.
- ``store``: the store interface and query API; ``store_sqlite`` (embedded default, one file) and
  ``store_postgres`` (server, many writers and readers; the ``fleet`` extra).
- ``ingest``: ``Monitor`` subscribes (alone or in an MQTT v5 shared group), commits batches, and
  acknowledges each message only after its row is committed.
- ``run``: ``run_monitor`` (the ``edge-deploy monitor`` command) and the text table.
- ``dashboard``: the fleet web page's server (login off loopback, Host allow-list, cached pages);
  ``dashboard_page`` draws the page (SVG on the server, no JavaScript); ``httpd`` is the bounded HTTP server.
"""

from fleet.ingest import Monitor, MonitorConfig
from fleet.records import CSV_COLUMNS, DeviceRow, Running
from fleet.run import MonitorSummary, format_table, run_monitor
from fleet.store import DataRefused, FleetStore, StoreUnavailable, open_store
from fleet.store_sqlite import SqliteStore

#: The SQLite store under its former name (``edge.monitor.MonitorStore``).
MonitorStore = SqliteStore

__all__ = [
    "CSV_COLUMNS",
    "DataRefused",
    "DeviceRow",
    "FleetStore",
    "Monitor",
    "MonitorConfig",
    "MonitorStore",
    "MonitorSummary",
    "Running",
    "SqliteStore",
    "StoreUnavailable",
    "format_table",
    "open_store",
    "run_monitor",
]
