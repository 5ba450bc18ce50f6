"""Face alignment: cut the 150x150 chip dlib's ResNet embedder was trained on, from five landmarks.

dlib's ``get_face_chip_details`` (dlib/image_transforms/interpolation.h, dlib 19.x/20.x) fits a similarity
transform from a template ("mean face") to the detected landmarks and samples the chip with bilinear
interpolation, after an image pyramid has shrunk the source to within 2x of the chip's scale. We do the
same with the five points every detector of ours returns (``LANDMARK_NAMES``: eye centres, nose tip, mouth
corners), taking their template from the same mean face.

The bilinear step has two implementations. ``exact=True`` is dlib's arithmetic in numpy, byte for byte
equal to ``dlib.get_face_chip``. The default samples with OpenCV's ``warpAffine`` on float32 values and
truncates as dlib does: the alignment stage of a one-face frame on emulated Cortex-A72 went from 17.1 M to
11.5 M instructions (docs/benchmarks.md, ``arm-frame``, counted at f479308 and 9bce2b0), and it is one grey
level off dlib's chip in 26 of the 3.9 million values of the evaluation set's 58 faces
(``CHIP_TOLERANCE``). A chip that leaves the image always takes the exact path: dlib blacks a pixel with
any neighbour outside, a border rule OpenCV does not have.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from edge.errors import InputError

#: dlib's mean face shape, points 17..67 of the 68-point model, x and y in [0, 1] of the face box.
#: Copied verbatim from ``get_face_chip_details`` in dlib/image_transforms/interpolation.h
#: (``mean_face_shape_x`` / ``mean_face_shape_y``, "Average positions of face points 17-67").
_MEAN_FACE_X = (
    0.000213256, 0.0752622, 0.18113, 0.29077, 0.393397, 0.586856, 0.689483, 0.799124,
    0.904991, 0.98004, 0.490127, 0.490127, 0.490127, 0.490127, 0.36688, 0.426036,
    0.490127, 0.554217, 0.613373, 0.121737, 0.187122, 0.265825, 0.334606, 0.260918,
    0.182743, 0.645647, 0.714428, 0.793132, 0.858516, 0.79751, 0.719335, 0.254149,
    0.340985, 0.428858, 0.490127, 0.551395, 0.639268, 0.726104, 0.642159, 0.556721,
    0.490127, 0.423532, 0.338094, 0.290379, 0.428096, 0.490127, 0.552157, 0.689874,
    0.553364, 0.490127, 0.42689,
)  # fmt: skip
_MEAN_FACE_Y = (
    0.106454, 0.038915, 0.0187482, 0.0344891, 0.0773906, 0.0773906, 0.0344891,
    0.0187482, 0.038915, 0.106454, 0.203352, 0.307009, 0.409805, 0.515625, 0.587326,
    0.609345, 0.628106, 0.609345, 0.587326, 0.216423, 0.178758, 0.179852, 0.231733,
    0.245099, 0.244077, 0.231733, 0.179852, 0.178758, 0.216423, 0.244077, 0.245099,
    0.780233, 0.745405, 0.727388, 0.742578, 0.727388, 0.745405, 0.780233, 0.864805,
    0.902192, 0.909281, 0.902192, 0.864805, 0.784792, 0.778746, 0.785343, 0.778746,
    0.784792, 0.824182, 0.831803, 0.824182,
)  # fmt: skip
_FIRST_POINT = 17  # the arrays above start at point 17 of the 68-point model

#: 68-point indices behind each of our five landmarks (in ``LANDMARK_NAMES`` order): the six points of
#: the image-left eye (36-41), of the image-right eye (42-47), the nose, the mouth corners (48, 54).
#: The nose is the midpoint of the tip (30) and the base (33): MTCNN's nose point sits between them
#: (measured: 80.4 px down a 150 px chip, where point 30 maps to 76.6 and point 33 to 87.8).
FIVE_POINT_SOURCES: tuple[tuple[int, ...], ...] = (
    (36, 37, 38, 39, 40, 41),
    (42, 43, 44, 45, 46, 47),
    (30, 33),
    (48,),
    (54,),
)

#: Weights of the five landmarks in the least-squares fit. face_recognition aligns on dlib's 5-point
#: model: two corners per eye and the nose base, nothing of the mouth. Weighting our eyes 2, nose 1 and
#: mouth corners 0.25 brings our chips closest to its chips. Chosen on the calibration photos (63 faces
#: of scikit-image's lfw_subset, never the evaluation set): mean ||ours - face_recognition|| descriptor
#: distance 0.172 with equal weights and the nose at point 30, 0.140 with these.
LANDMARK_WEIGHTS = (2.0, 2.0, 1.0, 0.25, 0.25)

#: dlib's own template for its 5-point landmark model, in the unit face box, in that model's point order
#: (image-right eye outer/inner corner, image-left eye outer/inner corner, nose base). Copied verbatim
#: from ``get_face_chip_details`` in dlib/image_transforms/interpolation.h (the ``num_parts() == 5`` branch).
DLIB5_TEMPLATE = (
    (0.8595674595992, 0.2134981538014),
    (0.6460604764104, 0.2289674387677),
    (0.1205750620789, 0.2137274526848),
    (0.3340850613712, 0.2290642403242),
    (0.4901123135679, 0.6277975316475),
)

#: Chip size and padding dlib's face_recognition_model_v1.compute_face_descriptor uses.
DLIB_CHIP_SIZE = 150
DLIB_CHIP_PADDING = 0.25

#: How far the default (OpenCV) chip may be from dlib's exact one, as ``tests/integration/test_align.py``
#: checks it on every face of the evaluation set: at most 1 grey level, in at most this share of the values
#: (measured: 26 of 3,915,000 values, 6.6e-6). OpenCV reads a sample's weights from a table on a 1/32-pixel
#: grid where dlib uses the exact coordinate; after truncation that rarely changes a byte.
CHIP_TOLERANCE = (1, 1e-4)


def five_points_from_68(points68: np.ndarray) -> np.ndarray:
    """Reduce 68 dlib landmarks to our five (eye centres, nose tip, mouth corners).

    Args:
        points68: array [68, 2] of (x, y).

    Returns:
        float64 array [5, 2] in ``LANDMARK_NAMES`` order.

    Raises:
        InputError: if the array is not [68, 2].
    """
    pts = np.asarray(points68, dtype=np.float64)
    if pts.shape != (68, 2):
        raise InputError(f"68-point landmarks: shape {pts.shape}; expected (68, 2)")
    return np.stack([pts[list(idx)].mean(axis=0) for idx in FIVE_POINT_SOURCES])


def template_points(size: int = DLIB_CHIP_SIZE, padding: float = DLIB_CHIP_PADDING) -> np.ndarray:
    """Where the five landmarks sit in a ``size`` x ``size`` chip, from dlib's mean face.

    Each mean-face point p in [0, 1] is mapped as dlib does: ``(padding + p) / (2 * padding + 1) * size``.

    Args:
        size: chip side in pixels.
        padding: margin around the face, as a fraction of the face box.

    Returns:
        float64 array [5, 2] of (x, y) in chip pixels, in ``LANDMARK_NAMES`` order.
    """
    mean = np.stack([_MEAN_FACE_X, _MEAN_FACE_Y], axis=1)  # point i is row i - 17
    unit = np.stack([mean[[i - _FIRST_POINT for i in idx]].mean(axis=0) for idx in FIVE_POINT_SOURCES])
    return (padding + unit) / (2.0 * padding + 1.0) * size


def similarity_transform(src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Least-squares similarity transform (rotation, uniform scale, translation; no reflection).

    Umeyama's method, as dlib's ``find_similarity_transform``, optionally with per-point weights.

    Args:
        src: array [N, 2] of points, N >= 2.
        dst: array [N, 2] of the points they should map to.
        weights: optional non-negative [N]; equal weights by default.

    Returns:
        float64 matrix [2, 3] ``M`` with ``dst ~= M[:, :2] @ src + M[:, 2]``.
    """
    return _fit_to(_centred(src, weights), dst)


