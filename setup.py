"""The wheel's layout; everything else is in pyproject.toml.

The repository's ``web/`` (the browser page), ``data/`` (the perplexity gate's text) and ``firmware_configs/``
(the target profiles) go into the wheel as package data under ``edge/_shipped/<folder>``, and the lock as
``edge/_shipped/constraints.txt``: ``edge.shipped`` finds them there when edge-deploy runs from an installed
wheel rather than a checkout.
"""

import shutil
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

#: package name -> (repository folder, the files of it the wheel carries). web/node_modules is not carried:
#: onnxruntime-web is installed from npm on first use, pinned by web/package-lock.json.
SHIPPED = {
    "edge._shipped.web": ("web", ["*.html", "*.css", "*.js", "*.mjs", "package.json", "package-lock.json"]),
    "edge._shipped.data": ("data", ["*.txt", "*.md"]),
    "edge._shipped.firmware_configs": ("firmware_configs", ["*.toml"]),
}
LOCK = "constraints.txt"
CODE = ["edge", "edge.*", "converters", "converters.*", "edge_deploy", "edge_deploy.*", "fleet", "fleet.*"]



class BuildPy(build_py):
    """Also puts the lock (constraints.txt, a file at the repository's root) at ``edge/_shipped/``: the Pi
    wheelhouse of an installed edge-deploy downloads with it. An editable install reads the checkout's."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib, "edge", "_shipped", LOCK)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(LOCK, target)


setup(
    cmdclass={"build_py": BuildPy},
    packages=[*find_namespace_packages(include=CODE, exclude=["*.__pycache__"]), *SHIPPED],
    package_dir={name: folder for name, (folder, _) in SHIPPED.items()},
    package_data={
        "edge": ["daemon/edge-deploy.service", "daemon/edge-deploy.example.toml", "bundle_files/*"],
        **{name: files for name, (_, files) in SHIPPED.items()},
    },
)
