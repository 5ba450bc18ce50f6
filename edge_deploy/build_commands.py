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
from edge_deploy.common import print_json

DEFAULT_CACHE = Path.home() / ".cache" / "edge-deploy" / "build"
WEB_SETUP_TIMEOUT_S = 900


def web_runtime_on_first_use(web_dir: Path | None = None, who: str = "edge-deploy build --target browser-wasm") -> None:
    """Install onnxruntime-web (npm) the first time a browser site is built from a checkout.

    Runs ``scripts/setup_web.sh --page`` (Node.js/npm from Debian if missing, then ``npm ci`` in ``web/``),
    which says on stderr what it installs and for whom. Does nothing when the package is there.

    Args:
        web_dir: the checkout's ``web/`` folder (default: the one ``converters.package.web`` builds from).
        who: who needs it, for the script's progress line.

    Raises:
        MissingDependencyError: when it is missing and cannot be installed here (no checkout's
            ``scripts/setup_web.sh``, or the script fails, times out or leaves it missing).
    """
    from converters.package.web import WEB_SOURCE_DIR, ort_dist

    web_dir = web_dir or WEB_SOURCE_DIR
    try:
        ort_dist(web_dir)
        return
    except MissingDependencyError:
        script = web_dir.parent / "scripts" / "setup_web.sh"
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
    from converters.package.bundle import MODEL_CHOICES, BuildOptions, build_bundle
    from edge.progress import StepProgress

    options = BuildOptions(
        precision=Precision(args.precision) if args.precision else None,
        wheels=not args.no_wheels,
        archive=not args.no_archive,
        sign_key=Path(args.sign_key) if args.sign_key else None,
        formats=ModelFormats(args.format) if args.format else None,
    )
    progress = StepProgress(stream=None if args.quiet else sys.stderr)
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

        web_runtime_on_first_use()
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


BUILD_EPILOG = """\
examples:
  edge-deploy build --target rpi4 --model face -o dist/        dist/rpi4-face/ and dist/rpi4-face.tar.gz
  edge-deploy build --target rpi5 --model all --sign-key keys/release.key
  edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib photos/calib/ --eval photos/eval/ \\
      --task embedding --licence Apache-2.0 -o out/net
  edge-deploy build --model out/net -o dist/ --sign-key keys/release.key
                       your model: the passed convert model folder, bundled for the target it was converted
                       and gated for (dist/rpi4-model-net/); a folder without models.json is refused
  edge-deploy verify dist/rpi4-model-net.tar.gz --trust keys/release.pub
  edge-deploy build --target browser-wasm --model face --search out/minilm/browser-wasm-fp32 \
      --search-corpus sentences.txt -o dist/web
                       the browser site with on-device semantic search: a sentence encoder converted with
                       convert model --target browser-wasm --task embedding, its tokenizer.json beside it or
                       given with --search-tokenizer (all-MiniLM-L6-v2: docs/browser.md)
  edge-deploy convert face --target rpi4 --embedder my_embedder.onnx --licence MIT -o out/myface
  edge-deploy build --model out/myface -o dist/
                       a convert face folder (your embedder, or ours with a BlazeFace detector added by
                       convert blazeface): bundled as --model face bundles ours, daemon and golden set
                       included (dist/rpi4-face-myface/)

--model FOLDER: not converted again; its files are checked against the sha256s the conversion recorded and
its gate's report must say passed. For a convert model folder the manifest records the source model, its
sha256 and licence (--licence here, else convert model's --licence, else "unknown (user model)"); a convert
face folder's models.json records its licences. A folder named face, slm or all: write ./face.
"""


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
        help="a passed 'convert model --target browser-wasm --task embedding' folder of a sentence encoder "
        "(input_ids + attention_mask, 1 x SEQ; pooled and normalised in the graph, e.g. all-MiniLM-L6-v2)",
    )
    g.add_argument(
        "--search-tokenizer", metavar="FILE", help="its BERT WordPiece tokenizer.json (default FOLDER/tokenizer.json)"
    )
    g.add_argument("--search-corpus", metavar="FILE", help="the sentences the page ranks, one a line (UTF-8)")


