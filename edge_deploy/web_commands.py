"""``edge-deploy serve-web DIR``: serve a browser build with the cross-origin-isolation headers threads need."""

from __future__ import annotations

import argparse

from edge.webserve import WebServer
from edge_deploy.common import command_parser


def _cmd_serve_web(args: argparse.Namespace) -> int:
    server = WebServer(args.site, host=args.host, port=args.port)
    print(f"serving {args.site} at {server.url} (cross-origin isolated: WebAssembly threads on); Ctrl-C stops")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.close()
    return 0


def add_serve_web(sub: argparse._SubParsersAction) -> None:
    """Register ``serve-web`` on the CLI's subparsers."""
    p = command_parser(
        sub,
        "serve-web",
        summary="serve a browser build (COOP/COEP headers for WebAssembly threads, wasm/mjs MIME types)",
        description="Serve the static site written by 'edge-deploy build --target browser-wasm -o DIR', with the "
        "cross-origin-isolation headers WebAssembly threads need and the wasm/mjs MIME types. Ctrl-C stops.",
        examples="""
        # http://127.0.0.1:8080/ on this machine
        edge-deploy serve-web dist/web
        # another port, reachable from the network
        edge-deploy serve-web dist/web --host 0.0.0.0 --port 8000
        """,
    )
    p.add_argument("site", metavar="DIR", help="the site folder (with index.html and manifest.json)")
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.set_defaults(func=_cmd_serve_web)
