"""edge_deploy.build_commands.web_runtime_on_first_use: onnxruntime-web comes on the first browser build."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge.errors import MissingDependencyError
from edge_deploy.build_commands import web_runtime_on_first_use


def _checkout(root: Path, script: str | None) -> Path:
    """A checkout's web/ without node_modules, and (if given) its scripts/setup_web.sh."""
    (root / "web").mkdir(parents=True)
    if script is not None:
        (root / "scripts").mkdir()
        (root / "scripts" / "setup_web.sh").write_text(script)
    return root / "web"


def test_without_a_set_up_script_the_missing_package_is_named(tmp_path):
    web = _checkout(tmp_path, None)
    with pytest.raises(MissingDependencyError) as err:
        web_runtime_on_first_use(web)
    assert str(err.value).startswith(
        f"{web / 'node_modules' / 'onnxruntime-web'}: onnxruntime-web (npm) is not installed"
    )


def test_the_set_up_script_is_run_with_who_needs_it_and_its_failure_named(tmp_path, capfd):
    web = _checkout(tmp_path, 'echo "called with: $*" >&2\nexit 3\n')
    with pytest.raises(MissingDependencyError) as err:
        web_runtime_on_first_use(web, who="a unit test")
    script = tmp_path / "scripts" / "setup_web.sh"
    assert str(err.value) == (f"{script} --page failed (exit code 3, output above); onnxruntime-web is not installed")
    assert "called with: --page a unit test" in capfd.readouterr().err


def test_a_script_that_installs_nothing_leaves_the_package_error(tmp_path):
    web = _checkout(tmp_path, "exit 0\n")
    with pytest.raises(MissingDependencyError) as err:
        web_runtime_on_first_use(web)
    assert "onnxruntime-web (npm) is not installed" in str(err.value)
