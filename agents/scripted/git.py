"""The agent's clone, through ``git``."""

from __future__ import annotations

from pathlib import Path

from agents.scripted.util import run, say


class Git:
    """The agent's clone (``/work/repo``)."""

    def __init__(self, repo: Path, agent: str) -> None:
        self.repo = repo
        self.agent = agent

    def __call__(self, *args: str, check: bool = True) -> str:
        return run(["git", *args], cwd=self.repo, check=check).stdout.strip()

    def head(self) -> str:
        return self("rev-parse", "HEAD")

    def reset(self, commit: str) -> None:
        """Put the work tree exactly at `commit` (whatever a failed apply left behind)."""
        self("reset", "-q", "--hard", commit)
        self("clean", "-q", "-fdx")

    def moves_in(self, commit: str, git_dir: Path | None = None) -> list[str]:
        """The moves in `commit`'s history, oldest first (``Move:`` trailers); in the clone, or
        in the repository `git_dir` (the arm's submissions, for a commit not fetched)."""
        where = ["--git-dir", str(git_dir)] if git_dir is not None else []
        out = self(
            *where,
            "log",
            "--reverse",
            "--format=%(trailers:key=Move,valueonly,separator=%x2C)",
            commit,
            check=git_dir is None,
        )
        names: list[str] = []
        for line in out.splitlines():
            for name in line.split(","):
                name = name.strip()
                if name and name not in names:
                    names.append(name)
        return names

    def is_ancestor(self, older: str, newer: str) -> bool:
        return (
            run(
                ["git", "merge-base", "--is-ancestor", older, newer], cwd=self.repo, check=False
            ).returncode
            == 0
        )

    def has(self, commit: str) -> bool:
        return (
            run(
                ["git", "cat-file", "-e", commit + "^{commit}"], cwd=self.repo, check=False
            ).returncode
            == 0
        )

    def fetch_submission(self, submissions: Path, author: str, number: int, commit: str) -> bool:
        """Fetch another agent's submitted commit (for a relay or a review)."""
        if self.has(commit):
            return True
        ref = f"refs/submissions/{author}/{number}"
        done = run(["git", "fetch", "-q", str(submissions), ref], cwd=self.repo, check=False)
        if done.returncode != 0:
            say(f"fetch {ref} failed: {(done.stdout + done.stderr).strip()[-200:]}")
            return False
        return self.has(commit)

    def submitted(self, submissions: Path) -> list[tuple[str, int, str]]:
        """Every submission of the arm so far: (author, number, commit), from its refs."""
        out = self(
            "--git-dir",
            str(submissions),
            "for-each-ref",
            "--format=%(refname:strip=2) %(objectname)",
            "refs/submissions/",
            check=False,
        )
        found = []
        for line in out.splitlines():
            name, _, commit = line.partition(" ")
            author, _, number = name.rpartition("/")
            if author and number.isdigit() and commit:
                found.append((author, int(number), commit))
        return found

    def commit_all(self, message: str) -> str:
        self("add", "-A")
        self("commit", "-q", "--no-verify", "--allow-empty", "-m", message)
        return self.head()
