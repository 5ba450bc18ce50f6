"""README.md's command table names every CLI command, and only real ones; its relative links resolve.

The commands are read from the argparse tree ``edge_deploy.cli.build_parser`` builds, so a new command
without a README row (or a row for a removed command) fails here.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from edge_deploy.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def cli_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf command of ``parser``, as word tuples: ('convert', 'face'), ('serve-web',), ..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: set[tuple[str, ...]] = set()
            for name, sub in action.choices.items():
                found |= cli_commands(sub, (*prefix, name))
            return found
    return {prefix}


def table_commands(markdown: str, heading: str = "## Commands") -> list[str]:
    """The first cell of each row of the table under ``heading``: the `edge-deploy ...` synopsis."""
    section = markdown.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `edge-deploy ([^`]+)`", section, re.M)]


def command_of(synopsis: str, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """The command path a synopsis names: its leading words that are subcommands of the tree."""
    path: list[str] = []
    words = synopsis.split()
    current = parser
    while words:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[0] not in subs[0].choices:
            break
        current = subs[0].choices[words[0]]
        path.append(words.pop(0))
    return tuple(path)


def test_the_readme_command_table_and_the_cli_name_the_same_commands():
    parser = build_parser()
    synopses = table_commands(README.read_text(encoding="utf-8"))
    rows = [command_of(s, parser) for s in synopses]
    in_cli = cli_commands(parser)
    assert sorted(" ".join(c) for c in in_cli - set(rows)) == [], "CLI commands without a row in README.md"
    assert [s for s, c in zip(synopses, rows, strict=True) if c not in in_cli] == [], (
        "README.md rows that name no command"
    )
    assert len(rows) == len(set(rows)), "a command has two rows in README.md's command table"


def test_a_missing_row_and_an_unknown_command_are_seen():
    parser = build_parser()
    table = "\n## Commands\n\n| `edge-deploy demo` | x |\n| `edge-deploy convert face -o D` | x |\n"
    table += "| `edge-deploy teleport --now` | x |\n\n## Docs\n| `edge-deploy keygen` | x |\n"
    rows = [command_of(s, parser) for s in table_commands(table)]
    assert rows == [("demo",), ("convert", "face"), ()]
    assert ("serve-web",) in cli_commands(parser) and ("fleet", "rollout") in cli_commands(parser)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _broken(source: Path, target: str, base: Path) -> str | None:
    """Why ``target`` (a path, optionally with ``#anchor``, relative to ``base``) does not resolve, or None."""
    file, _, anchor = target.partition("#")
    dest = (base / file).resolve() if file else source
    if not dest.exists():
        return f"{source.name}: {target}: no such file"
    if anchor and dest.suffix == ".md":
        headings = re.findall(r"^#+ (.+)$", dest.read_text(encoding="utf-8"), re.M)
        if anchor not in {_slug(h) for h in headings}:
            return f"{source.name}: {target}: no such heading"
    return None


def broken_links(path: Path) -> list[str]:
    """Relative links of a markdown file whose file, or heading anchor, does not exist."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    return [why for t in targets if (why := _broken(path, t, path.parent))]


def broken_doc_references(path: Path, repo: Path = REPO) -> list[str]:
    """``docs/NAME.md#anchor`` references in a file's comments whose doc or heading does not exist."""
    found = re.findall(r"docs/[\w.-]+\.md(?:#[\w-]+)?", path.read_text(encoding="utf-8"))
    return [why for t in found if (why := _broken(path, t, repo))]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    files = [README, *sorted((REPO / "docs").glob("*.md"))]
    assert [b for f in files for b in broken_links(f)] == []


def test_every_doc_section_a_profile_comment_names_exists():
    profiles = sorted((REPO / "firmware_configs").glob("*.toml"))
    assert [b for f in profiles for b in broken_doc_references(f)] == []


def test_the_link_checker_sees_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Use it\n[ok](a.md#use-it) [gone](b.md) [bad](a.md#nope) [web](https://x.y)\n")
    assert broken_links(tmp_path / "a.md") == ["a.md: b.md: no such file", "a.md: a.md#nope: no such heading"]


def test_the_profile_reference_checker_sees_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Use it\n")
    (tmp_path / "p.toml").write_text("# see docs/a.md#use-it and docs/a.md#gone, docs/b.md\nkey = 1\n")
    assert broken_doc_references(tmp_path / "p.toml", tmp_path) == [
        "p.toml: docs/a.md#gone: no such heading",
        "p.toml: docs/b.md: no such file",
    ]


def test_the_readme_is_a_quick_start_of_at_most_150_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; keep it a quick start (150 at most), move detail to docs/"
