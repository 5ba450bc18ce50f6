"""edge-deploy's Python API (docs/python-api.md), and the ``edge-deploy`` command line (``edge_deploy.cli``).

    import edge_deploy as ed

    with ed.open_face_pipeline("out/face") as pipeline:
        gallery = ed.Gallery.load("out/gallery.npz")
        faces = ed.recognize_image(pipeline, gallery, ed.load_image("group.jpg"))

Every name is imported on first use: ``import edge_deploy`` loads only ``edge``'s small top module, so on a
Pi (the ``device`` extra) neither the converters nor torch are ever imported; ``convert_face``,
``convert_slm`` and ``convert_model`` import the converters when they are called (the ``convert`` extra).
Errors are ``edge.errors``' types, all ``EdgeDeployError``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from edge import __version__

if TYPE_CHECKING:
    from edge.errors import (
        BundleError,
        ConversionError,
        EdgeDeployError,
        InferenceError,
        InputError,
        MissingDependencyError,
        ProfileError,
        TelemetryError,
        ValidationError,
    )
    from edge.face.gallery import Gallery
    from edge.face.models import open_face_pipeline
    from edge.face.recognize import recognize_image
    from edge.imageio import load_image
    from edge.profiles import load_profile
    from edge.progress import StepProgress
    from edge.text.generator import TextGenerator
    from edge.text.sampling import SamplingConfig
    from edge_deploy.api import convert_face, convert_model, convert_slm
    from fleet.store import open_store

#: Public name -> the module that defines it.
_HOMES = {
    "open_face_pipeline": "edge.face.models",
    "Gallery": "edge.face.gallery",
    "load_image": "edge.imageio",
    "recognize_image": "edge.face.recognize",
    "TextGenerator": "edge.text.generator",
    "SamplingConfig": "edge.text.sampling",
    "open_store": "fleet.store",
    "convert_face": "edge_deploy.api",
    "convert_slm": "edge_deploy.api",
    "convert_model": "edge_deploy.api",
    "load_profile": "edge.profiles",
    "StepProgress": "edge.progress",
    **{
        name: "edge.errors"
        for name in (
            "EdgeDeployError",
            "ProfileError",
            "InputError",
            "ConversionError",
            "ValidationError",
            "BundleError",
            "InferenceError",
            "TelemetryError",
            "MissingDependencyError",
        )
    },
}

__all__ = [
    "__version__",
    "open_face_pipeline",
    "Gallery",
    "load_image",
    "recognize_image",
    "TextGenerator",
    "SamplingConfig",
    "open_store",
    "convert_face",
    "convert_slm",
    "convert_model",
    "load_profile",
    "StepProgress",
    "EdgeDeployError",
    "ProfileError",
    "InputError",
    "ConversionError",
    "ValidationError",
    "BundleError",
    "InferenceError",
    "TelemetryError",
    "MissingDependencyError",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'edge_deploy' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
