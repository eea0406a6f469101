"""``python -m judge preflight|evaluate|setup|serve [overrides]``.

    python -m judge preflight task=decode_cpu          # mutants table; exit 0 iff all match
    python -m judge evaluate task=decode_cpu candidate=PATH_OR_REF   # JSON on the last line
    python -m judge evaluate task=decode_cpu candidate=PATH@HEAD~1   # any git revision
    python -m judge setup task=decode_cpu              # make the private folder only
    python -m judge serve task=decode_cpu              # the queue worker (the runner starts it)
    python -m judge setup task=PATH/TO/FOLDER          # any task folder holding task.yaml
    python -m judge new-task DIR --kind decode         # write a working task folder to start from

``task=`` is a bundled task's name (tasks/NAME/task.yaml) or a task folder's path (docs/tasks.md).

Exit codes: 0 PASS / preflight all as expected; 1 WRONG, REJECT or a preflight mismatch;
2 bad input (nothing queued); 3 ERROR (the judge or infrastructure failed).
"""

from __future__ import annotations

import sys
from pathlib import Path

from judge.checkout import BadInput, candidate_store, import_candidate, resolve_candidate
from judge.compose import compose_judge_config, load_judge_config
from judge.verdict import Verdict

COMMANDS = ("preflight", "evaluate", "setup", "serve", "new-task")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# Taken verbatim, not through Hydra's override grammar: a path or a git revision (HEAD~1,
# main^2, @{u}) holds characters its lexer refuses.
VERBATIM_KEYS = ("candidate", "repo")


def split_verbatim(overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """Take ``candidate=`` and ``repo=`` out of ``overrides`` (unless Hydra-quoted), so any
    path or revision can be given as it is; returns (the rest, {key: value})."""
    rest, verbatim = [], {}
    for item in overrides:
        key, eq, value = item.partition("=")
        quoted = value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) > 1
        if eq and key in VERBATIM_KEYS and not quoted:
            verbatim[key] = value
        else:
            rest.append(item)
    return rest, verbatim


def new_task(args: list[str]) -> int:
    """``new-task DIR [--kind KIND] [--name NAME]``: the kind's scaffold written into DIR."""
    import argparse

    from judge.kinds import DEFAULT_KIND, get_kind

    parser = argparse.ArgumentParser(prog="python -m judge new-task")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--kind", default=DEFAULT_KIND)
    parser.add_argument("--name", default=None)
    opts = parser.parse_args(args)
    try:
        kind = get_kind(opts.kind)
        scaffold = getattr(kind, "scaffold", None)
        if scaffold is None:
            raise ValueError(f"task kind {opts.kind!r} has no scaffold")
        folder = scaffold(opts.dir, opts.name)
    except (KeyError, ValueError, FileExistsError) as exc:
        print(f"judge: new-task: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(folder)
    print(
        f"next: python -m judge preflight task={folder}   (then edit template/ and task.yaml;"
        " docs/tasks.md)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str]) -> int:
    from isolation import DockerUnavailable, ImageMissing
    from judge.preflight import format_table, run_preflight
    from judge.private import setup
    from judge.sandbox import InfrastructureFault, backend_of
    from judge.service import describe, queue_for, run_until_done, serve_forever

    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m judge {{{'|'.join(COMMANDS)}}} [key=value ...]", file=sys.stderr)
        return 2
    command, overrides = argv[0], argv[1:]
    if command == "new-task":
        return new_task(overrides)
    try:
        if overrides[:1] == ["--config"] and len(overrides) == 2:
            cfg = load_judge_config(Path(overrides[1]))
        else:
            overrides, verbatim = split_verbatim(overrides)
            cfg = compose_judge_config(overrides)
            for key, value in verbatim.items():
                cfg[key] = value
        if command == "evaluate":
            # Read through a judge-made view: the candidate's config and hooks are never used.
            candidate = resolve_candidate(cfg.candidate or "", cfg.repo)
            # The judge scores its own copy, every object checked by fsck (as the gateway does).
            candidate = import_candidate(candidate, candidate_store(cfg.judge.private_dir))
        # The judge scores only in containers: no engine, or an image it cannot make, is one
        # line before anything is made; a missing base image is made now (never pulled).
        backend_of(cfg.judge.sandbox).prepare(cfg.judge.sandbox)
        home = setup(cfg, progress=_progress)
        if command == "setup":
            print(home.root)
            return 0
        if command == "serve":
            return serve_forever(cfg, home)
        if command == "preflight":
            report = run_preflight(cfg, home, only=list(cfg.only), progress=_progress)
            print(format_table(report.rows))
            counts = {k: sum(r.status == k for r in report.rows) for k in ("ok", "UNRESOLVED")}
            summary = f"{counts['ok']}/{len(report.rows)} as expected"
            if counts["UNRESOLVED"]:
                summary += f", {counts['UNRESOLVED']} UNRESOLVED"
            print(f"preflight {'passed' if report.ok else 'FAILED'}: {summary}")
            if report.note:
                print(report.note)
            return 0 if report.ok else 1
        queue = queue_for(cfg, home)  # judged only under these settings
        job = queue.enqueue(
            arm=cfg.arm,
            agent=cfg.agent,
            repo=str(candidate.repo),
            commit=candidate.commit,
            label=candidate.ref,
            # Asked for by hand: a fresh measurement, never an earlier verdict of the same tree.
            rejudge=True,
        )
        [evaluation] = run_until_done(cfg, home, [job], progress=_progress)
        print(describe(evaluation))
        if evaluation.detail:
            print(evaluation.detail)
        print(evaluation.to_json())
        return {Verdict.PASS: 0, Verdict.WRONG: 1, Verdict.REJECT: 1}.get(evaluation.verdict, 3)
    except (BadInput, DockerUnavailable, ImageMissing, FileNotFoundError, ValueError) as exc:
        print(f"judge: {exc}", file=sys.stderr)
        return 2
    except InfrastructureFault as exc:
        print(f"judge: infrastructure fault: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
