"""The README and the docs site cannot drift from the code.

- Every example block (``bash``, ``sh``, ``shell``, ``console``, ``python``, ``py``) of ``README.md`` and
  ``docs/**/*.md`` runs: the blocks of one page in order, in one fresh directory holding a link to the
  repository's ``examples/``, with this interpreter's ``bin`` first on ``PATH``. An HTML comment on the line
  before a block changes that: ``<!-- not run: REASON -->`` (a reason is required), ``<!-- run: spark -->``
  (the block needs Spark, so its page runs in the spark tier instead of the fast one), ``<!-- file: NAME -->``
  (a Python block written to ``NAME`` for the blocks after it, and compiled). A block fails on a non-zero
  exit or on a traceback on stderr (a normal run prints none).
- Every ``statekeep`` command line in a block names a real command, and each of its flags exists in that
  command's parser; every flag named in the text (```--flag```) exists in some command's parser, unless it
  belongs to another program (:data:`OTHER_PROGRAMS_FLAGS`).
- README's links point at files of the repository (and headings that exist), every ``$STATEKEEP_...`` variable
  the docs name is read by the code, and the README stays short.

The strict docs build (``scripts/docs``, run by ``scripts/test``) checks the links between the site's pages.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from statekeep.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 200

SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py"}
MARKER = re.compile(r"^<!--\s*(not run|run|file)\s*:\s*(.*?)\s*-->$")
#: flags the docs name that belong to other programs than ``statekeep`` (its scripts, its benchmarks)
OTHER_PROGRAMS_FLAGS = {
    "scripts/test": {"--fast"},
    "scripts/docs": {"--serve", "--no-install"},
    "benchmarks": {"--rounds", "--profile", "--startup", "--packing", "--rates", "--seconds", "--events", "--files",
                   "--sessions", "--variants", "--warm-events", "--queries", "--backends", "--keys"},
}
#: code spans starting so are command lines of other programs, whose flags are theirs
OTHER_PROGRAMS = ("python ", "scripts/", "pip ", "curl ", "apt-get ", "sphinx-build ", "pulsar-admin ",
                  "kubectl ")
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "<", "2>&1"}


def pages() -> list[Path]:
    """README and every Markdown page of the site (generated and built files aside)."""
    found = sorted(p for p in DOCS.rglob("*.md") if not {"_build", "_generated"} & set(p.relative_to(DOCS).parts))
    return [README, *found]


@dataclass
class Block:
    page: Path
    line: int          # of the opening fence, 1-based
    language: str
    text: str
    marker: str | None  # "not run", "run" or "file"
    argument: str      # the marker's reason, tier or file name

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page (MyST directives such as ```{toctree} aside), each with the HTML comment
    marker on the line before it, if any."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, info = fence.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        text = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        if not info.startswith("{"):
            found.append(Block(page, i + 1, info.lower(), text, marker[1] if marker else None,
                               marker[2] if marker else ""))
        i = end + 1
    return found


def examples(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language in SHELL | PYTHON]


def needs_spark(page: Path) -> bool:
    return any(b.marker == "run" for b in examples(page))


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


FAST_PAGES = [p for p in pages() if examples(p) and not needs_spark(p)]
SPARK_PAGES = [p for p in pages() if needs_spark(p)]


# ---- markers -----------------------------------------------------------------------------------


def test_every_example_block_is_run_or_says_why_not():
    problems = []
    for page in pages():
        for block in examples(page):
            if block.marker == "not run" and not block.argument:
                problems.append(f"{block}: 'not run' without a reason")
            elif block.marker == "run" and block.argument != "spark":
                problems.append(f"{block}: unknown tier {block.argument!r} (only 'run: spark')")
            elif block.marker == "file" and (block.language not in PYTHON or not block.argument):
                problems.append(f"{block}: 'file: NAME' is for Python blocks, with a file name")
            elif block.marker == "file":  # it runs through a later block that is run, or not at all
                later = [b for b in examples(page) if b.line > block.line and b.marker in (None, "run")]
                if not any(block.argument in b.text for b in later):
                    problems.append(f"{block}: no block run after it uses {block.argument}")
    assert problems == []


def test_the_pages_have_examples_in_both_tiers():
    assert FAST_PAGES and SPARK_PAGES and README in SPARK_PAGES


# ---- running the examples ------------------------------------------------------------------------


def run_page(page: Path, tmp_path: Path, env: dict[str, str], timeout: float) -> None:
    """Run the page's example blocks in order in ``tmp_path`` (see the module docstring)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in {**os.environ, **env}.items() if not k.startswith("STATEKEEP_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CONFIG_HOME"] = str(tmp_path / ".config")  # no client.conf of this machine's
    for n, block in enumerate(examples(page)):
        if block.marker == "not run":
            continue
        if block.marker == "file":
            (tmp_path / block.argument).write_text(block.text)
            compile(block.text, block.argument, "exec")
            continue
        if block.language in PYTHON:
            script = tmp_path / f".block-{n}.py"
            script.write_text(block.text)
            argv = [sys.executable, str(script)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        where = f"the example at {block} failed (exit {done.returncode})"
        assert done.returncode == 0, f"{where}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"the example at {block} printed a traceback:\n{done.stderr}"


@pytest.mark.parametrize("page", FAST_PAGES, ids=page_id)
def test_examples_run(page, tmp_path):
    run_page(page, tmp_path, {}, timeout=120)


@pytest.mark.parametrize("page", SPARK_PAGES, ids=page_id)
def test_spark_examples_run(page, tmp_path, spark_env):
    run_page(page, tmp_path, spark_env, timeout=600)


# ---- flags ----------------------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...],
                                                                                  argparse.ArgumentParser]:
    """Every command's parser by its words (``("functions", "localrun")``), the top level's as ``()``."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(commands(sub, (*path, name)))
    return found


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    """The flags a command offers (those its help hides, only to refuse them, are not offered)."""
    return {flag for action in parser._actions if action.help is not argparse.SUPPRESS
            for flag in action.option_strings}


COMMANDS = commands(build_parser())
ALL_FLAGS = {flag for parser in COMMANDS.values() for flag in flags_of(parser)}


def command_lines(block: Block) -> list[list[str]]:
    """The ``statekeep ...`` invocations of a shell block, as words up to the first shell operator."""
    text = block.text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote in prose-like lines: nothing to check there
            continue
        for i, word in enumerate(words):
            if Path(word).name == "statekeep" and (i == 0 or words[i - 1] in SHELL_OPERATORS | {"$"}):
                rest = words[i + 1:]
                end = next((j for j, w in enumerate(rest) if w in SHELL_OPERATORS or w.startswith(">")), len(rest))
                found.append(rest[:end])
    return found


def check_command(words: list[str]) -> list[str]:
    """What is wrong with ``statekeep WORDS``: an unknown command, or flags its parser does not have."""
    path: tuple[str, ...] = ()
    for word in words:
        if (*path, word) in COMMANDS:
            path = (*path, word)
        elif not word.startswith("-"):
            break
    parser = COMMANDS[path]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions) and "--help" not in words:
        return [f"'statekeep {' '.join(words)}' names no complete command"]
    known = flags_of(parser)
    problems = []
    for word in words:
        flag = word.strip("[]|").split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", flag) and flag not in known:
            problems.append(f"'statekeep {' '.join(path)}' has no flag {flag}")
    return problems


def test_every_statekeep_command_in_the_docs_exists_with_its_flags():
    problems = []
    for page in pages():
        for block in blocks(page):
            if block.language in SHELL:
                problems += [f"{block}: {p}" for words in command_lines(block) for p in check_command(words)]
    assert problems == []


def inline_flags(page: Path) -> list[tuple[int, str, str]]:
    """(line, flag, the code span) for every flag named in a code span of the page's text."""
    found = []
    in_block = False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.strip().startswith(("```", "~~~")):
            in_block = not in_block
            continue
        if in_block:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            for flag in re.findall(r"(?:^|[\s/\[(|])(--?[A-Za-z][\w-]*)", span):
                found.append((n, flag, span))
    return found


