"""MTCNN face detector (facenet-pytorch 2.6.0 weights): rebuild the three nets in torch, export to ONNX.

Source: facenet-pytorch 2.6.0 (MIT) ships ``facenet_pytorch/data/{pnet,rnet,onet}.pt`` as state dicts.
``import facenet_pytorch`` needs torchvision, so the package is never imported: its data folder is found
with ``importlib.util.find_spec`` and the state dicts are loaded into the modules below, which replicate
``facenet_pytorch/models/mtcnn.py`` layer by layer (same attribute names, so ``load_state_dict`` is strict).

What facenet-pytorch feeds the nets (``models/utils/detect_face.py``), and so what our ONNX files expect:

* RGB, float32, NCHW (the HWC image is permuted with ``permute(0, 3, 1, 2)``: no W/H swap on the input),
* normalised as ``(x - 127.5) * 0.0078125``,
* resized with ``torch.nn.functional.interpolate(mode="area")`` (= adaptive average pooling).

The nets were ported from Caffe/Matlab weights, which saw images transposed (W and H swapped). facenet-pytorch
does not transpose the image; instead RNet and ONet permute their last feature map with
``permute(0, 3, 2, 1)`` (NCHW -> NWHC) before flattening into the dense layer. That permute is inside
``forward`` and so is baked into the exported graphs: callers feed plain NCHW images. PNet is fully
convolutional; its output maps are indexed [y, x] like the image.
"""

from __future__ import annotations

import importlib.util
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from converters.paths import make_output_dir
from converters.sources import WEIGHTS_PIP
from edge.errors import ConversionError, InputError, MissingDependencyError, ValidationError, require
from edge.face.detect_mtcnn import MODEL_FILES
from edge.face.models import FaceModel

#: ONNX opset of the exported nets (the dynamo exporter's minimum; onnxruntime >= 1.14 runs it).
OPSET = 18

#: Output names of each net, in the order facenet-pytorch's ``forward`` returns them.
OUTPUT_NAMES = {
    FaceModel.PNET: ("reg", "prob"),
    FaceModel.RNET: ("reg", "prob"),
    FaceModel.ONET: ("reg", "landmarks", "prob"),
}

#: Fixed input side of RNet and ONet (PNet takes any H, W >= 12).
INPUT_SIDE = {FaceModel.RNET: 24, FaceModel.ONET: 48}

#: Largest allowed max-abs difference between ONNX Runtime and PyTorch outputs.
TOLERANCE = 1e-5


def _torch():
    return require("torch", "convert", "Rebuilding the MTCNN nets")


def _build_modules() -> dict[FaceModel, Any]:
    """Define PNet/RNet/ONet as torch modules (torch is imported lazily, so classes are built here)."""
    nn = _torch().nn
    return {FaceModel.PNET: _pnet_class(nn), FaceModel.RNET: _rnet_class(nn), FaceModel.ONET: _onet_class(nn)}


