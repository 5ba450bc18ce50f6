"""Read dlib's binary serialization of its face-recognition ResNet, without dlib.

The file (`dlib_face_recognition_resnet_model_v1.dat`) is ``dlib::serialize(net)`` of the ``anet_type`` of
dlib's ``dnn_face_recognition_ResNet_model_v1`` example. dlib writes a network recursively: the loss layer
first, then, for every wrapper from the output down to the input, its version number; then the input layer;
then each layer's details from the input up. The file does not say which wrapper is a tag and which a skip:
that is in the C++ type, so this reader carries the architecture (``FACE_RESNET_V1``) and checks the file
against it, wrapper by wrapper.

Encodings (dlib/serialize.h, float_details.h, dnn/tensor.h):

* integer: one tag byte (low nibble = number of value bytes, bit 7 = negative), then little-endian bytes;
* float/double: integer mantissa, integer exponent, value = mantissa * 2**exponent;
* string: integer length, then the bytes;
* bool: the character ``'1'`` or ``'0'``;
* tensor: integer version 2, integers num_samples, k, nr, nc, then float32 little-endian values;
* alias_tensor: integer version 1, integers num_samples, k, nr, nc (its offset into the layer's params
  tensor follows from the order: filters then biases, gamma then beta).

The reader checks the header first, returns small named records with numpy parameters, and raises
:class:`~edge.errors.ConversionError` naming the file, the byte offset and what it expected.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge.errors import ConversionError

#: The loss layer's version string this reader understands (dlib >= 19.7 writes it).
LOSS_NAME = "loss_metric_2"
INPUT_NAME = "input_rgb_image_sized"
# dlib's float_details marks inf/-inf/nan with these exponents.
_SPECIAL_EXPONENTS = {32000: math.inf, 32001: -math.inf, 32002: math.nan}
_INT_TAG_RESERVED_BITS = 0x70


class LayerKind(enum.Enum):
    """The kinds of dlib layers (and wrappers) in the face ResNet."""

    CON = "con_"
    AFFINE = "affine_"
    RELU = "relu_"
    MAX_POOL = "max_pool_"
    AVG_POOL = "avg_pool_"
    ADD_PREV = "add_prev_"
    FC = "fc_"
    TAG = "tag"
    SKIP = "skip"

    @property
    def is_wrapper(self) -> bool:
        """True for tag/skip wrappers, which have no details of their own in the file."""
        return self in (LayerKind.TAG, LayerKind.SKIP)


@dataclass(frozen=True)
class DlibLayer:
    """One layer, in order from the input to the output.

    Attributes:
        kind: what the layer does.
        tag: for TAG, SKIP and ADD_PREV, the tag number it sets, reads or adds (1 or 2); else None.
        index: for computational layers, their position counting from the input (0 = first conv); else -1.
        version: the layer's version string in the file (``"con_4"``), or ``""`` for wrappers.
        params: named float32 arrays: con ``weight`` [F,C,kh,kw] + ``bias`` [F]; affine ``gamma`` [C] +
            ``beta`` [C]; fc ``weight`` [in, out].
        hyper: integer hyper-parameters: ``kernel``/``stride``/``padding`` as (y, x) for con and pools
            (kernel (0, 0) = the whole image), ``num_outputs``/``num_inputs`` for fc.
        offset: byte offset of the layer's details in the file (-1 for wrappers).
    """

    kind: LayerKind
    tag: int | None = None
    index: int = -1
    version: str = ""
    params: dict[str, np.ndarray] = field(default_factory=dict)
    hyper: dict[str, tuple[int, int] | int] = field(default_factory=dict)
    offset: int = -1

    def pair(self, name: str) -> tuple[int, int]:
        """The (y, x) hyper-parameter ``name`` (``kernel``, ``stride``, ``padding``) of a con or pool layer."""
        value = self.hyper[name]
        if not isinstance(value, tuple):
            raise ConversionError(
                f"{self.version or self.kind.value} layer {self.index}: {name} = {value}; expected (y, x)"
            )
        return value


@dataclass(frozen=True)
class DlibFaceNet:
    """The whole network as read from the file.

    Attributes:
        path: the file read.
        input_mean: (red, green, blue) the input layer subtracts before dividing by 256.
        input_size: (rows, cols) of the chip the input layer takes (150, 150).
        loss_margin: loss_metric's margin (training only).
        distance_threshold: loss_metric's same-person distance threshold (0.6).
        layers: every layer and wrapper from the input to the output.
    """

    path: Path
    input_mean: tuple[float, float, float]
    input_size: tuple[int, int]
    loss_margin: float
    distance_threshold: float
    layers: tuple[DlibLayer, ...]

    @property
    def computational(self) -> tuple[DlibLayer, ...]:
        """The layers that compute something (no tag/skip wrappers)."""
        return tuple(layer for layer in self.layers if not layer.kind.is_wrapper)


# ---------------------------------------------------------------------------------------------------------
# The architecture: anet_type of dlib's dnn_face_recognition_ResNet_model_v1.cpp, from the input up.
# Each entry is (kind, tag); tags only for tag/skip/add_prev.

_Spec = tuple[LayerKind, int | None]
_K = LayerKind


def _block() -> list[_Spec]:
    # block = BN<con<N,3,3,1,1,relu<BN<con<N,3,3,stride,stride,SUBNET>>>>> (strides come from the file)
    return [(_K.CON, None), (_K.AFFINE, None), (_K.RELU, None), (_K.CON, None), (_K.AFFINE, None)]


def _ares() -> list[_Spec]:
    # ares = relu<add_prev1<block<tag1<SUBNET>>>>
    return [(_K.TAG, 1), *_block(), (_K.ADD_PREV, 1), (_K.RELU, None)]


def _ares_down() -> list[_Spec]:
    # ares_down = relu<add_prev2<avg_pool<2,2,2,2,skip1<tag2<block<tag1<SUBNET>>>>>>>
    return [
        (_K.TAG, 1),
        *_block(),
        (_K.TAG, 2),
        (_K.SKIP, 1),
        (_K.AVG_POOL, None),
        (_K.ADD_PREV, 2),
        (_K.RELU, None),
    ]


def _face_resnet_v1() -> tuple[_Spec, ...]:
    stem: list[_Spec] = [(_K.CON, None), (_K.AFFINE, None), (_K.RELU, None), (_K.MAX_POOL, None)]
    level4 = _ares() * 3
    level3 = _ares_down() + _ares() * 3
    level2 = _ares_down() + _ares() * 2
    level1 = _ares_down() + _ares() * 2
    level0 = _ares_down()
    head: list[_Spec] = [(_K.AVG_POOL, None), (_K.FC, None)]
    return tuple(stem + level4 + level3 + level2 + level1 + level0 + head)


#: The expected layers from the input up (130 entries: 108 computational layers and 22 tag/skip wrappers).
FACE_RESNET_V1: tuple[_Spec, ...] = _face_resnet_v1()


# ---------------------------------------------------------------------------------------------------------
class DlibCursor:
    """Reads dlib's primitive encodings from a byte buffer, tracking what it is reading for errors."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data
        self.pos = 0
        self.what = "the file header"

    def fail(self, problem: str, item: str = "") -> ConversionError:
        where = f"{item} in {self.what}" if item else self.what
        return ConversionError(f"{self.path}: {problem} while reading {where}")

    def take(self, n: int, item: str = "") -> memoryview:
        if self.pos + n > len(self.data):
            needed = f"{n} byte{'s' * (n != 1)} needed from byte {self.pos}"
            problem = f"truncated at byte {len(self.data)} ({needed})"
            raise self.fail(problem, item)
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def read_int(self) -> int:
        start = self.pos
        tag = self.take(1)[0]
        size = tag & 0x0F
        if tag & _INT_TAG_RESERVED_BITS or size > 8:
            raise self.fail(f"invalid integer tag byte 0x{tag:02x} at byte {start}")
        value = int.from_bytes(self.take(size), "little")
        return -value if tag & 0x80 else value

    def read_float(self) -> float:
        start = self.pos
        mantissa = self.read_int()
        exponent = self.read_int()
        if exponent in _SPECIAL_EXPONENTS:
            return _SPECIAL_EXPONENTS[exponent]
        try:
            return math.ldexp(mantissa, exponent)
        except OverflowError:
            raise self.fail(f"float {mantissa} * 2**{exponent} at byte {start} is out of range") from None

    def read_string(self, max_len: int = 256) -> str:
        start = self.pos
        n = self.read_int()
        if not 0 <= n <= max_len:
            raise self.fail(f"string length {n} at byte {start} is not plausible (0..{max_len})")
        raw = bytes(self.take(n))
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise self.fail(f"non-ASCII string {raw[:32]!r} at byte {start}") from None

    def read_bool(self) -> bool:
        start = self.pos
        char = self.take(1)[0]
        if char not in (ord("0"), ord("1")):
            raise self.fail(f"expected a bool ('0' or '1') at byte {start}, found 0x{char:02x}")
        return char == ord("1")

    def expect_int(self, expected: int, name: str) -> None:
        start = self.pos
        found = self.read_int()
        if found != expected:
            raise self.fail(f"expected {name} {expected} at byte {start}, found {found}")

    def read_dims(self, count: int) -> tuple[int, ...]:
        start = self.pos
        values = tuple(self.read_int() for _ in range(count))
        if any(v < 0 for v in values):
            raise self.fail(f"negative tensor dimensions {values} at byte {start}")
        return values

    def read_tensor(self) -> np.ndarray:
        """A dlib tensor as a float32 array [num_samples, k, nr, nc]."""
        self.expect_int(2, "tensor version")
        shape = self.read_dims(4)
        count = math.prod(shape)
        raw = self.take(4 * count, f"the values of a {list(shape)} tensor")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)

    def read_alias(self) -> tuple[int, int, int, int]:
        self.expect_int(1, "alias_tensor version")
        return self.read_dims(4)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------