def _centred(src: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The source side of ``similarity_transform``: normalised weights, weighted mean, centred points, variance."""
    src = np.asarray(src, dtype=np.float64)
    w = np.ones(len(src)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    mu_s = w @ src
    s_c = src - mu_s
    return w, mu_s, s_c, float(w @ (s_c**2).sum(axis=1))


def _fit_to(centred: tuple[np.ndarray, np.ndarray, np.ndarray, float], dst: np.ndarray) -> np.ndarray:
    """``similarity_transform`` from the source side ``_centred`` made (cached for a fixed template)."""
    w, mu_s, s_c, var_s = centred
    dst = np.asarray(dst, dtype=np.float64)
    mu_d = w @ dst
    d_c = dst - mu_d
    cov = (d_c * w[:, None]).T @ s_c
    u, sig, vt = np.linalg.svd(cov)
    fix = np.eye(2)
    # u and vt are orthogonal (det +-1): the 2x2 formula's sign is np.linalg.det's, at a tenth of its cost
    if (u[0, 0] * u[1, 1] - u[0, 1] * u[1, 0]) * (vt[0, 0] * vt[1, 1] - vt[0, 1] * vt[1, 0]) < 0:
        fix[1, 1] = -1.0  # would be a reflection: flip the weakest axis
    rot = u @ fix @ vt
    scale = float((sig * np.diag(fix)).sum() / var_s) if var_s > 0 else 1.0
    out = np.empty((2, 3))
    out[:, :2] = scale * rot
    out[:, 2] = mu_d - scale * rot @ mu_s
    return out


def _check_inputs(
    rgb: np.ndarray, landmarks: np.ndarray, size: int, padding: float, order: str = "LANDMARK_NAMES order"
) -> np.ndarray:
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise InputError(f"align_chip: image is {desc}; expected uint8 array [H, W, 3] (RGB)")
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InputError(f"align_chip: image has zero size {rgb.shape}")
    pts = np.asarray(landmarks, dtype=np.float64)
    if pts.shape != (5, 2):
        raise InputError(f"align_chip: landmarks have shape {pts.shape}; expected (5, 2) in {order}")
    if not np.all(np.isfinite(pts)):
        raise InputError(f"align_chip: landmarks contain NaN or infinity: {pts.tolist()}")
    if size < 2 or padding < 0:
        raise InputError(f"align_chip: size={size}, padding={padding}; expected size >= 2 and padding >= 0")
    return pts


def chip_to_image(template: np.ndarray, pts: np.ndarray, size: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Affine map from chip pixels to image pixels, built exactly as dlib's ``chip_details`` does."""
    return _chip_map(similarity_transform(template, pts, weights), size)


def _chip_map(tform: np.ndarray, size: int) -> np.ndarray:
    """``chip_to_image`` from the similarity transform template -> landmarks."""
    scale = math.hypot(tform[0, 0], tform[1, 0])
    cos, sin = tform[0, 0] / scale, tform[1, 0] / scale
    centre = tform[:, :2] @ np.array([size / 2.0, size / 2.0]) + tform[:, 2]
    # dlib builds rect = centered_drect(centre, size * scale, ...), whose width is size * scale - 1
    # (centered_drect decrements it), then maps chip pixel 0 to its left edge and pixel size-1 to its
    # right edge: one chip pixel spans (size * scale - 1) / (size - 1) image pixels. Measured on real
    # faces, this cut dlib-vs-ours mean pixel error from 3.5 (plain similarity) to 0.5.
    step = (size * scale - 1.0) / (size - 1)
    half = (size - 1) / 2.0
    lin = step * np.array([[cos, -sin], [sin, cos]])
    out = np.empty((2, 3))
    out[:, :2] = lin
    out[:, 2] = centre - lin @ np.array([half, half])
    return out


def align_chip(
    rgb: np.ndarray,
    landmarks: np.ndarray,
    size: int = DLIB_CHIP_SIZE,
    padding: float = DLIB_CHIP_PADDING,
    exact: bool = False,
) -> np.ndarray:
    """Cut the aligned face chip dlib's embedder expects.

    Args:
        rgb: uint8 image [H, W, 3], RGB.
        landmarks: array [5, 2] of (x, y) pixels in ``LANDMARK_NAMES`` order.
        size: chip side in pixels (150 for dlib's ResNet).
        padding: margin around the face as a fraction of the face box (0.25 as dlib).
        exact: dlib's bilinear arithmetic byte for byte; default: OpenCV's, within ``CHIP_TOLERANCE``.

    Returns:
        uint8 array [size, size, 3], RGB. Parts of the chip outside the image are black, as in dlib.

    Raises:
        InputError: if the image is not uint8 [H, W, 3] or the landmarks are not a finite [5, 2] array.
    """
    pts = _check_inputs(rgb, landmarks, size, padding)
    chip_to_img = chip_to_image(template_points(size, padding), pts, size, np.array(LANDMARK_WEIGHTS))
    return warp_chip(rgb, chip_to_img, size, exact)


def align_chip_dlib5(
    rgb: np.ndarray,
    points5: np.ndarray,
    size: int = DLIB_CHIP_SIZE,
    padding: float = DLIB_CHIP_PADDING,
    exact: bool = False,
) -> np.ndarray:
    """Cut the chip from dlib's 5-point landmarks as ``dlib.get_face_chip(img, shape5)``: exactly with ``exact``,
    else within ``CHIP_TOLERANCE``.

    Args:
        rgb: uint8 image [H, W, 3], RGB.
        points5: array [5, 2] in dlib's 5-point model order (see ``DLIB5_TEMPLATE``), e.g. from
            ``edge.face.shape5.ShapePredictor``.
        size: chip side in pixels.
        padding: margin around the face as a fraction of the face box.
        exact: dlib's bilinear arithmetic byte for byte; default: OpenCV's, within ``CHIP_TOLERANCE``.

    Returns:
        uint8 array [size, size, 3], RGB.

    Raises:
        InputError: if the image is not uint8 [H, W, 3] or the points are not a finite [5, 2] array.
    """
    pts = _check_inputs(rgb, points5, size, padding, order="dlib's 5-point order")
    return warp_chip(rgb, _chip_map(_fit_to(_dlib5_template(size, padding), pts), size), size, exact)


@functools.lru_cache(maxsize=8)
def _dlib5_template(size: int, padding: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """dlib's 5-point template in a ``size`` chip, centred for the fit (``_centred``), made once per size."""
    template = (padding + np.array(DLIB5_TEMPLATE)) / (2.0 * padding + 1.0) * size
    centred = _centred(template, None)
    for array in centred[:3]:
        array.flags.writeable = False  # shared by every call
    return centred


def warp_chip(rgb: np.ndarray, chip_to_img: np.ndarray, size: int, exact: bool = False) -> np.ndarray:
    """Sample a ``size`` x ``size`` chip through an affine chip-to-image map, as dlib's extract_image_chips.

    When one chip pixel spans more than two image pixels, the source is first halved with dlib's own
    pyramid_down<2> (5x5 [1 4 6 4 1] Gaussian, integer maths) until it spans at most two; plain bilinear
    sampling of a much larger face aliases. Coordinates go down the pyramid through dlib's point_down,
    which carries its small, known bias (x - 0.5, y + 0.5 source pixels per level) into the chip: we keep
    it because the embedder was trained on dlib's chips.

    Args:
        rgb: uint8 image [H, W, 3].
        chip_to_img: float matrix [2, 3] mapping chip pixel (u, v) to image pixel (x, y).
        size: chip side in pixels.
        exact: dlib's bilinear arithmetic (``_bilinear``) rather than OpenCV's (``_bilinear_opencv``).

    Returns:
        uint8 array [size, size, 3]; black where the chip leaves the image.
    """
    scale = math.hypot(chip_to_img[0, 0], chip_to_img[1, 0])
    rect_side = scale * (size - 1) + 1.0  # width of dlib's chip rectangle, see chip_to_image
    levels = 0
    while rect_side / 2.0 ** (levels + 1) > size:
        levels += 1
    # dlib crops the source to the chip's rotated rectangle grown by 2, 6, 14, ... pixels (grow*2 + 2 per
    # level) before building the pyramid; the crop's origin decides which pixels the pyramid samples.
    grow = 2.0
    for _ in range(levels):
        grow = grow * 2 + 2
    half = (rect_side - 1.0) / 2.0  # rect is centred on chip pixel (size-1)/2 with width rect_side - 1
    centre = chip_to_img[:, :2] @ np.full(2, (size - 1) / 2.0) + chip_to_img[:, 2]
    rot = chip_to_img[:, :2] / scale
    xs, ys = (centre + np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]]) * half @ rot.T).T.tolist()
    h, w = rgb.shape[:2]
    x0 = max(0, round(min(xs) - grow))
    y0 = max(0, round(min(ys) - grow))
    x1 = min(w, round(max(xs) + grow) + 1)
    y1 = min(h, round(max(ys) + grow) + 1)
    if x1 <= x0 or y1 <= y0:  # the chip lies wholly outside the image
        return np.zeros((size, size, 3), np.uint8)
    src = rgb[y0:y1, x0:x1]
    m = chip_to_img.copy()
    m[:, 2] -= (x0, y0)
    for _ in range(levels):
        src = pyramid_down_2(src)
        m = m / 2.0
        m[:, 2] -= (1.25, 0.75)  # dlib's pyramid_down<2>::point_down
    if exact or not _surely_inside(m, size, src.shape[0], src.shape[1]):  # False for a source under 2x2
        return _bilinear(src, m, size)
    return _bilinear_opencv(src, m, size)