def add_build(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy build``."""
    p = sub.add_parser(
        "build",
        help="build an offline-installable bundle for a Raspberry Pi (host side)",
        description="Convert (and quantize, and gate) the models for a target, download the device "
        "extra's wheels for aarch64 / Python 3.11, and write dist/<target>-<models>/ with manifest.json "
        "(files with sha256 and size, sources, licences, quantization, gate metrics), install.sh and a "
        "device README, plus a .tar.gz of it. Model stages and wheels are cached: a second build with "
        "nothing changed reuses them. --model FOLDER bundles your model from a passed 'convert model' folder.",
        epilog=BUILD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--target",
        "-t",
        help="target profile: " + ", ".join(available_targets()) + " (default for --model FOLDER: the folder's)",
    )
    p.add_argument(
        "--model",
        "-m",
        required=True,
        metavar="{face,slm,all,FOLDER}",
        help="which models to bundle: ours, or a passed 'edge-deploy convert model' or 'convert face' output folder",
    )
    p.add_argument(
        "--licence",
        help="--model FOLDER: the model's licence for the manifest (default: convert model's --licence, else "
        "'unknown (user model)')",
    )
    p.add_argument("--output", "-o", default="dist", help="output folder (default: dist)")
    p.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        help="override the profile's runtime.precision for every model (default: the profile's; the "
        "language model takes int4 where the profile says int8, as convert slm does)",
    )
    p.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        help="onnx, or the TFLite twins too, listed in the manifest: the face models' (as 'convert face --format'; "
        "needs scripts/setup_onnx2tf.sh) and the language model's LiteRT twin (as 'convert slm --format': tflite "
        "makes it the device's default, both ships it beside the ONNX; fp32 or int8; needs "
        "scripts/setup_litert_torch.sh). Default: the profile's runtime.face_formats and runtime.slm_formats",
    )
    _add_search_options(p)
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"build cache (default: {DEFAULT_CACHE})")
    p.add_argument("--no-wheels", action="store_true", help="leave out the aarch64 wheelhouse (models only)")
    p.add_argument("--no-archive", action="store_true", help="write the folder only, no .tar.gz")
    p.add_argument(
        "--sign-key",
        metavar="KEY",
        help="Ed25519 private key (edge-deploy keygen; mode 600): write manifest.sig, a signature over manifest.json",
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

    pair = generate_keypair(Path(args.output), Path(args.public) if args.public else None)
    if args.json:
        print_json({"private": str(pair.private_path), "public": str(pair.public_path), "key_id": pair.key_id})
    else:
        print(f"key {pair.key_id}: private {pair.private_path} (mode 600, keep it off devices and bundles)")
        print(f"  public {pair.public_path}: give it to devices (config trusted_keys, install.sh --trust)")
    return 0


def add_keygen(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy keygen``."""
    p = sub.add_parser(
        "keygen",
        help="make an Ed25519 key pair for signing bundles",
        description="Write a new Ed25519 private key (PKCS#8 PEM, mode 600) and its public key (PEM, mode "
        "644). Sign bundles with 'build --sign-key PRIVATE'; devices trust the public key. Existing files are "
        "never overwritten.",
        epilog="example:\n  edge-deploy keygen -o keys/release.key      (writes keys/release.key, keys/release.pub)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--output", "-o", required=True, help="the private key file to create")
    p.add_argument("--public", help="the public key file (default: the private key's name with .pub)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_keygen)


def add_verify(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy verify``."""
    p = sub.add_parser(
        "verify",
        help="check a bundle against its manifest (sha256, sizes, stray files)",
        description="Check every file of a bundle folder or .tar.gz against manifest.json: present, same "
        "size, same sha256, nothing unlisted, no links. With --trust, first require manifest.sig to be a "
        "signature over manifest.json by one of the given keys. Exit code 6 and a list of every file at fault "
        "(or the signature's problem, with the key id) when it does not match.",
    )
    p.add_argument("bundle", help="bundle folder or .tar.gz")
    p.add_argument(
        "--trust",
        action="extend",
        nargs="+",
        metavar="PUBKEY",
        help="require a signature (manifest.sig) by one of these public keys (after the bundle: verify BUNDLE "
        "--trust K1 K2, or --trust K1 --trust K2); refuse unsigned bundles",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_verify)
