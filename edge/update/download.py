"""Fetch an update bundle over HTTP(S): bounded in size and time, checked against its sha256, restartable.

The archive is written to ``<dest>.partial`` and renamed to ``dest`` only once its size and sha256 match;
a download that is cut, too large, too slow or different from what the command named leaves nothing at
``dest`` (a later command starts it again from the beginning).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from edge.errors import BundleError

_BLOCK = 1 << 16
MAX_URL_CHARS = 2048


class _NoOtherSchemes(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http/https."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise BundleError(f"{req.full_url}: redirected to {newurl!r}; expected an http or https URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def check_url(url: object) -> str:
    """An update URL: http or https with a host, at most 2048 characters.

    Raises:
        BundleError: anything else (naming the value).
    """
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        raise BundleError(
            f"update url = {str(url)[:80]!r}; expected an http(s) URL of at most {MAX_URL_CHARS} characters"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BundleError(f"update url = {url!r}; expected an http or https URL with a host")
    return url


def download(url: str, dest: Path, sha256: str, max_bytes: int, timeout_s: float) -> int:
    """Download ``url`` to ``dest`` and return its size.

    Args:
        url: http or https URL of the bundle archive.
        dest: where the archive goes (its folder must exist).
        sha256: the archive's expected sha256 (64 lowercase hex digits, from the signed command).
        max_bytes: refuse a larger archive (announced or received).
        timeout_s: bound on each network wait and on the whole download.

    Raises:
        BundleError: a bad URL, an HTTP or network error, more than ``max_bytes``, a truncated body, the
            time bound passed, or a sha256 that differs (each naming the URL).
    """
    check_url(url)
    partial = dest.with_name(dest.name + ".partial")
    opener = urllib.request.build_opener(_NoOtherSchemes)
    deadline = time.monotonic() + timeout_s
    digest, size = hashlib.sha256(), 0
    try:
        with opener.open(urllib.request.Request(url, headers={"User-Agent": "edge-deploy"}), timeout=timeout_s) as resp:
            announced = resp.headers.get("Content-Length")
            length = int(announced) if announced is not None and announced.isdigit() else None
            if length is not None and length > max_bytes:
                raise BundleError(f"{url}: {length} bytes announced; expected at most {max_bytes} (update.max_bytes)")
            with open(partial, "wb") as out:
                while block := resp.read(_BLOCK):
                    size += len(block)
                    if size > max_bytes:
                        raise BundleError(
                            f"{url}: more than {max_bytes} bytes; expected at most that (update.max_bytes)"
                        )
                    if time.monotonic() > deadline:
                        raise BundleError(f"{url}: not finished within {timeout_s:g} s (update.download_timeout_s)")
                    digest.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
    except urllib.error.HTTPError as exc:
        raise BundleError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BundleError(f"{url}: download failed after {size} bytes ({reason})") from None
    finally:
        if partial.exists() and (size == 0 or digest.hexdigest() != sha256):
            partial.unlink()
    if length is not None and size != length:
        raise BundleError(f"{url}: truncated: received {size} of {length} bytes")
    if digest.hexdigest() != sha256:
        raise BundleError(
            f"{url}: sha256 {digest.hexdigest()[:12]}… != the command's {sha256[:12]}… (a different or damaged file)"
        )
    os.replace(partial, dest)
    return size