def test_every_flag_the_text_names_exists():
    other = set().union(*OTHER_PROGRAMS_FLAGS.values())
    problems = []
    for page in pages():
        for line, flag, span in inline_flags(page):
            if flag in ALL_FLAGS or flag in other:
                continue
            if span.startswith(OTHER_PROGRAMS):
                continue  # a command line of another program
            problems.append(f"{page.relative_to(ROOT)}:{line}: {flag} (in `{span}`)")
    assert problems == []


def test_wrong_flags_are_caught():
    """The checks above are not vacuous: they refuse the flags the README used to name."""
    assert check_command(["functions", "localrun", "--max-retries", "3"])
    assert check_command(["functions", "create", "--skip-errors"])
    assert check_command(["functions", "localrun", "--url", "http://x"])
    assert not check_command(["functions", "localrun", "--max-message-retries", "3", "--skip-errors"])
    assert "--max-retries" not in ALL_FLAGS


# ---- links, variables, length ----------------------------------------------------------------------


def slug(heading: str) -> str:
    """A heading's anchor as MyST makes it (``myst_heading_anchors``)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower().replace("`", ""))
    return re.sub(r"\s", "-", text)


def anchors(page: Path) -> set[str]:
    lines = page.read_text().splitlines()
    found = {slug(line.lstrip("#")) for line in lines if re.match(r"^#{1,6} ", line)}
    found |= {m[1] for line in lines if (m := re.match(r"^\((.+)\)=$", line))}
    return found


def test_readme_links_resolve():
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if re.match(r"^[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else README
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{target}: no heading with that anchor")
    assert problems == []


def test_slug_matches_the_strict_builds_anchors():
    assert slug("Vectorized functions: `process_batch`") == "vectorized-functions-process_batch"
    assert slug("Batches larger than one transaction (ZooKeeper, etcd)") == \
        "batches-larger-than-one-transaction-zookeeper-etcd"


def test_every_environment_variable_named_is_read_by_the_code():
    code = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    named = {v for page in pages() for v in re.findall(r"\bSTATEKEEP_[A-Z_]+\b", page.read_text())}
    assert named and sorted(v for v in named if v not in code) == []


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES
