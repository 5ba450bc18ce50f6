"""A folder of images as ``--calib`` / ``--eval`` data: read, resized to the model's image input, normalised.

A model with one 4-D input whose channel axis holds 1 or 3 channels takes images: ``B x C x H x W`` (NCHW)
or ``B x H x W x C`` (NHWC), told from the fixed shape (``--layout`` when both axes could be channels, e.g.
``1x3x8x3``). Every image file of the folder (by suffix: ``IMAGE_SUFFIXES``; the decoder then checks the
content's signature, ``edge.imageio``) is decoded to RGB, resized to ``W x H`` (stretched, no crop: area
interpolation when shrinking, bilinear when enlarging), turned grey for a 1-channel input (ITU-R BT.601
weights, cv2's), and, for a float32 input, normalised per channel as ``(pixel - mean) / std`` on the 0-255
scale. A uint8 input gets the pixels as they are. Images are sorted by file name and stacked on axis 0: the
count must be a multiple of the input's batch.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.byom.feeds import Samples, read_samples
from converters.byom.source import TensorSpec
from edge.errors import InputError
from edge.imageio import IMAGE_SUFFIXES, load_image  # other files are skipped and listed in the report

#: Defaults of ``--mean`` / ``--std`` (0-255 scale): pixels / 255, in [0, 1].
DEFAULT_MEAN = 0.0
DEFAULT_STD = 255.0


class Layout(enum.StrEnum):
    """Where an image input keeps its channels."""

    NCHW = "nchw"
    NHWC = "nhwc"


#: Channel counts an image input may have (grey, RGB).
CHANNELS = (1, 3)


@dataclass(frozen=True)
class ImageOptions:
    """How image folders become tensors (the CLI's ``--mean``, ``--std``, ``--layout``).

    Attributes:
        mean: per channel on the 0-255 scale (one value for every channel, or one per channel); None: 0.
        std: the same for the divisor; None: 255.
        layout: NCHW or NHWC; None: told from the input's shape.
    """

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    layout: Layout | None = None

    @property
    def given(self) -> bool:
        return self.mean is not None or self.std is not None or self.layout is not None

    def check(self) -> None:
        """Raises InputError for an empty list, a value that is not finite, or a std that is not > 0."""
        for flag, values in (("--mean", self.mean), ("--std", self.std)):
            if values is None:
                continue
            if not values or len(values) > 3:
                raise InputError(f"{flag} {_text(values)}: expected 1 value, or one per channel (3 for RGB)")
            for v in values:
                if not math.isfinite(v) or (flag == "--std" and v <= 0):
                    bound = "a finite number > 0" if flag == "--std" else "a finite number"
                    raise InputError(f"{flag} {_text(values)}: {v} is not {bound}")

    def to_dict(self) -> dict:
        return {
            "mean": list(self.mean) if self.mean is not None else None,
            "std": list(self.std) if self.std is not None else None,
            "layout": self.layout.value if self.layout else None,
        }


def _text(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values) or "''"


def parse_channels(text: str, flag: str) -> tuple[float, ...]:
    """``"123.675,116.28,103.53"`` -> the floats, for ``--mean`` / ``--std``.

    Raises:
        InputError: a value that is not a number (naming the flag).
    """
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected numbers separated by commas, e.g. 123.675,116.28,103.53") from None


@dataclass(frozen=True)
class ImageInput:
    """The model's image input as the folder reader needs it."""

    spec: TensorSpec
    layout: Layout
    channels: int
    height: int
    width: int


def image_input(model: Path, inputs: Sequence[TensorSpec], layout: Layout | None, what: str) -> ImageInput:
    """Check the model takes one image and say how.

    Raises:
        InputError: more than one input; not a 4-D uint8/float32 input with 1 or 3 channels; channels on
            both possible axes without ``--layout``; ``--layout`` that names an axis of another size.
    """
    if len(inputs) != 1:
        names = ", ".join(f"{s.name}={s.shape_text()}" for s in inputs)
        raise InputError(
            f"{what}: an image folder feeds a model with one image input; {model} has {len(inputs)} inputs "
            f"({names}); give a .npz with one array per input"
        )
    spec = inputs[0]
    expected = "a 4-D input of 1 or 3 channels (Bx3xHxW or BxHxWx3)"
    if len(spec.shape) != 4:
        raise InputError(
            f"{what}: {model}'s input {spec.name!r} is {spec.shape_text()}, not an image; expected {expected}; "
            "give a .npz instead"
        )
    if spec.dtype not in (np.dtype(np.float32), np.dtype(np.uint8)):
        raise InputError(
            f"{what}: {model}'s input {spec.name!r} is {spec.dtype}; images feed float32 or uint8 inputs; give a "
            ".npz instead"
        )
    dims = tuple(int(d) for d in spec.shape)
    candidates = [lay for lay, c in ((Layout.NCHW, dims[1]), (Layout.NHWC, dims[3])) if c in CHANNELS]
    if layout is None:
        if not candidates:
            raise InputError(
                f"{what}: {model}'s input {spec.name!r} is {spec.shape_text()}, not an image; expected {expected}"
            )
        if len(candidates) > 1:
            raise InputError(
                f"{what}: {model}'s input {spec.name!r} is {spec.shape_text()}: axis 1 and axis 3 could both hold "
                "the channels; say which with --layout nchw or --layout nhwc"
            )
        layout = candidates[0]
    if layout not in candidates:
        axis = 1 if layout is Layout.NCHW else 3
        raise InputError(
            f"--layout {layout.value}: {model}'s input {spec.name!r} is {spec.shape_text()}; axis {axis} has "
            f"{dims[axis]}, expected 1 or 3 channels"
        )
    if layout is Layout.NCHW:
        return ImageInput(spec, layout, dims[1], dims[2], dims[3])
    return ImageInput(spec, layout, dims[3], dims[1], dims[2])


def _per_channel(values: tuple[float, ...] | None, default: float, channels: int, flag: str) -> np.ndarray:
    if values is None:
        return np.full(channels, default, np.float32)
    if len(values) not in (1, channels):
        raise InputError(f"{flag} {_text(values)}: {len(values)} values for an input of {channels} channels")
    return np.broadcast_to(np.asarray(values, np.float32), (channels,)).copy()


def _pixels(path: Path, target: ImageInput) -> np.ndarray:
    """One image as uint8 [H, W, C] at the input's size."""
    import cv2

    rgb = load_image(path)
    h, w = rgb.shape[:2]
    shrink = target.width * target.height < w * h
    resized = cv2.resize(
        rgb, (target.width, target.height), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    )
    if target.channels == 1:
        return cv2.cvtColor(resized, cv2.COLOR_RGB2GRAY)[:, :, None]
    return resized


def _list_images(folder: Path, what: str) -> tuple[list[Path], list[str]]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    skipped = [p.name for p in files if p not in images]
    if not images:
        also = f" (it has {len(skipped)} other files, e.g. {skipped[0]})" if skipped else ""
        raise InputError(
            f"{what} {folder}: no images{also}; expected image files ({', '.join(IMAGE_SUFFIXES)}) or a .npz"
        )
    return images, skipped


def read_image_folder(
    folder: Path, model: Path, inputs: Sequence[TensorSpec], what: str, options: ImageOptions
) -> Samples:
    """Read every image of ``folder`` as one sample of the model's image input.

    Args:
        folder: the folder (not searched recursively; hidden files are left out).
        model: the model file, for messages.
        inputs: the model's inputs with fixed shapes (``source.resolve_inputs``).
        what: how messages name the folder, e.g. ``"--calib"``.
        options: mean, std and layout.

    Returns:
        Samples whose sha256 is that of the stacked tensor (so two folders of the same pictures are the same
        data), with the preprocessing recorded.

    Raises:
        InputError: not an image model (see ``image_input``); no images; an unreadable image (naming the file);
            an image count that is not a multiple of the batch; --mean/--std for a uint8 input or of the wrong
            length.
    """
    folder = Path(folder)
    options.check()
    target = image_input(model, inputs, options.layout, what)
    spec = target.spec
    if spec.dtype == np.uint8 and (options.mean is not None or options.std is not None):
        raise InputError(
            f"--mean/--std: {model}'s input {spec.name!r} is uint8, fed the pixels as they are (0-255); "
            "normalisation is for float32 inputs"
        )
    mean = _per_channel(options.mean, DEFAULT_MEAN, target.channels, "--mean")
    std = _per_channel(options.std, DEFAULT_STD, target.channels, "--std")
    images, skipped = _list_images(folder, what)
    batch = int(spec.shape[0])
    if len(images) % batch:
        raise InputError(
            f"{what} {folder}: {len(images)} images; expected a multiple of {batch}, the batch of the model's "
            f"input {spec.name!r} ({spec.shape_text()}): add {batch - len(images) % batch} or remove "
            f"{len(images) % batch}"
        )
    pixels = np.stack([_pixels(p, target) for p in images])  # N x H x W x C, uint8
    # uint8 inputs take the pixels as they are; float32 inputs (pixel - mean) / std.
    data = pixels if spec.dtype == np.uint8 else ((pixels.astype(np.float32) - mean) / std).astype(np.float32)
    if target.layout is Layout.NCHW:
        data = np.ascontiguousarray(data.transpose(0, 3, 1, 2))
    sha = hashlib.sha256(data.tobytes()).hexdigest()
    preprocessing = {
        "images": len(images),
        "skipped": skipped,
        "layout": target.layout.value,
        "size": [target.height, target.width],
        "channels": "grey" if target.channels == 1 else "RGB",
        "resize": "stretched to the input (area when shrinking, bilinear when enlarging), no crop",
        "mean": mean.tolist() if spec.dtype != np.uint8 else None,
        "std": std.tolist() if spec.dtype != np.uint8 else None,
        "dtype": str(spec.dtype),
    }
    return Samples(folder, sha, {spec.name: data}, len(images), preprocessing)


def read_data(path: Path, model: Path, inputs: Sequence[TensorSpec], what: str, options: ImageOptions) -> Samples:
    """``--calib`` / ``--eval``: a folder of images, or a ``.npz`` of tensors (taken as they are).

    Raises:
        InputError: as ``read_image_folder`` or ``feeds.read_samples``.
    """
    path = Path(path)
    if path.is_dir():
        return read_image_folder(path, model, inputs, what, options)
    return read_samples(path, inputs, what)
