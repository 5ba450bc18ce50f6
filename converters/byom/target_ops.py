"""Can the target's runtime load a model? Asked of a user's model before its conversion and evaluation.

Each profile names its runtime (``runtime.default``). The question goes to that runtime itself, never to a
list of ops we keep:

* ``onnxruntime`` (the Pi and x86 profiles): a session on this host, graph optimisations off. The device
  installs onnxruntime from PyPI for aarch64 when its bundle is built (``converters.package.wheelhouse``);
  the release checked here is named in the report, so a bundle built later with another release can be
  told apart.
* ``onnxruntime-web`` (``browser-wasm``): the very build the site ships (``web/node_modules``'s
  ``ort.wasm.min.mjs`` and ``ort-wasm-simd-threaded.wasm``, pinned in ``web/package.json``), loaded in
  Node.js by ``web/check_model.mjs``. It is an older release than the host's onnxruntime (1.30 against
  1.32 here) and takes ai.onnx only up to opset 26, where the host takes 28: a model the host runs can
  still fail in the page, and would otherwise be found only there.

When the runtime refuses the model, the message names the model, the target and its runtime, and every
node whose op this host's onnxruntime has no CPU kernel for (``unsupported_nodes``: op, domain, version),
so a model with several such ops is reported once, not op by op; the runtime's own words follow.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import InputError, MissingDependencyError
from edge.profiles import Runtime, TargetProfile

#: The script that loads models in onnxruntime-web under Node.js (``web/check_model.mjs``).
CHECK_SCRIPT = "check_model.mjs"
#: Node.js loading a model in onnxruntime-web (the tests' small models: about 1 s, mostly starting the wasm).
NODE_TIMEOUT_S = 300.0
#: At most this many nodes are named per unsupported op (a model may use one op hundreds of times).
NODES_NAMED = 3


@dataclass(frozen=True)
class TargetRuntime:
    """The runtime a profile's models run on, and its release."""

    runtime: Runtime
    version: str

    def __str__(self) -> str:
        return f"{self.runtime.value} {self.version}"


@dataclass(frozen=True)
class UnsupportedOp:
    """An op of the model the host's onnxruntime has no CPU kernel for, and the nodes that use it."""

    domain: str
    op_type: str
    version: int
    nodes: tuple[str, ...]

    def __str__(self) -> str:
        named = ", ".join(repr(n) for n in self.nodes[:NODES_NAMED])
        more = f" and {len(self.nodes) - NODES_NAMED} more" if len(self.nodes) > NODES_NAMED else ""
        return f"{self.domain or 'ai.onnx'}:{self.op_type}-{self.version} (node {named}{more})"


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def target_runtime(profile: TargetProfile, web_dir: Path | None = None) -> TargetRuntime:
    """The runtime ``profile`` runs ONNX models on, with the release a check here is made against.

    Raises:
        MissingDependencyError: a browser profile and no onnxruntime-web in ``web/node_modules``.
        InputError: a profile whose runtime does not run ONNX models (LiteRT).
    """
    if profile.runtime.default is Runtime.ONNXRUNTIME_WEB:
        from converters.package.web import WEB_SOURCE_DIR, ort_dist

        _, version = ort_dist(web_dir or WEB_SOURCE_DIR)
        return TargetRuntime(Runtime.ONNXRUNTIME_WEB, version)
    if profile.runtime.default is Runtime.ONNXRUNTIME:
        return TargetRuntime(Runtime.ONNXRUNTIME, _ort_version())
    raise InputError(
        f"{profile.source}: runtime.default = '{profile.runtime.default.value}'; convert model checks ONNX models "
        "for onnxruntime or onnxruntime-web targets"
    )


def _kernel_ranges() -> dict[tuple[str, str], list[tuple[int, int]]]:
    """This host's onnxruntime CPU kernels: (domain, op) -> the op versions each kernel covers."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    table: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for kernel in ort_c.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            table.setdefault((kernel.domain, kernel.op_name), []).append(tuple(kernel.version_range))
    return table


def _op_version(domain: str, op_type: str, opset: int) -> int:
    """The op's schema version in force at ``opset`` (the opset itself where onnx has no schema)."""
    import onnx

    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except Exception:  # noqa: BLE001 - onnx raises SchemaError for ops it does not know (contrib, custom)
        return opset


def _nodes(graph: Any) -> list[Any]:
    """Every node of ``graph`` and of its subgraphs (If, Loop, Scan bodies)."""
    out = []
    for node in graph.node:
        out.append(node)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                out.extend(_nodes(sub))
    return out


