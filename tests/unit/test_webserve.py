"""edge/webserve.py and the serve-web command: headers, MIME types and errors, on a real local socket."""

from __future__ import annotations

import argparse
import urllib.request
from pathlib import Path

import pytest

from edge.errors import InputError
from edge.webserve import WebServer
from edge_deploy.web_commands import add_serve_web


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>x</title>")
    (tmp_path / "ort").mkdir()
    (tmp_path / "ort" / "ort-wasm-simd-threaded.wasm").write_bytes(b"\0asm\1\0\0\0")
    (tmp_path / "ort" / "ort.wasm.min.mjs").write_text("export const x = 1;")
    (tmp_path / "manifest.json").write_text("{}")
    return tmp_path


def _get(url: str) -> tuple[int, object, bytes]:
    with urllib.request.urlopen(url, timeout=10) as res:
        return res.status, res.headers, res.read()  # case-insensitive header lookup


@pytest.mark.parametrize(
    ("path", "mime"),
    [
        ("index.html", "text/html"),
        ("ort/ort-wasm-simd-threaded.wasm", "application/wasm"),
        ("ort/ort.wasm.min.mjs", "text/javascript"),
        ("manifest.json", "application/json"),
    ],
)
def test_files_are_served_isolated_with_their_mime_type(site, path, mime):
    with WebServer(site, port=0) as server:
        status, headers, body = _get(server.url + path)
    assert status == 200
    assert headers["Content-Type"] == mime
    assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
    assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
    assert body == (site / path).read_bytes()


def test_port_zero_picks_a_free_port_and_close_releases_it(site):
    server = WebServer(site, port=0).start()
    port = server.port
    assert port > 0 and server.url == f"http://127.0.0.1:{port}/"
    server.close()
    server.close()  # twice is fine
    with WebServer(site, port=port) as again:  # the port is free again
        assert again.port == port


def test_a_folder_without_index_html_is_refused(tmp_path):
    with pytest.raises(InputError) as err:
        WebServer(tmp_path, port=0)
    assert str(err.value) == (
        f"{tmp_path}: no index.html; expected a site written by 'edge-deploy build --target browser-wasm'"
    )


def test_a_busy_port_is_named(site):
    with WebServer(site, port=0) as first, pytest.raises(InputError) as err:
        WebServer(site, port=first.port)
    assert str(err.value) == f"cannot listen on 127.0.0.1:{first.port} (Address already in use); choose another --port"


def test_serve_web_arguments():
    parser = argparse.ArgumentParser()
    add_serve_web(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve-web", "dist/web"])
    assert (args.site, args.port, args.host) == ("dist/web", 8080, "127.0.0.1")
    args = parser.parse_args(["serve-web", "d", "--port", "9000", "--host", "0.0.0.0"])
    assert (args.port, args.host) == (9000, "0.0.0.0")
