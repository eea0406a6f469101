"""Token totals read from a coding agent's own session record.

``python -m analysis.tokens FILE [--format auto|claude_code|codex|gemini|mini_swe]`` prints one
JSON object: ``input`` (uncached input), ``cache_read``, ``cache_write``, ``output`` (every
generated token, reasoning included), ``reasoning`` (the part of ``output`` the record marks as
reasoning; 0 where the format does not say), ``requests`` (distinct API calls counted), ``format``,
``model`` (the one model, or null when there were several), ``models`` (the same counts per
model) and ``cost_estimate`` — the cost the CLI itself wrote into its record, if it wrote one,
labelled by ``cost_estimate_source``; it is the CLI's estimate, not a price computed here.

FILE may also be a directory: every ``*.json``/``*.jsonl`` file under it whose format matches
(``--format``, or the one format found there with ``auto``) is read, and the duplicate rules
below apply across the files too, so a resumed or forked session copied into a second file is
still counted once. Pass a whole Claude Code project directory to include subagent transcripts,
which newer Claude Code writes to ``<session>/subagents/*.jsonl``.

Each format is one agent CLI's (``agents.clis``, one module per CLI, registered by name): the
CLI module tells its records apart (format detection) and reads them, with the de-duplication
rules its records need (what a plain sum gets wrong), in its own docstring:
``agents/clis/claude_code.py``, ``codex.py``, ``gemini.py``, ``mini_swe.py``. This module finds
the files, asks the registry which CLI wrote each, and totals what that CLI's reader returns.

Bad input (a format that cannot be told or is unknown, a file that cannot be read, a record with
no usage in it) raises :class:`TokenRecordError`; the command prints it as one line on stderr
and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.clis import Client, cli_names, get_cli
from agents.usage import TokenRecordError, TokenUsage, UsageByModel, json_records, read_text

__all__ = [
    "FORMATS",
    "TokenRecordError",
    "TokenUsage",
    "detect_format",
    "formats",
    "main",
    "read_files",
    "read_usage",
    "summarise",
]

# The bundled CLIs' formats; :func:`formats` adds any CLI registered since.
FORMATS: tuple[str, ...] = tuple(cli_names())
_SUFFIXES = (".json", ".jsonl")
# Enough lines to get past a record's metadata to a line that names its format.
_SNIFF_LINES = 200


def formats() -> list[str]:
    """Every record format that can be read: each registered CLI's name."""
    return cli_names()


def _clis() -> list[Client]:
    return [get_cli(name) for name in cli_names()]


# -- format detection ------------------------------------------------------------------------


def _detect_file(path: Path) -> str | None:
    records = json_records(read_text(path))
    clis = _clis()
    if len(records) == 1:
        for cli in clis:
            if cli.claims_document(records[0]):
                return cli.name
    for obj in records[:_SNIFF_LINES]:
        for cli in clis:
            if cli.claims_line(obj):
                return cli.name
    return None