def _pnet_class(nn) -> type:
    class PNet(nn.Module):
        """MTCNN proposal net, as facenet-pytorch's ``PNet``: outputs (reg [N,4,h,w], prob [N,2,h,w])."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 10, kernel_size=3)
            self.prelu1 = nn.PReLU(10)
            self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
            self.conv2 = nn.Conv2d(10, 16, kernel_size=3)
            self.prelu2 = nn.PReLU(16)
            self.conv3 = nn.Conv2d(16, 32, kernel_size=3)
            self.prelu3 = nn.PReLU(32)
            self.conv4_1 = nn.Conv2d(32, 2, kernel_size=1)
            self.softmax4_1 = nn.Softmax(dim=1)
            self.conv4_2 = nn.Conv2d(32, 4, kernel_size=1)

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
            return self.conv4_2(x), self.softmax4_1(self.conv4_1(x))

    return PNet


def _rnet_class(nn) -> type:
    """MTCNN refine net (24x24 input): outputs (reg [N,4], prob [N,2])."""
    return _dense_net_class(nn, "RNet", convs=((3, 28, 3, 3), (28, 48, 3, 3), (48, 64, 2, 0)), dense=576, heads=(2, 4))


def _onet_class(nn) -> type:
    """MTCNN output net (48x48 input): outputs (reg [N,4], landmarks [N,10], prob [N,2])."""
    convs = ((3, 32, 3, 3), (32, 64, 3, 3), (64, 64, 3, 2), (64, 128, 2, 0))
    return _dense_net_class(nn, "ONet", convs=convs, dense=1152, heads=(2, 4, 10), hidden=256)


def _dense_net_class(
    nn, name: str, convs: tuple[tuple[int, int, int, int], ...], dense: int, heads: tuple[int, ...], hidden: int = 128
) -> type:
    """An MTCNN net with a dense head, laid out exactly as facenet-pytorch's (its state dict loads strictly).

    Args:
        nn: ``torch.nn``.
        name: the class name.
        convs: (in, out, kernel, pool kernel or 0) per conv stage: ``conv<i>``, ``prelu<i>``, and a
            ``pool<i>`` (stride 2, ceil mode) when the pool kernel is not 0.
        dense: input features of the hidden layer ``dense<n>`` + ``prelu<n>`` (n = number of convs + 1).
        heads: output features of ``dense<n+1>_<j>``, j = 1, 2...; head 1 is the face probability (softmax).
        hidden: output features of the hidden layer.

    Returns:
        The class; its ``forward`` returns the heads 2, 3... then the probability, as facenet-pytorch does.
    """
    top = len(convs) + 1

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for i, (cin, cout, kernel, pool) in enumerate(convs, 1):
                setattr(self, f"conv{i}", nn.Conv2d(cin, cout, kernel_size=kernel))
                setattr(self, f"prelu{i}", nn.PReLU(cout))
                if pool:
                    setattr(self, f"pool{i}", nn.MaxPool2d(pool, 2, ceil_mode=True))
            setattr(self, f"dense{top}", nn.Linear(dense, hidden))
            setattr(self, f"prelu{top}", nn.PReLU(hidden))
            for j, out in enumerate(heads, 1):
                setattr(self, f"dense{top + 1}_{j}", nn.Linear(hidden, out))
                if j == 1:
                    setattr(self, f"softmax{top + 1}_1", nn.Softmax(dim=1))

        def forward(self, x):
            for i, (*_, pool) in enumerate(convs, 1):
                x = getattr(self, f"prelu{i}")(getattr(self, f"conv{i}")(x))
                x = getattr(self, f"pool{i}")(x) if pool else x
            # Caffe-ported weights: flatten in (W, H, C) order, as facenet-pytorch does.
            x = x.permute(0, 3, 2, 1).contiguous()
            x = getattr(self, f"prelu{top}")(getattr(self, f"dense{top}")(x.view(x.shape[0], -1)))
            rest = [getattr(self, f"dense{top + 1}_{j}")(x) for j in range(2, len(heads) + 1)]
            return (*rest, getattr(self, f"softmax{top + 1}_1")(getattr(self, f"dense{top + 1}_1")(x)))

    Net.__name__ = Net.__qualname__ = name
    return Net


def facenet_data_dir() -> Path:
    """Locate ``facenet_pytorch/data`` without importing facenet_pytorch (its import needs torchvision).

    Returns:
        The folder holding ``pnet.pt``, ``rnet.pt`` and ``onet.pt``.

    Raises:
        MissingDependencyError: if facenet-pytorch is not installed.
    """
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "MTCNN weights come from the Python package 'facenet-pytorch' 2.6.0, which is not installed; "
            f"install it (and the other packages that ship weights and photos, without their dependencies) with: "
            f"{WEIGHTS_PIP}"
        )
    return Path(spec.submodule_search_locations[0]) / "data"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _load_state_dict(path: Path) -> dict:
    torch = _torch()
    if not path.is_file():
        raise InputError(f"{path}: MTCNN weights file not found; expected a facenet-pytorch state dict")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        raise ConversionError(
            f"{path}: cannot read the PyTorch state dict ({_describe(exc)}); "
            "the file is corrupt or truncated, reinstall facenet-pytorch==2.6.0"
        ) from exc
    if not isinstance(state, dict):
        raise ConversionError(f"{path}: expected a state dict (dict of tensors), got {type(state).__name__}")
    return state


def load_mtcnn_nets(data_dir: Path | None = None) -> dict[FaceModel, Any]:
    """Build PNet, RNet and ONet and load facenet-pytorch's pretrained weights into them.

    Args:
        data_dir: folder with ``pnet.pt``, ``rnet.pt``, ``onet.pt``; default facenet-pytorch's own.

    Returns:
        ``{FaceModel.PNET: module, FaceModel.RNET: module, FaceModel.ONET: module}``, float32, in eval mode.

    Raises:
        MissingDependencyError: torch or facenet-pytorch missing.
        InputError: a weights file does not exist.
        ConversionError: a weights file is corrupt, truncated or does not fit the net.
    """
    data_dir = Path(data_dir) if data_dir is not None else facenet_data_dir()
    nets = {}
    for name, cls in _build_modules().items():
        path = data_dir / f"{name}.pt"
        state = _load_state_dict(path)
        net = cls()
        try:
            net.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise ConversionError(f"{path}: the state dict does not fit MTCNN {name.upper()}: {exc}") from exc
        nets[name] = net.float().eval()
    return nets


def _dummy_input(name: FaceModel, batch: int, rng: np.random.Generator, hw: tuple[int, int] = (40, 52)):
    side = INPUT_SIDE.get(name)
    h, w = (side, side) if side else hw
    # Same range as real inputs: (pixel - 127.5) * 0.0078125 lies in [-1, 1].
    return rng.uniform(-1.0, 1.0, size=(batch, 3, h, w)).astype(np.float32)


def _export_one(name: FaceModel, net, path: Path) -> None:
    torch = _torch()
    batch = torch.export.Dim("N", min=1, max=65536)
    if name in INPUT_SIDE:
        shapes = {"x": {0: batch}}
    else:
        side = {"min": 12, "max": 16384}
        shapes = {"x": {0: batch, 2: torch.export.Dim("H", **side), 3: torch.export.Dim("W", **side)}}
    sample = torch.from_numpy(_dummy_input(name, 2, np.random.default_rng(0)))
    try:
        torch.onnx.export(
            net,
            (sample,),
            str(path),
            input_names=["input"],
            output_names=list(OUTPUT_NAMES[name]),
            dynamic_shapes=shapes,
            opset_version=OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    except Exception as exc:  # the exporter raises many types; report them all as one error
        raise ConversionError(f"{path}: exporting MTCNN {name.upper()} to ONNX failed: {exc}") from exc


def compare_with_torch(
    nets: dict[FaceModel, Any], onnx_paths: dict[FaceModel, Path], seed: int = 0
) -> dict[FaceModel, float]:
    """Run each ONNX net and its torch net on seeded inputs and return the max abs difference per net.

    PNet is checked at three input sizes (the pyramid feeds many), RNet/ONet at batch 1 and 7.

    Args:
        nets: torch modules from ``load_mtcnn_nets``.
        onnx_paths: ONNX files from ``export_mtcnn``, by net name.
        seed: seed of the random inputs.

    Returns:
        ``{FaceModel.PNET: diff, ...}`` (every net): the largest difference over all outputs.

    Raises:
        ValidationError: listing every output whose difference exceeds ``TOLERANCE`` or whose shape differs.
    """
    torch = _torch()
    ort = require("onnxruntime", "device", "Checking the exported MTCNN nets")
    rng = np.random.default_rng(seed)
    worst: dict[FaceModel, float] = {}
    problems: list[str] = []
    cases: dict[FaceModel, list[tuple]] = {
        FaceModel.PNET: [(1, (12, 12)), (2, (37, 61)), (1, (120, 90))],
        FaceModel.RNET: [(1,), (7,)],
        FaceModel.ONET: [(1,), (7,)],
    }
    for name, path in onnx_paths.items():
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        worst[name] = 0.0
        for case in cases[name]:
            x = _dummy_input(name, case[0], rng, *case[1:])
            with torch.no_grad():
                ref = [t.numpy() for t in nets[name](torch.from_numpy(x))]
            got = sess.run(None, {"input": x})
            for out, r, g in zip(OUTPUT_NAMES[name], ref, got, strict=True):
                if r.shape != g.shape:
                    problems.append(f"{name}.{out} input {x.shape}: shape {g.shape}, expected {r.shape}")
                    continue
                diff = float(np.max(np.abs(r - g)))
                worst[name] = max(worst[name], diff)
                if diff > TOLERANCE:
                    problems.append(f"{name}.{out} input {x.shape}: max abs diff {diff:.3g} > {TOLERANCE}")
    if problems:
        raise ValidationError("MTCNN ONNX nets differ from PyTorch: " + "; ".join(problems))
    return worst


def export_mtcnn(out_dir: Path, data_dir: Path | None = None) -> dict[FaceModel, Path]:
    """Export facenet-pytorch's MTCNN nets to ONNX and prove each equals PyTorch within ``TOLERANCE``.

    Writes ``mtcnn_pnet.onnx`` (input [N,3,H,W]), ``mtcnn_rnet.onnx`` ([N,3,24,24]) and
    ``mtcnn_onet.onnx`` ([N,3,48,48]); all float32 RGB NCHW normalised as ``(x - 127.5) * 0.0078125``.

    Args:
        out_dir: folder to write to (created if missing).
        data_dir: folder with the ``.pt`` state dicts; default facenet-pytorch's own.

    Returns:
        ``{FaceModel.PNET: path, ...}`` (every net; file names from ``edge.face.detect_mtcnn.MODEL_FILES``).

    Raises:
        MissingDependencyError, InputError, ConversionError: see ``load_mtcnn_nets``; export failure.
        ValidationError: an exported net differs from PyTorch by more than ``TOLERANCE``.
    """
    out_dir = make_output_dir(out_dir)
    nets = load_mtcnn_nets(data_dir)
    paths = {name: out_dir / MODEL_FILES[name] for name in nets}
    for name, net in nets.items():
        _export_one(name, net, paths[name])
    compare_with_torch(nets, paths)
    return paths