def pyramid_down_2(img: np.ndarray) -> np.ndarray:
    """Halve an image exactly as dlib's pyramid_down<2> does (5x5 Gaussian, truncating integer maths).

    Output pixel (r, c) is centred on input pixel (2r + 2, 2c + 2); the output is ((H-3)//2, (W-3)//2).

    Args:
        img: uint8 image [H, W, C].

    Returns:
        uint8 image, empty (0 x 0) when H or W <= 8, as dlib.
    """
    h, w = img.shape[:2]
    if h <= 8 or w <= 8:
        return np.zeros((0, 0) + img.shape[2:], np.uint8)
    a = img.astype(np.uint32)
    nr, nc = (h - 3) // 2, (w - 3) // 2
    cols = [a[:, k : k + 2 * nc : 2] for k in range(5)]
    t = cols[0] + 4 * cols[1] + 6 * cols[2] + 4 * cols[3] + cols[4]
    rows = [t[k : k + 2 * nr : 2] for k in range(5)]
    out = rows[0] + 4 * rows[1] + 6 * rows[2] + 4 * rows[3] + rows[4]
    return (out // 256).astype(np.uint8)


def _bilinear(src: np.ndarray, m: np.ndarray, size: int) -> np.ndarray:
    """dlib's interpolate_bilinear: double maths, truncation to uint8, black if a neighbour is outside.

    Every chip pixel is computed (neighbours clamped into the image, the outside ones blacked afterwards),
    with dlib's expression in dlib's order, so the doubles and hence the truncated bytes are dlib's. The
    arithmetic runs on colour planes: numpy is several times faster on long rows than on pixels of three.
    """
    rows, cols, channels = src.shape
    if rows < 2 or cols < 2:
        return np.zeros((size, size, channels), np.uint8)
    grid = np.arange(size, dtype=np.float64)
    # x = m00 * u + m01 * v + m02 and y alike, summed in that order, in one array
    xy = (m[:, 0, None] * grid)[:, None, :] + (m[:, 1, None] * grid)[:, :, None]
    xy += m[:, 2, None, None]
    corners = np.floor(xy)
    fx, fy = np.subtract(xy, corners, out=xy).reshape(2, -1)
    left, top = corners
    outside = None
    if not _surely_inside(m, size, rows, cols):
        outside = ((left < 0) | (top < 0) | (left + 1 >= cols) | (top + 1 >= rows)).ravel()
        # there any neighbour will do: those pixels are blacked below
        left, top = np.clip(left, 0, cols - 2), np.clip(top, 0, rows - 2)
    corner = (top * cols + left).astype(np.intp).ravel()  # whole numbers far below 2**53: exact
    planes = src.transpose(2, 0, 1).reshape(channels, rows * cols)
    # top-left, top-right, bottom-left, bottom-right: the same corners taken from the planes shifted by 0, 1,
    # cols, cols + 1 (no index arrays to build); they are in range, and a mode other than "raise" lets take
    # write into ``out`` without a buffer
    near = np.empty((4, channels, size * size), np.uint8)
    for k, shift in enumerate((0, 1, cols, cols + 1)):
        np.take(planes[:, shift:], corner, axis=1, out=near[k], mode="wrap")
    tl, tr, bl, br = near.astype(np.float64)
    # (1 - fy) * ((1 - fx) * tl + fx * tr) + fy * ((1 - fx) * bl + fx * br), in place (fresh arrays of this
    # size cost page faults): the same products and sums, so the same doubles
    gx = 1 - fx
    tl *= gx
    tr *= fx
    tl += tr
    bl *= gx
    br *= fx
    bl += br
    tl *= 1 - fy
    bl *= fy
    val = np.add(tl, bl, out=tl)
    # A convex mix of bytes lies in [0, 255 + a few ulps]: truncation gives dlib's clamped byte without a clip.
    # Plane by plane into the pixel-interleaved chip: a third of the time of one transposed copy.
    out = np.empty((size * size, channels), np.uint8)
    for c in range(channels):
        out[:, c] = val[c]
    if outside is not None:
        out[outside] = 0
    return out.reshape(size, size, channels)


def _bilinear_opencv(src: np.ndarray, m: np.ndarray, size: int) -> np.ndarray:
    """``_bilinear`` by OpenCV for a chip whose every pixel has its four neighbours inside ``src``.

    The samples are float32 (the source converted once, the weights OpenCV's 1/32-pixel table), truncated to
    bytes as dlib truncates its doubles: the same bytes but for ``CHIP_TOLERANCE``. Rounding instead (OpenCV's
    own uint8 path) would move half the values by one grey level.
    """
    import cv2

    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP  # m maps chip pixels to source pixels
    chip = cv2.warpAffine(src.astype(np.float32), m, (size, size), flags=flags, borderMode=cv2.BORDER_REPLICATE)
    return chip.astype(np.uint8)  # in [0, 255]: a convex mix of bytes; astype truncates


def _surely_inside(m: np.ndarray, size: int, rows: int, cols: int) -> bool:
    """True if every chip pixel's four neighbours lie in the ``rows`` x ``cols`` source, from the grid's corners.

    x and y are affine in the chip pixel, so they are extreme at the chip's corners; computed there the way
    ``_bilinear`` computes them (in Python floats: the same IEEE doubles), they differ from the grid's values
    by a few ulps at most, far inside the 1e-6 margin. False means "look pixel by pixel" (some may be inside).
    """
    (a, b, c), (d, e, f) = m.tolist()
    end = size - 1.0
    xs = [a * u + b * v + c for u in (0.0, end) for v in (0.0, end)]
    ys = [d * u + e * v + f for u in (0.0, end) for v in (0.0, end)]
    margin = 1e-6
    return min(xs) >= margin and min(ys) >= margin and max(xs) < cols - 1 - margin and max(ys) < rows - 1 - margin