def _split(cur: DlibCursor, params: np.ndarray, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Cut a layer's flat params tensor into its alias_tensors, in order."""
    flat = params.reshape(-1)
    sizes = [math.prod(s) for s in shapes]
    if sum(sizes) != flat.size:
        raise cur.fail(f"params tensor has {flat.size} values but its parts {shapes} need {sum(sizes)}")
    out, start = [], 0
    for shape, size in zip(shapes, sizes, strict=True):
        out.append(flat[start : start + size].reshape(shape).copy())
        start += size
    return out


def _read_con(cur: DlibCursor) -> tuple[dict, dict]:
    params = cur.read_tensor()
    num_filters, nr, nc, sy, sx, py, px = cur.read_dims(7)
    filters = cur.read_alias()
    biases = cur.read_alias()
    for _ in range(4):  # learning-rate and weight-decay multipliers: training only
        cur.read_float()
    if filters != (num_filters, filters[1], nr, nc) or math.prod(biases) != num_filters:
        raise cur.fail(f"filters {filters} / biases {biases} do not fit {num_filters} filters of {nr}x{nc}")
    weight, bias = _split(cur, params, [filters, (num_filters,)])
    hyper = {"num_filters": num_filters, "kernel": (nr, nc), "stride": (sy, sx), "padding": (py, px)}
    return {"weight": weight, "bias": bias}, hyper


def _read_affine(cur: DlibCursor) -> tuple[dict, dict]:
    params = cur.read_tensor()
    gamma = cur.read_alias()
    beta = cur.read_alias()
    start = cur.pos
    mode = cur.read_int()
    if mode != 0:  # CONV_MODE: one gamma/beta per channel
        raise cur.fail(f"expected affine mode 0 (CONV_MODE) at byte {start}, found {mode}")
    channels = math.prod(gamma)
    if math.prod(beta) != channels:
        raise cur.fail(f"gamma {gamma} and beta {beta} differ in size")
    g, b = _split(cur, params, [(channels,), (channels,)])
    return {"gamma": g, "beta": b}, {"channels": channels}


def _read_pool(cur: DlibCursor) -> tuple[dict, dict]:
    nr, nc, sy, sx, py, px = cur.read_dims(6)
    return {}, {"kernel": (nr, nc), "stride": (sy, sx), "padding": (py, px)}


def _read_fc(cur: DlibCursor) -> tuple[dict, dict]:
    num_outputs, num_inputs = cur.read_dims(2)
    params = cur.read_tensor()
    weights = cur.read_alias()
    biases = cur.read_alias()
    start = cur.pos
    bias_mode = cur.read_int()
    for _ in range(4):
        cur.read_float()
    if bias_mode != 1:  # FC_NO_BIAS
        raise cur.fail(f"expected fc bias mode 1 (FC_NO_BIAS) at byte {start}, found {bias_mode}")
    if math.prod(biases) != 0 or math.prod(weights) != num_inputs * num_outputs:
        raise cur.fail(f"fc weights {weights} do not fit {num_inputs} inputs x {num_outputs} outputs")
    (weight,) = _split(cur, params, [(num_inputs, num_outputs)])
    return {"weight": weight}, {"num_outputs": num_outputs, "num_inputs": num_inputs}


def _read_nothing(cur: DlibCursor) -> tuple[dict, dict]:
    return {}, {}


#: Layer version strings this reader knows, with their kind and the reader of their details.
_DETAIL_READERS = {
    "con_4": (LayerKind.CON, _read_con),
    "affine_": (LayerKind.AFFINE, _read_affine),
    "relu_": (LayerKind.RELU, _read_nothing),
    "max_pool_2": (LayerKind.MAX_POOL, _read_pool),
    "avg_pool_2": (LayerKind.AVG_POOL, _read_pool),
    "add_prev_": (LayerKind.ADD_PREV, _read_nothing),
    "fc_2": (LayerKind.FC, _read_fc),
}


# ---------------------------------------------------------------------------------------------------------
def _read_header(cur: DlibCursor) -> tuple[float, float]:
    cur.what = "the add_loss_layer header"
    cur.expect_int(1, "add_loss_layer version")
    start = cur.pos
    name = cur.read_string()
    if name != LOSS_NAME:
        raise cur.fail(f"expected the loss layer {LOSS_NAME!r} at byte {start}, found {name!r}")
    return cur.read_float(), cur.read_float()


def _read_wrapper_versions(cur: DlibCursor) -> None:
    """Check the version of every wrapper from the output down to the input against the architecture."""
    total = len(FACE_RESNET_V1)
    for depth, (kind, tag) in enumerate(reversed(FACE_RESNET_V1)):
        innermost = depth == total - 1
        expected = 3 if innermost else (1 if kind.is_wrapper else 2)
        name = f"tag{tag}/skip{tag}" if kind.is_wrapper else "add_layer"
        cur.what = f"the version of wrapper {depth} of {total} from the output ({name} around {kind.value})"
        cur.expect_int(expected, f"{name} version")


def _read_input(cur: DlibCursor) -> tuple[tuple[float, float, float], tuple[int, int]]:
    cur.what = f"the input layer {INPUT_NAME}"
    start = cur.pos
    name = cur.read_string()
    if name != INPUT_NAME:
        raise cur.fail(f"expected the input layer {INPUT_NAME!r} at byte {start}, found {name!r}")
    mean = (cur.read_float(), cur.read_float(), cur.read_float())
    rows, cols = cur.read_dims(2)
    return mean, (rows, cols)


def _read_layer_tail(cur: DlibCursor, innermost: bool) -> None:
    """Skip the add_layer state after a layer's details (flags and, in a fresh file, empty tensors)."""
    for _ in range(3):
        cur.read_bool()
    for _ in range(3):  # x_grad, cached_output, then grad_final (innermost) or params_grad
        cur.read_tensor()
    if innermost:
        cur.read_int()  # sample_expansion_factor


def _read_layer(cur: DlibCursor, kind: LayerKind, tag: int | None, index: int, count: int) -> DlibLayer:
    cur.what = f"the version string of {kind.value} layer {index} of {count}"
    start = cur.pos
    version = cur.read_string()
    known = _DETAIL_READERS.get(version)
    if known is None or known[0] is not kind:
        expected = sorted(v for v, (k, _) in _DETAIL_READERS.items() if k is kind)
        raise cur.fail(f"expected layer version {' or '.join(expected)} at byte {start}, found {version!r}")
    cur.what = f"{kind.value} layer {index} of {count} ({version} at byte {start})"
    params, hyper = known[1](cur)
    cur.what = f"the add_layer state after {kind.value} layer {index} of {count}"
    _read_layer_tail(cur, innermost=index == 0)
    return DlibLayer(kind, tag, index, version, params, hyper, start)


def read_dlib_face_net(path: Path) -> DlibFaceNet:
    """Read dlib's face-recognition ResNet (`dlib_face_recognition_resnet_model_v1.dat`).

    Args:
        path: the .dat file.

    Returns:
        The network: input normalisation and every layer from the input up, with float32 parameters.

    Raises:
        ConversionError: if the file is missing, empty, truncated, not a dlib file, or a dlib network of
            another architecture; the message names the file, the byte offset and what was expected.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConversionError(f"{path}: cannot read the dlib model ({exc.strerror or exc})") from exc
    if not data:
        raise ConversionError(f"{path}: empty file; expected a dlib serialized network ({LOSS_NAME} ...)")
    cur = DlibCursor(path, data)
    try:
        margin, threshold = _read_header(cur)
    except ConversionError as exc:
        raise ConversionError(
            f"{exc}; not dlib's face-recognition ResNet (expected version 1, then {LOSS_NAME!r})"
        ) from None
    _read_wrapper_versions(cur)
    mean, size = _read_input(cur)
    count = sum(1 for kind, _ in FACE_RESNET_V1 if not kind.is_wrapper)
    layers: list[DlibLayer] = []
    index = 0
    for kind, tag in FACE_RESNET_V1:
        if kind.is_wrapper:
            layers.append(DlibLayer(kind=kind, tag=tag))
            continue
        layers.append(_read_layer(cur, kind, tag, index, count))
        index += 1
    if cur.pos != len(data):
        raise ConversionError(
            f"{path}: {len(data) - cur.pos} unexpected bytes after the last layer at byte {cur.pos}; "
            "expected the end of the file"
        )
    return DlibFaceNet(path, mean, size, margin, threshold, tuple(layers))
