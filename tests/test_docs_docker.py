"""Executable docs (issue 30): README's "Running experiments" and docs/tasks.md's walk-through
run as written, in a folder of their own, with the base image missing at the start.

The commands are read from the Markdown itself, never copied here. In each section every
fenced block is one of:

- ``sh`` (or no language): each line that is not blank or a ``#`` comment is a command;
- ``console``: each ``$ `` line is a command, the lines after it its expected output (the
  words each begins with must appear in what the command printed);
- a block right after ``<!-- docs-test: file PATH -->``: written to PATH;
- a block right after ``<!-- docs-test: edit PATH: replace def NAME -->``: replaces method
  NAME of PATH (what the reader is told to do by hand);
- a block right after ``<!-- docs-test: skip: WHY -->``: not run.

Any other block in those sections fails the test: the docs must say what it is. Commands run
with bash from the test's folder (``.venv`` there links to this interpreter's environment,
``$SWARMLAB`` is this checkout, the environment's ``bin`` is first on ``PATH`` as when it is
activated) with ``SWARMLAB_BASE_IMAGE`` a fresh tag: the first command that needs the base image
must make it (issue 30's part 1), and that image is removed at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")
EXPECTED_WORDS = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z]")
MAKES_BASE = "making the base image"


@dataclass
class Step:
    kind: str  # "run", "file", "edit"
    text: str  # the command, the file's text or the method's text
    path: str = ""
    expect: tuple[str, ...] = ()


def section(markdown: Path, heading: str) -> list[str]:
    """The lines of ``heading``'s section (up to the next heading of its level or above)."""
    lines = markdown.read_text().splitlines()
    level = heading.split(" ")[0]
    start = lines.index(heading) + 1
    end = next(
        (
            i
            for i in range(start, len(lines))
            if re.match(rf"^#{{1,{len(level)}}} ", lines[i]) and not _in_fence(lines, i)
        ),
        len(lines),
    )
    return lines[start:end]


def _in_fence(lines: list[str], index: int) -> bool:
    return sum(1 for line in lines[:index] if FENCE.match(line)) % 2 == 1


def steps(lines: list[str], where: str) -> list[Step]:
    """The section's blocks as steps, in order (see the module's docstring)."""
    out: list[Step] = []
    marker: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        found = MARKER.search(line)
        if found:
            marker = (found.group(1), found.group(2))
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if line.strip():
                marker = None  # a marker binds only the block right after it
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        lang, body = fence.group(1), lines[i + 1 : end]
        i = end + 1
        if marker is not None:
            kind, arg = marker
            marker = None
            if kind == "skip":
                assert arg.startswith(":") and arg[1:].strip(), f"{where}: skip needs a reason"
                continue
            if kind == "file":
                out.append(Step("file", "\n".join(body) + "\n", path=arg))
                continue
            if kind == "edit":
                path, _, what = arg.partition(":")
                name = re.fullmatch(r"\s*replace def (\w+)\s*", what)
                assert name, f"{where}: edit marker {arg!r}: say 'PATH: replace def NAME'"
                out.append(Step("edit", "\n".join(body) + "\n", path=f"{path}:{name.group(1)}"))
                continue
            raise AssertionError(f"{where}: unknown docs-test marker {kind!r}")
        if lang == "console":
            for text in body:
                if text.startswith("$ "):
                    out.append(Step("run", text[2:]))
                elif text.strip() and out and out[-1].kind == "run":
                    out[-1].expect += (text,)
        elif lang in ("", "sh", "bash"):
            out += [Step("run", t) for t in body if t.strip() and not t.lstrip().startswith("#")]
        else:
            raise AssertionError(
                f"{where}: a ```{lang} block without a docs-test marker (file, edit or skip)"
            )
    return out


def replace_method(source: str, name: str, method: str) -> str:
    """``source`` with method ``name`` (an indented ``def``, up to the next one at its
    indentation or less) replaced by ``method``."""
    lines = source.splitlines(keepends=True)
    start = next(i for i, t in enumerate(lines) if re.match(rf"^(\s+)def {name}\(", t))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(
        (
            j
            for j in range(start + 1, len(lines))
            if lines[j].strip() and len(lines[j]) - len(lines[j].lstrip()) <= indent
        ),
        len(lines),
    )
    return (
        "".join(lines[:start]) + method + ("\n" if end < len(lines) else "") + "".join(lines[end:])
    )


DOCS = {
    "readme": (REPO / "README.md", "## Running experiments"),
    "tasks": (REPO / "docs" / "tasks.md", "## Walk-through: a task from scratch"),
}


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_say_what_each_block_is(doc):
    """No engine needed: the sections parse, and each runs something."""
    markdown, heading = DOCS[doc]
    found = steps(section(markdown, heading), f"{markdown.name} {heading}")
    assert any(s.kind == "run" for s in found)


@pytest.fixture
def throwaway_base(docker_client):
    """A base image tag nobody else uses, missing at the start, removed at the end."""
    tag = f"swarmlab-base-docs:{uuid.uuid4().hex[:12]}"
    assert not docker_client.images.list(name=tag)
    yield tag
    for image in docker_client.images.list(name=tag):
        docker_client.images.remove(image.id, force=True)


def run_docs(doc: str, folder: Path, base_tag: str) -> tuple[list[tuple[str, float]], bool]:
    """Every step of ``doc``'s section, in ``folder``: (command, seconds) for each command, and
    whether one said it made the base image."""
    markdown, heading = DOCS[doc]
    found = steps(section(markdown, heading), f"{markdown.name} {heading}")
    (folder / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    env = dict(os.environ)
    env.update(
        SWARMLAB=str(REPO),
        SWARMLAB_BASE_IMAGE=base_tag,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=sys.prefix,
        # This checkout's code, wherever the environment's editable install points.
        PYTHONPATH=str(REPO),
        # A reader's git knows who they are.
        GIT_AUTHOR_NAME="docs test",
        GIT_AUTHOR_EMAIL="docs@example.invalid",
        GIT_COMMITTER_NAME="docs test",
        GIT_COMMITTER_EMAIL="docs@example.invalid",
    )
    times: list[tuple[str, float]] = []
    made_base = False
    for step in found:
        if step.kind == "file":
            target = folder / step.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.text)
            continue
        if step.kind == "edit":
            path, name = step.path.rsplit(":", 1)
            target = folder / path
            target.write_text(replace_method(target.read_text(), name, step.text))
            continue
        started = time.monotonic()
        out = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", step.text],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        took = time.monotonic() - started
        times.append((step.text, took))
        printed = out.stdout + out.stderr
        print(f"[{took:6.1f} s] {step.text}\n{printed[-3000:]}")
        assert out.returncode == 0, f"{doc}: `{step.text}` exited {out.returncode}:\n{printed}"
        assert "registry" not in printed, f"{doc}: `{step.text}` reached for a registry"
        for line in step.expect:
            words = EXPECTED_WORDS.match(line)
            if words:
                assert words.group(0) in printed, f"{doc}: `{step.text}` never said {line!r}"
        made_base = made_base or MAKES_BASE in printed
    return times, made_base


@pytest.mark.docker
@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_run_as_written(doc, tmp_path, throwaway_base, docker_client):
    times, made_base = run_docs(doc, tmp_path, throwaway_base)
    # The base image was missing and a command made it, saying so (never a registry error).
    assert made_base, f"{doc}: no command said {MAKES_BASE!r}"
    assert docker_client.images.get(throwaway_base)
    print("\n".join(f"{took:6.1f} s  {command}" for command, took in times))