def _files_under(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in _SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _one_format(path: Path, found: set[str]) -> str:
    if len(found) == 1:
        return next(iter(found))
    if not found:
        raise TokenRecordError(f"no session record of a known format under {path}")
    raise TokenRecordError(
        f"{path} holds records of several formats ({', '.join(sorted(found))}); pass --format"
    )


def detect_format(path: str | Path) -> str:
    """Tell which CLI wrote a session record.

    Args:
        path: A record file, or a directory holding records of one format.

    Returns:
        One of :func:`formats`.

    Raises:
        TokenRecordError: The path cannot be read, or its format cannot be told (or, for a
            directory, it holds records of more than one format).
    """
    path = Path(path)
    if not path.exists():
        raise TokenRecordError(f"no such file or directory: {path}")
    if path.is_dir():
        return _one_format(path, {fmt for p in _files_under(path) if (fmt := _detect_file(p))})
    found = _detect_file(path)
    if found is None:
        raise TokenRecordError(
            f"cannot tell the format of {path}; pass --format {'|'.join(formats())}"
        )
    return found


# -- the public API --------------------------------------------------------------------------


def _read(path: Path, format: str) -> tuple[str, UsageByModel]:
    fmt, _, result = read_files(path, format)
    return fmt, result


def read_files(path: str | Path, format: str = "auto") -> tuple[str, list[Path], UsageByModel]:
    """Read a session record's usage, and say which files it was read from.

    ``runner.trajectories`` builds a seat's trajectory from the same files, so the trajectory
    and the token totals are one reading.

    Args:
        path: A record file, or a directory whose files of the format are summed.
        format: ``auto`` (detect), or one of :func:`formats`.

    Returns:
        The format, the files read, and the usage per model.

    Raises:
        TokenRecordError: As :func:`read_usage`.
    """
    path = Path(path)
    if format != "auto" and format not in formats():
        raise TokenRecordError(
            f"unknown format {format!r}; expected auto or one of {', '.join(formats())}"
        )
    if not path.exists():
        raise TokenRecordError(f"no such file or directory: {path}")
    if path.is_dir():
        # Sniff each file once: a project directory can hold hundreds of megabytes of records.
        detected = {p: _detect_file(p) for p in _files_under(path)}
        found = {fmt for fmt in detected.values() if fmt is not None}
        fmt = _one_format(path, found) if format == "auto" else format
        files = [p for p, found_fmt in detected.items() if found_fmt == fmt]
        if not files:
            raise TokenRecordError(f"no {fmt} session record under {path}")
    else:
        fmt = detect_format(path) if format == "auto" else format
        files = [path]
    cli = get_cli(fmt)
    result = cli.read_records(files)
    if not result.usage:
        raise TokenRecordError(f"no {fmt} token usage found in {path}")
    return fmt, files, result


def read_usage(path: str | Path, format: str = "auto") -> dict[str, TokenUsage]:
    """Read a session record's normalised token usage, per model.

    Args:
        path: A record file, or a directory whose files of the format are summed.
        format: ``auto`` (detect), or one of :func:`formats`.

    Returns:
        The usage of each model, keyed by the model name as the record spells it
        (``unknown`` where the record does not name one).

    Raises:
        TokenRecordError: The format is unknown or cannot be told, the path cannot be read, or
            it holds no token usage of that format.
    """
    return _read(Path(path), format)[1].usage


def summarise(path: str | Path, format: str = "auto") -> dict[str, Any]:
    """Build the JSON object ``python -m analysis.tokens`` prints.

    Args:
        path: A record file, or a directory whose files of the format are summed.
        format: ``auto`` (detect), or one of :func:`formats`.

    Returns:
        The totals over all models (``input``, ``cache_read``, ``cache_write``, ``output``,
        ``reasoning``, ``requests``), ``format``, ``path``, ``model`` (null if several),
        ``models`` (per-model counts), ``cost_estimate`` and ``cost_estimate_source``.

    Raises:
        TokenRecordError: As :func:`read_usage`.
    """
    fmt, result = _read(Path(path), format)
    total = TokenUsage(model="")
    for usage in result.usage.values():
        total.add(usage)
    cost = result.cost_total if result.cost_total is not None else total.cost_estimate
    models = {
        name: {k: v for k, v in asdict(u).items() if k != "model"}
        for name, u in sorted(result.usage.items())
    }
    return {
        "format": fmt,
        "path": str(path),
        "input": total.input,
        "cache_read": total.cache_read,
        "cache_write": total.cache_write,
        "output": total.output,
        "reasoning": total.reasoning,
        "requests": total.requests,
        "model": next(iter(result.usage)) if len(result.usage) == 1 else None,
        "models": models,
        "cost_estimate": cost,
        "cost_estimate_source": get_cli(fmt).cost_source if cost is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the command line: print one record's totals as one JSON object.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 on success, 2 on bad input (with one line on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m analysis.tokens",
        description="Normalised token totals of one coding-agent session record (or directory).",
    )
    parser.add_argument("path", metavar="FILE", help="session record file, or a directory")
    # Checked by hand rather than with choices=, so a wrong value gets the one-line error.
    parser.add_argument(
        "--format", default="auto", help=f"auto (default) or one of: {', '.join(formats())}"
    )
    args = parser.parse_args(argv)
    try:
        report = summarise(args.path, args.format)
    except TokenRecordError as exc:
        print(f"analysis.tokens: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
