"""A passed preflight is voided by any edit of the judge's code, a kind's subpackage included."""

from __future__ import annotations

import shutil
from pathlib import Path

import judge
from judge.preflight import judge_code_hash

JUDGE = Path(judge.__file__).parent


def test_an_edit_anywhere_in_the_judge_changes_its_code_hash(tmp_path: Path) -> None:
    copy = tmp_path / "judge"
    shutil.copytree(JUDGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert judge_code_hash(copy) == judge_code_hash(JUDGE)
    nested = sorted(p for p in (copy / "kinds").rglob("*.py") if len(p.relative_to(copy).parts) > 2)
    assert nested, "no kind subpackage to edit"
    for module in nested[:3]:
        before = judge_code_hash(copy)
        module.write_text(module.read_text() + "\n# edited\n")
        assert judge_code_hash(copy) != before, module
    # A module moved to another place is another judge, even with the same bytes.
    moved = judge_code_hash(copy)
    shutil.move(copy / "verdict.py", copy / "kinds" / "verdict.py")
    assert judge_code_hash(copy) != moved
