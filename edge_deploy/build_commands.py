"""``edge-deploy build`` (host side) and ``edge-deploy verify`` (device or host): argv adapters.

``build`` imports ``converters`` only when it runs, so ``verify`` works on a Pi with only the device extra.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from edge.errors import InputError, MissingDependencyError
from edge.profiles import DEFAULT_PROFILE_DIR, ModelFormats, Precision, Runtime, available_targets, load_profile
from edge.progress import ProgressFn
from edge_deploy.common import command_parser, output_folder, print_json

DEFAULT_CACHE = Path.home() / ".cache" / "edge-deploy" / "build"
WEB_SETUP_TIMEOUT_S = 900


def web_runtime_on_first_use(
    web_dir: Path | None = None,
    who: str = "edge-deploy build --target browser-wasm",
    progress: ProgressFn | None = None,
) -> None:
    """Install onnxruntime-web (npm) the first time a browser command needs it (``build`` and ``convert model``
    for a browser target).

    From a checkout, runs ``scripts/setup_web.sh --page`` (Node.js/npm from Debian if missing, then ``npm ci``
    in ``web/``), which says on stderr what it installs and for whom. From an installed wheel, ``npm ci`` into
    the user's cache (``converters.package.web.install_ort_from_npm``). Does nothing when the package is there.

    Args:
        web_dir: the checkout's ``web/`` folder (default: the one ``converters.package.web`` builds from).
        who: who needs it, for the script's progress line.
        progress: the command's progress (default: a line on stderr) for the wheel's ``npm ci``.

    Raises:
        MissingDependencyError: when it is missing and cannot be installed here (no checkout's
            ``scripts/setup_web.sh``, or the script fails, times out or leaves it missing).
    """
    from converters.package.web import WEB_SOURCE_DIR, install_ort_from_npm, node_modules, ort_dist

    web_dir = web_dir or WEB_SOURCE_DIR
    try:
        ort_dist(web_dir)
        return
    except MissingDependencyError:
        script = web_dir.parent / "scripts" / "setup_web.sh"
        if node_modules(web_dir).parent != web_dir:  # an installed wheel's page: npm ci into the user's cache
            install_ort_from_npm(web_dir, progress or (lambda line: print(line, file=sys.stderr)))
            ort_dist(web_dir)
            return
        if not script.is_file():
            raise
    try:
        done = subprocess.run(["bash", str(script), "--page", who], stdout=sys.stderr, timeout=WEB_SETUP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MissingDependencyError(
            f"{script} --page did not finish in {WEB_SETUP_TIMEOUT_S} s; run it by hand to install onnxruntime-web"
        ) from None
    if done.returncode != 0:
        raise MissingDependencyError(
            f"{script} --page failed (exit code {done.returncode}, output above); onnxruntime-web is not installed"
        )
    ort_dist(web_dir)  # still missing: its own error says which file


def _print_bundle(bundle, as_json: bool) -> None:
    if as_json:
        print_json(bundle.to_dict())
    else:
        print(bundle.summary())


def _cmd_build_model_folder(args: argparse.Namespace, options, progress) -> int:
    """``build --model FOLDER``: a passed convert model or convert face folder, for the target it was
    converted for."""
    from converters.package.bundle import build_model_bundle
    from converters.package.face_folder import is_face_folder, read_face_folder
    from converters.package.user_model import read_model_folder

    folder = Path(args.model)
    target = args.target or (read_face_folder(folder) if is_face_folder(folder) else read_model_folder(folder)).target
    profile = load_profile(target, Path(args.profiles))
    bundle = build_model_bundle(
        profile, Path(args.model), Path(args.output), Path(args.cache), progress, options, args.licence
    )
    _print_bundle(bundle, args.json)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from converters.package.bundle import BuildOptions
    from edge.progress import StepProgress

    options = BuildOptions(
        precision=Precision(args.precision) if args.precision else None,
        wheels=not args.no_wheels,
        archive=not args.no_archive,
        sign_key=Path(args.sign_key) if args.sign_key else None,
        formats=ModelFormats(args.format) if args.format else None,
    )
    progress = StepProgress(stream=None if args.quiet else sys.stderr)
    if Path(args.cache).exists() and not Path(args.cache).is_dir():
        raise InputError(f"--cache {args.cache}: is a file; expected the build cache folder (created if missing)")
    with output_folder(Path(args.output), f"--output {args.output}"):
        return _build(args, options, progress)


def _build(args: argparse.Namespace, options, progress) -> int:
    """``build`` once its options are read: a user's folder, the browser site or one of our bundles."""
    from converters.package.bundle import MODEL_CHOICES, build_bundle

    if args.model not in MODEL_CHOICES:
        if args.search:
            raise InputError("--search: for the browser site (--target browser-wasm --model face|slm|all)")
        return _cmd_build_model_folder(args, options, progress)
    if args.licence is not None:
        raise InputError(f"--licence: for a user model's folder; the licences of --model {args.model} are recorded")
    if not args.target:
        raise InputError(
            f"--model {args.model}: give the target with --target (one of {', '.join(available_targets())})"
        )
    profile = load_profile(args.target, Path(args.profiles))
    search = _search_site(args, profile)
    if profile.runtime.default is Runtime.ONNXRUNTIME_WEB:
        from converters.package.bundle import build_browser_site

        web_runtime_on_first_use(progress=progress)
        site = build_browser_site(profile, [args.model], Path(args.output), Path(args.cache), progress, search)
        data = {"site": str(site.out_dir), "files": site.files, "bytes": site.bytes}
        if args.json:
            print_json(data)
        else:
            print(f"browser site in {site.out_dir}: {site.files} files, {site.bytes / 1e6:.1f} MB")
            print(f"serve it with: edge-deploy serve-web {site.out_dir}")
        return 0
    bundle = build_bundle(profile, [args.model], Path(args.output), Path(args.cache), progress, options)
    _print_bundle(bundle, args.json)
    return 0


def _search_site(args: argparse.Namespace, profile):
    """``--search`` and its two files as a SearchSite (None without --search).

    Raises:
        InputError: --search for a target that is not the browser, or a search flag without --search.
    """
    from converters.package.web_search import SearchSite

    if args.search is None:
        given = "--search-tokenizer" if args.search_tokenizer else "--search-corpus" if args.search_corpus else None
        if given:
            raise InputError(f"{given} describes the page's search; it needs --search FOLDER")
        return None
    if profile.runtime.default is not Runtime.ONNXRUNTIME_WEB:
        raise InputError(f"--search: the semantic search is a page of the browser site; --target {profile.name} "
                         "builds a device bundle (use --target browser-wasm)")  # fmt: skip
    folder = Path(args.search)
    tokenizer = Path(args.search_tokenizer) if args.search_tokenizer else folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise InputError(f"--search-tokenizer {tokenizer}: no such file; give the encoder's tokenizer.json")
    if not args.search_corpus:
        raise InputError("--search needs --search-corpus FILE: the sentences to rank, one a line")
    return SearchSite(folder, tokenizer, Path(args.search_corpus))


def _add_search_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("semantic search in the browser site (--target browser-wasm)")
    g.add_argument(
        "--search",
        metavar="FOLDER",
        help="a passed 'convert model --target browser-wasm --task embedding' folder of a sentence encoder",
    )
    g.add_argument(
        "--search-tokenizer", metavar="FILE", help="its BERT WordPiece tokenizer.json (default FOLDER/tokenizer.json)"
    )
    g.add_argument("--search-corpus", metavar="FILE", help="the sentences the page ranks, one a line (UTF-8)")


