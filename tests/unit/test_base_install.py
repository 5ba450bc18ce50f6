"""``pip install edge-deploy`` (no extra) is enough for the argparse tree: building every command's parser
imports no third-party module beyond the base dependencies of pyproject.toml; the extras' libraries load only
when a command runs."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
before = set(sys.modules)
from edge_deploy.cli import build_parser
build_parser().format_help()
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def test_the_command_tree_imports_only_the_standard_library_and_the_base_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {Requirement(r).name.replace("-", "_") for r in project["dependencies"]}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    imported = set(json.loads(done.stdout))
    own = {"edge", "edge_deploy", "converters", "fleet"}
    third_party = imported - set(sys.stdlib_module_names) - own - {m for m in imported if m.startswith("_")}
    assert third_party <= base, f"imported by building the parser, not a base dependency: {sorted(third_party - base)}"
