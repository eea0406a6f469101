"""The scripted critic: reviews every worker's PASS; never submits."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from agents.scripted.agent import Agent
from agents.scripted.probe import ENGINE_ENV, build, probe
from agents.scripted.util import as_float, as_int, env_float, short

# Changed files that are not code: their text is not searched for patterns.
PROSE = (".md", ".txt", ".rst")

# What an engine's diff may do that the rules care about, in Python or in C.
PATTERNS: list[tuple[str, str]] = [
    (
        r"\bimport threading\b|\bThread\(|concurrent\.futures|multiprocessing|pthread_create"
        r"|\bfork\(",
        "background threads or processes",
    ),
    (
        r"\bimport socket\b|urllib|http\.client|requests\b|<sys/socket\.h>|\bsocket\(",
        "network access",
    ),
    (r"\bsubprocess\b|os\.system|os\.popen|\bsystem\(|\bpopen\(|\bexecv", "starts processes"),
    (r"os\.environ|\bgetenv\(", "reads or sets environment variables"),
    (
        r"open\([^)]*['\"][wa]|write_text|write_bytes|/tmp/|fopen\([^)]*\"[wa]",
        "writes files",
    ),
    (
        r"tuple\(prompt|tuple\(tokens|hash\(prompt|prompts?\]\s*=|\[tuple\(",
        "a cache keyed on prompts or tokens",
    ),
    (
        r"perf_counter|time\.time\(|monotonic\(|clock_gettime|gettimeofday|\bclock\(\)",
        "reads the clock",
    ),
    (r"importlib|sys\.modules|__import__|sys\.path", "import machinery"),
    # C: a static variable (file-level or inside a function) outlives every call, reset()'s
    # included; a static function or constant does not.
    (
        r"(?m)^\s*static\s+(?!inline\b|const\b)[^(){};=]*(?:=[^;(]*)?;",
        "static variables (C: state that survives reset)",
    ),
]


class Critic(Agent):
    """Reviews every worker's PASS; never submits."""

    def run(self) -> int:
        if self.state.master is None:
            self.state.master = self.git("rev-parse", "master")
        self.announce()
        self.save()
        self.expected: list[list[int]] | None = None
        self.scratch_builds: list[Path] = []
        while self.time_left() > 0 and not self.out_of_actions():
            for row in self.read_board():
                refs = row.get("refs") or {}
                if (
                    row.get("kind") == "result"
                    and row.get("role", "worker") != "critic"
                    and refs.get("verdict") == "PASS"
                    and refs.get("commit")
                    and refs.get("commit") not in self.state.reviewed
                    and not any(p["commit"] == refs["commit"] for p in self.state.pending_reviews)
                ):
                    self.state.pending_reviews.append(
                        {"author": row.get("author"), "message": row.get("id"), **refs}
                    )
            self.save()
            if not self.state.pending_reviews:
                self.sleep(self.poll)
                continue
            # The fastest PASS first: it is the one others will build on.
            pending = self.state.pending_reviews
            item = max(pending, key=lambda p: (as_float(p.get("x_baseline")) or 0.0, -p["message"]))
            pending.remove(item)
            self.state.actions += 1
            self.review(item)
            self.state.reviewed.append(item["commit"])
            self.save()
        self.notes.log("deadline reached" if self.time_left() <= 0 else "action budget used")
        return 0

    def extract(self, commit: str, where: Path) -> Path:
        """The commit's tree, as files, in a scratch folder (no git metadata)."""
        data = subprocess.run(
            ["git", "archive", "--format=tar", commit],
            cwd=self.repo,
            capture_output=True,
            check=True,
        ).stdout
        where.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(where, filter="data")
        return where

    def build_folder(self, scratch: Path, label: str) -> Path:
        """A writable, executable folder for one tree's build: under ``$SWARMLAB_BUILD`` (an
        agent container's ``/tmp`` is noexec), else in the scratch folder (on the host)."""
        root = Path(os.environ.get("SWARMLAB_BUILD") or "/build")
        if not (root.is_dir() and os.access(root, os.W_OK | os.X_OK)):
            root = scratch
        folder = root / f"critic-{scratch.name}-{label}"
        self.scratch_builds.append(folder)
        return folder

    def expected_probe(self, scratch: Path) -> list[list[int]] | None:
        """``master``'s output for the probe (the baseline engine), computed once."""
        if self.expected is None and self.library.probe is not None:
            tree = self.extract(self.state.master or "master", scratch / "master")
            folder = self.build_folder(scratch, "master")
            outcome, tokens = probe(self.card, self.library.probe, tree, folder, timeout=300)
            self.expected = tokens if outcome == "ok" else None
        return self.expected

    def probe_commit(self, commit: str, scratch: Path) -> str:
        """The probe's outcome for `commit` (cached): ok, a mismatch or a crash ("ok" when the
        library has no probe)."""
        if self.library.probe is None:
            return "ok"
        if commit in self.state.probes:
            return self.state.probes[commit]
        tree = self.extract(commit, scratch / f"probe-{commit[:12]}")
        folder = self.build_folder(scratch, f"probe-{commit[:12]}")
        outcome, tokens = probe(self.card, self.library.probe, tree, folder, timeout=120)
        if outcome == "ok":
            expected = self.expected_probe(scratch)
            if expected is not None and tokens != expected:
                rows = [
                    i
                    for i, (a, b) in enumerate(zip(tokens or [], expected, strict=False))
                    if a != b
                ]
                outcome = f"mismatch against master in rows {rows}"
        self.state.probes[commit] = outcome
        return outcome

    def check(self, tree: Path, scratch: Path) -> tuple[bool, str]:
        """The task's own quick local check (the library's ``check``), after its build,
        bounded."""
        argv = self.library.check
        if not argv:
            return True, "no local check in the move library"
        folder = self.build_folder(scratch, "tree")
        failed = build(self.card, tree, folder, timeout=300)
        if failed:
            return False, failed
        argv_text = " ".join(argv[1:3]) if len(argv) > 2 else " ".join(argv)
        timeout = env_float("SWARMLAB_CRITIC_CHECK_TIMEOUT", 600.0)
        command = [p.replace("{python}", sys.executable) for p in self.card.argv(argv, folder)]
        try:
            done = subprocess.run(
                command,
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **ENGINE_ENV, "SWARMLAB_BUILD": str(folder)},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"the check ({argv_text}) did not finish: {type(exc).__name__}"
        lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        if done.returncode == 0:
            speed = next((ln for ln in lines if "aggregate" in ln), "")
            return True, "local check OK" + (f" ({speed})" if speed else "")
        fails = [ln for ln in lines if ln.startswith("FAIL")] or lines[-2:]
        return False, "local check FAILED: " + ("; ".join(fails[:2]) or done.stderr.strip()[-200:])

    def inspect(self, base: str, commit: str, tree: Path) -> tuple[list[str], list[str]]:
        """Rule-sensitive patterns in what `commit` adds to `base`: (concerns, notes)."""
        found: list[str] = []
        notes: list[str] = []
        names = self.git("diff", "--name-only", base, commit).splitlines()
        frozen = [n for n in names if self.card.is_frozen(n)]
        if frozen:
            found.append("edits the frozen zone: " + ", ".join(frozen))
        top = [n for n in names if "/" not in n and n.endswith(".py")]
        if top:
            found.append("adds top-level modules (shadowing?): " + ", ".join(top))
        # The code it adds: the files it changes outside the frozen zone, prose left out.
        code = [n for n in names if n not in frozen and n not in top and not n.endswith(PROSE)]
        diff = self.git("diff", "-U0", base, commit, "--", *code) if code else ""
        added = "\n".join(
            ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")
        )
        for pattern, what in PATTERNS:
            if re.search(pattern, added):
                found.append(what)
        module_state = re.findall(r"^(_\w+)\s*(?::[^=]*)?=\s*(?:\{|\[|dict\(|set\()", added, re.M)
        if module_state:
            found.append("module-level mutable state: " + ", ".join(sorted(set(module_state))))
        attrs = set(re.findall(r"self\.(_?\w+)\s*(?::[^=]*)?=(?!=)", added))
        attrs |= set(re.findall(r"__dict__\.(?:setdefault|get)\(\"(\w+)\"", added))
        # Every reset() of the tree's own code (the one that clears an attribute may be in a file
        # the commit does not touch).
        body = ""
        for path in sorted(tree.rglob("*.py")):
            if self.card.is_frozen(path.relative_to(tree).as_posix()):
                continue
            text = path.read_text(errors="replace")
            for reset in re.finditer(r"def reset\(self\).*?(?=\n    def |\Z)", text, re.S):
                body += reset.group(0)
        kept = sorted(a for a in attrs if a not in body and a not in ("seqs", "weights", "cfg"))
        derived, other = [], []
        lines = added.splitlines()
        for name in kept:
            # Weight-derived when the code around each place naming it works on the weights.
            near = "\n".join(
                "\n".join(lines[max(0, i - 4) : i + 5]) for i, ln in enumerate(lines) if name in ln
            )
            weighty = re.search(r"dequantize|weights", near)
            (derived if weighty else other).append(name)
        if derived:
            notes.append("weight-derived caches kept across reset(): " + ", ".join(derived))
        if other:
            found.append(
                "state that survives reset(): " + ", ".join(other) + " (a bug if it holds "
                "anything of a sequence or a batch)"
            )
        return found, notes

    def review(self, item: dict[str, Any]) -> None:
        commit, author = str(item["commit"]), str(item.get("author"))
        number = as_int(item.get("submission"))
        base = str(item.get("base") or self.state.master)
        self.notes.log(f"reviewing {author}'s PASS {short(commit)} ({item.get('move')})")
        if number is None or not self.git.fetch_submission(
            self.submissions, author, number, commit
        ):
            self.tools.post(
                "review",
                f"could not fetch {author}'s {short(commit)} to review it.",
                {"commit": commit, "author": author, "finding": "unreviewed"},
            )
            return
        if not self.git.has(base):
            base = self.state.master or "master"
        tree_sha = self.git("rev-parse", commit + "^{tree}")
        same = self.state.trees.get(tree_sha)
        if same is not None:
            # Moves commute: the same moves in another order make the very same tree.
            self.tools.post(
                "review",
                f"{same['label']} {author}'s PASS {short(commit)} ({item.get('move')}): the same "
                f"code as {same['author']}'s {short(same['commit'])}, reviewed already.",
                {
                    **same["refs"],
                    "commit": commit,
                    "author": author,
                    "submission": number,
                    "same_as": same["commit"],
                },
            )
            self.notes.log(f"review {short(commit)}: same tree as {short(same['commit'])}")
            return
        scratch = Path(tempfile.mkdtemp(prefix=f"review-{commit[:12]}-", dir="/tmp"))
        try:
            tree = self.extract(commit, scratch / "tree")
            ok, check_text = self.check(tree, scratch)
            probe_text = self.probe_commit(commit, scratch)
            patterns, remarks = self.inspect(base, commit, tree)
            culprit = None
            if probe_text != "ok" and base != self.state.master:
                base_probe = self.probe_commit(base, scratch)
                if base_probe == "ok":
                    culprit = str(item.get("move") or "") or None
            elif probe_text != "ok":
                culprit = str(item.get("move") or "") or None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            for folder in self.scratch_builds:
                shutil.rmtree(folder, ignore_errors=True)
            self.scratch_builds = []
        finding = "bug" if (not ok or probe_text != "ok") else ("concern" if patterns else "ok")
        parts = [check_text]
        spec = self.library.probe
        if spec is not None:
            parts.append(
                f"long decode ({max(spec.prompt_lens)}+{spec.steps} positions, past the judge's "
                f"lengths): {probe_text}"
            )
        if culprit:
            parts.append(f"its base {short(base)} passes the probe, so the bug came with {culprit}")
        elif probe_text != "ok":
            parts.append(f"inherited: its base {short(base)} fails the probe too")
        if patterns:
            parts.append("diff: " + "; ".join(patterns))
        if remarks:
            parts.append("noted: " + "; ".join(remarks))
        label = {"bug": "BUG", "concern": "CONCERN", "ok": "OK"}[finding]
        refs = {
            "commit": commit,
            "author": author,
            "submission": number,
            "finding": finding,
            "check": "ok" if ok else "fail",
            "probe": "ok" if probe_text == "ok" else probe_text[:120],
            "culprit": culprit,
            "patterns": " | ".join(patterns)[:500],
        }
        self.tools.post(
            "review",
            f"{label} {author}'s PASS {short(commit)} ({item.get('move')}): " + ". ".join(parts),
            refs,
        )
        self.state.trees[tree_sha] = {
            "commit": commit,
            "author": author,
            "label": label,
            "refs": refs,
        }
        self.notes.log(f"review {short(commit)}: {label}")