def add_build(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy build``."""
    p = command_parser(
        sub,
        "build",
        extra="convert",
        summary="build an offline-installable bundle for a Raspberry Pi (host side)",
        description="Build an offline-installable bundle for a Pi: the target's models converted and gated (or a "
        "passed 'convert model' / 'convert face' folder: --model FOLDER), the device extra's aarch64 wheels, "
        "install.sh and manifest.json (every file's sha256), in dist/<target>-<models>/ and a .tar.gz. Stages "
        "and wheels are cached. docs/bundle.md.",
        examples="""
        # dist/rpi4-face/ and dist/rpi4-face.tar.gz
        edge-deploy build --target rpi4 --model face -o dist/
        # both model families, signed with a key from 'edge-deploy keygen'
        edge-deploy build --target rpi5 --model all --sign-key keys/release.key
        # a passed convert model or convert face folder, for the target it was gated for
        edge-deploy build --model out/net -o dist/ --sign-key keys/release.key
        # the browser site, with semantic search by a sentence encoder (docs/browser.md)
        edge-deploy build --target browser-wasm --model face --search out/minilm --search-corpus sentences.txt \\
            -o dist/web
        """,
    )
    p.add_argument(
        "--target",
        "-t",
        help="target profile, e.g. rpi4 (see: edge-deploy targets; default for --model FOLDER: the folder's)",
    )
    p.add_argument(
        "--model",
        "-m",
        required=True,
        metavar="{face,slm,all,FOLDER}",
        help="ours (face, slm, all) or a passed 'convert model' / 'convert face' folder (./face for one named face)",
    )
    p.add_argument("--licence", help="--model FOLDER: the model's licence for the manifest (default: the folder's)")
    p.add_argument("--output", "-o", default="dist", help="output folder (default: dist; parents created)")
    p.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        help="every model's precision (default: the profile's; the language model int4 where it says int8)",
    )
    p.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        help="as convert face/slm --format: also the TFLite twins (default: the profile's)",
    )
    _add_search_options(p)
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"build cache (default: {DEFAULT_CACHE})")
    p.add_argument("--no-wheels", action="store_true", help="leave out the aarch64 wheelhouse (models only)")
    p.add_argument("--no-archive", action="store_true", help="write the folder only, no .tar.gz")
    p.add_argument(
        "--sign-key",
        metavar="KEY",
        help="Ed25519 private key (from: edge-deploy keygen): sign manifest.json into manifest.sig",
    )
    p.add_argument("--json", action="store_true", help="print the bundle record as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_build)


def _cmd_verify(args: argparse.Namespace) -> int:
    from edge.bundle import verify_bundle
    from edge.signing import load_trusted_keys

    trusted = load_trusted_keys([Path(p) for p in args.trust or []])
    report = verify_bundle(Path(args.bundle), trusted)
    if args.json:
        print_json(report.to_dict())
    else:
        models = ", ".join(report.models) or "none"
        signed = f"; signed by key {report.signed_by}" if report.signed_by else "; signature not checked (no --trust)"
        print(
            f"{report.bundle}: OK — {report.files} files ({report.total_bytes / 1e6:.1f} MB) match manifest.json"
            f"{signed}; target {report.target}, models {models}, built by edge-deploy {report.tool_version}"
        )
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from edge.signing import generate_keypair

    private = Path(args.output)
    public = Path(args.public) if args.public else None
    with (
        output_folder(private.parent, f"--output {private}", create=True),
        output_folder((public or private).parent, f"--public {public}", create=True),
    ):
        pair = generate_keypair(private, public)
    if args.json:
        print_json({"private": str(pair.private_path), "public": str(pair.public_path), "key_id": pair.key_id})
    else:
        print(f"key {pair.key_id}: private {pair.private_path} (mode 600, keep it off devices and bundles)")
        print(f"  public {pair.public_path}: give it to devices (config trusted_keys, install.sh --trust)")
    return 0


def add_keygen(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy keygen``."""
    p = command_parser(
        sub,
        "keygen",
        summary="make an Ed25519 key pair for signing bundles",
        description="Write a new Ed25519 private key (PEM, mode 600) and its public key (PEM, mode 644); missing "
        "folders are created, existing files never overwritten. Sign bundles with 'build --sign-key PRIVATE'; "
        "devices trust the public key.",
        examples="""
        # keys/release.key and keys/release.pub
        edge-deploy keygen -o keys/release.key
        """,
    )
    p.add_argument("--output", "-o", required=True, help="the private key file to create")
    p.add_argument("--public", help="the public key file (default: the private key's name with .pub)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_keygen)


def add_verify(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy verify``."""
    p = command_parser(
        sub,
        "verify",
        summary="check a bundle against its manifest (sha256, sizes, stray files)",
        description="Check a bundle folder or .tar.gz against its manifest.json: every file present with its size "
        "and sha256, nothing unlisted, no links. With --trust, first require manifest.sig to be signed by one of "
        "the given keys. Exit code 6, listing every file at fault, when it does not match.",
        examples="""
        edge-deploy verify dist/rpi4-face.tar.gz
        # require a signature by this key (from: edge-deploy keygen)
        edge-deploy verify dist/rpi4-face --trust keys/release.pub
        """,
    )
    p.add_argument("bundle", help="bundle folder or .tar.gz")
    p.add_argument(
        "--trust",
        action="extend",
        nargs="+",
        metavar="PUBKEY",
        help="require a signature (manifest.sig) by one of these public keys; refuse unsigned bundles",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_verify)
