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
from agents.scripted.probe import PROBE_PROMPTS, PROBE_STEPS, probe
from agents.scripted.util import as_float, as_int, env_float, short

FROZEN = ("harness/", "engine/config.py", "engine/weights.py")

PATTERNS: list[tuple[str, str]] = [
    (
        r"\bimport threading\b|\bThread\(|concurrent\.futures|multiprocessing",
        "background threads or processes",
    ),
    (r"\bimport socket\b|urllib|http\.client|requests\b", "network access"),
    (r"\bsubprocess\b|os\.system|os\.popen", "starts processes"),
    (r"os\.environ", "reads or sets environment variables"),
    (r"open\([^)]*['\"][wa]|write_text|write_bytes|/tmp/", "writes files"),
    (
        r"tuple\(prompt|tuple\(tokens|hash\(prompt|prompts?\]\s*=|\[tuple\(",
        "a cache keyed on prompts or tokens",
    ),
    (r"perf_counter|time\.time\(|monotonic\(", "reads the clock"),
    (r"importlib|sys\.modules|__import__|sys\.path", "import machinery"),
]


class Critic(Agent):
    """Reviews every worker's PASS; never submits."""

    def run(self) -> int:
        if self.state.master is None:
            self.state.master = self.git("rev-parse", "master")
        self.announce()
        self.save()
        self.expected: list[list[int]] | None = None
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

    def expected_probe(self, scratch: Path) -> list[list[int]] | None:
        """``master``'s output for the probe (the baseline engine), computed once."""
        if self.expected is None:
            tree = self.extract(self.state.master or "master", scratch / "master")
            outcome, tokens = probe(tree, timeout=300)
            self.expected = tokens if outcome == "ok" else None
        return self.expected

    def probe_commit(self, commit: str, scratch: Path) -> str:
        """The probe's outcome for `commit` (cached): ok, a mismatch or a crash."""
        if commit in self.state.probes:
            return self.state.probes[commit]
        tree = self.extract(commit, scratch / f"probe-{commit[:12]}")
        outcome, tokens = probe(tree, timeout=120)
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

    def check(self, tree: Path) -> tuple[bool, str]:
        """The task's own local check, bounded."""
        timeout = env_float("SWARMLAB_CRITIC_CHECK_TIMEOUT", 600.0)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-B", "harness/check.py", "--repeat", "1"],
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
            )
        except subprocess.TimeoutExpired:
            return False, f"harness/check.py did not finish within {timeout:.0f} s"
        lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        if done.returncode == 0:
            speed = next((ln for ln in lines if "aggregate" in ln), "")
            return True, "check.py OK" + (f" ({speed})" if speed else "")
        fails = [ln for ln in lines if ln.startswith("FAIL")]
        return False, "check.py FAILED: " + ("; ".join(fails[:2]) or done.stderr.strip()[-200:])

    def inspect(self, base: str, commit: str, tree: Path) -> tuple[list[str], list[str]]:
        """Rule-sensitive patterns in what `commit` adds to `base`: (concerns, notes)."""
        found: list[str] = []
        notes: list[str] = []
        names = self.git("diff", "--name-only", base, commit).splitlines()
        frozen = [n for n in names if n.startswith(FROZEN)]
        if frozen:
            found.append("edits the frozen zone: " + ", ".join(frozen))
        top = [n for n in names if "/" not in n and n.endswith(".py")]
        if top:
            found.append("adds top-level modules (shadowing?): " + ", ".join(top))
        added = "\n".join(
            ln[1:]
            for ln in self.git("diff", "-U0", base, commit, "--", "engine").splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        )
        for pattern, what in PATTERNS:
            if re.search(pattern, added):
                found.append(what)
        module_state = re.findall(r"^(_\w+)\s*(?::[^=]*)?=\s*(?:\{|\[|dict\(|set\()", added, re.M)
        if module_state:
            found.append("module-level mutable state: " + ", ".join(sorted(set(module_state))))
        attrs = set(re.findall(r"self\.(_?\w+)\s*(?::[^=]*)?=(?!=)", added))
        attrs |= set(re.findall(r"__dict__\.(?:setdefault|get)\(\"(\w+)\"", added))
        model = tree / "engine" / "model.py"
        text = model.read_text() if model.is_file() else ""
        reset = re.search(r"def reset\(self\).*?(?=\n    def |\Z)", text, re.S)
        body = reset.group(0) if reset else ""
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
            ok, check_text = self.check(tree)
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
        finding = "bug" if (not ok or probe_text != "ok") else ("concern" if patterns else "ok")
        parts = [check_text]
        parts.append(
            f"long decode ({len(PROBE_PROMPTS[0])}+{PROBE_STEPS} positions, past the judge's "
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