def unsupported_nodes(proto: Any) -> list[UnsupportedOp]:
    """The model's nodes whose op (at the model's opset) has no CPU kernel in this host's onnxruntime.

    Ops the model defines itself (model-local functions) are left out: onnxruntime inlines them. Ops that
    onnx defines as a function of other ops may be inlined too, so an op listed here is a lead, and the
    runtime's refusal is the verdict.
    """
    opsets = {o.domain if o.domain != "ai.onnx" else "": int(o.version) for o in proto.opset_import}
    local = {(f.domain, f.name) for f in proto.functions}
    table = _kernel_ranges()
    found: dict[tuple[str, str, int], list[str]] = {}
    for index, node in enumerate(_nodes(proto.graph)):
        domain = node.domain if node.domain != "ai.onnx" else ""
        if (domain, node.op_type) in local:
            continue
        version = _op_version(domain, node.op_type, opsets.get(domain, 1))
        ranges = table.get((domain, node.op_type), [])
        if not any(lo <= version <= hi for lo, hi in ranges):
            found.setdefault((domain, node.op_type, version), []).append(node.name or f"#{index}")
    return [UnsupportedOp(d, op, v, tuple(names)) for (d, op, v), names in found.items()]


def _runtime_words(message: str) -> str:
    """The runtime's refusal without its C++ source location, error codes and the file's path."""
    text = message.split("ERROR_MESSAGE: ", 1)[-1].strip()
    opset = re.search(r"support for domain (\S+) is till opset (\d+)", text)
    if opset:
        return f"it takes {opset.group(1)} up to opset {opset.group(2)}"
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"^Load model from .*? failed:", "", text)
    return re.sub(r"^/\S+:\d+ [^\n]*?\) (?=[A-Z])", "", text).strip()[:600]


def _refusal(name: Path, proto: Any, profile: TargetProfile, runtime: TargetRuntime, words: str) -> InputError:
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in proto.opset_import)
    missing = "; ".join(str(m) for m in unsupported_nodes(proto))
    if missing and runtime.runtime is Runtime.ONNXRUNTIME:
        missing = f"; no CPU kernel for {missing}"
    elif missing:
        missing = f"; this host's onnxruntime {_ort_version()} (a newer release) has no CPU kernel for {missing}"
    return InputError(
        f"{name}: {runtime}, the runtime of {profile.name}, cannot load it{missing}; {runtime.runtime.value} says: "
        f"{words}. Re-export the model without these ops or at an opset the runtime takes (the model's: {opsets})"
    )


def _load_on_host(model: Path) -> str | None:
    """None when this host's onnxruntime loads ``model`` (optimisations off); else onnxruntime's message."""
    from edge.errors import InferenceError
    from edge.runtime.ort_session import Optimization, build_session

    try:
        build_session(model, 1, what=f"the model {model.name}", optimization=Optimization.NONE)
    except InferenceError as exc:
        return str(exc.__cause__ or exc)
    return None


def _load_in_node(models: list[Path], web_dir: Path) -> dict[str, str | None]:
    """Each model loaded in the page's onnxruntime-web under Node.js: path -> None (loaded) or the error."""
    from converters.package.web import ort_dist

    node = shutil.which("node")
    if node is None:
        raise MissingDependencyError(
            "node: Node.js is not installed; the browser target's models are checked in onnxruntime-web under "
            "Node.js: install it with scripts/setup_web.sh --page"
        )
    dist, _ = ort_dist(web_dir)
    argv = [node, str(web_dir / CHECK_SCRIPT), str(dist), *(str(m) for m in models)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"{models[0]}: onnxruntime-web did not load it within {NODE_TIMEOUT_S:.0f} s") from exc
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(lines) != len(models):
        raise MissingDependencyError(
            f"{web_dir / CHECK_SCRIPT}: Node.js could not run onnxruntime-web (exit {done.returncode}: "
            f"{done.stderr.strip()[-400:]}); reinstall it with scripts/setup_web.sh --page"
        )
    return {line["file"]: None if line["ok"] else line["error"] for line in lines}


def check_target_ops(
    model: Path, profile: TargetProfile, name: Path | None = None, web_dir: Path | None = None
) -> dict:
    """Load ``model`` in ``profile``'s runtime; refuse it, naming every op at fault, when that fails.

    Args:
        model: an ONNX file (the fp32 copy or the INT8 candidate of ``convert model``).
        profile: the target.
        name: how the message names the model (default: ``model``), e.g. the user's file.
        web_dir: the page sources with ``node_modules`` (default: the repository's ``web/``).

    Returns:
        ``{"runtime", "version", "how"}`` for the report.

    Raises:
        InputError: the runtime cannot load the model (the message lists the ops the host has no kernel for,
            and the runtime's own words).
        MissingDependencyError: a browser target without Node.js or onnxruntime-web.
    """
    import onnx

    from converters.package.web import WEB_SOURCE_DIR

    web = web_dir or WEB_SOURCE_DIR
    runtime = target_runtime(profile, web)
    if runtime.runtime is Runtime.ONNXRUNTIME_WEB:
        error = _load_in_node([model], web).get(str(model))
        how = "loaded in the site's onnxruntime-web (wasm) under Node.js, optimisations off"
    else:
        error = _load_on_host(model)
        how = "loaded in this host's onnxruntime, optimisations off"
    if error is not None:
        proto = onnx.load(str(model), load_external_data=False)
        raise _refusal(name or model, proto, profile, runtime, _runtime_words(error))
    return {"runtime": runtime.runtime.value, "version": runtime.version, "how": how}
