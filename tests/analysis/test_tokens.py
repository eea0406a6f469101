"""Token totals from each CLI's own session record, one test per trap in a fixture that holds it.

The fixtures and where their layouts come from are described in ``fixtures/tokens/README.md``.
Each test first checks that the trap is really in the fixture (a naive reading gets another
number), then that ``analysis.tokens`` gets the right one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.tokens import (
    FORMATS,
    TokenRecordError,
    TokenUsage,
    detect_format,
    main,
    read_usage,
    summarise,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tokens"
CLAUDE = FIXTURES / "claude_code_session.jsonl"
CLAUDE_PROJECT = FIXTURES / "claude_code_project"
CLAUDE_REUSED = FIXTURES / "claude_code_reused_ids.jsonl"
ROLLOUT = FIXTURES / "rollout-2025-10-02T10-00-00-0199a3c2-7f41-7b10-9c55-3d2e1f0a9b8c.jsonl"
CODEX_SESSIONS = FIXTURES / "codex_sessions"
CODEX_EXEC = FIXTURES / "codex_exec_stdout.jsonl"
GEMINI = FIXTURES / "gemini_session-2025-10-02T10-00-3e9f1c2a.jsonl"
GEMINI_CHATS = FIXTURES / "gemini_chats"
MINI = FIXTURES / "mini_swe_task.traj.json"
MINI_RESPONSES = FIXTURES / "mini_swe_responses.traj.json"
MINI_REUSED = FIXTURES / "mini_swe_reused_ids.traj.json"
MINI_RESPONSES_FORMAT_ERROR = FIXTURES / "mini_swe_responses_format_error.traj.json"
REPO = Path(__file__).resolve().parents[2]

COUNTS = ("input", "cache_read", "cache_write", "output", "reasoning", "requests")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _counts(report: dict[str, Any]) -> dict[str, int]:
    return {key: report[key] for key in COUNTS}


def _claude_usages(path: Path) -> list[dict[str, Any]]:
    return [
        row["message"]["usage"]
        for row in _lines(path)
        if isinstance(row.get("message"), dict) and "usage" in row["message"]
    ]


# -- Claude Code -----------------------------------------------------------------------------


def test_claude_code_counts_each_api_call_once_with_its_largest_usage() -> None:
    usages = _claude_usages(CLAUDE)
    assert len(usages) > 4  # the trap: many lines for four calls
    assert sum(u["output_tokens"] for u in usages) != 505

    report = summarise(CLAUDE)

    assert report["format"] == "claude_code"
    assert _counts(report) == {
        # calls A (3 blocks + replay), B (2 blocks + replay), C (sidechain), D (no requestId)
        "input": 3 + 5 + 4 + 2,
        "cache_read": 12000 + 16100 + 0 + 16450,
        "cache_write": 4100 + 350 + 2200 + 0,
        # A's final line says 212 after an early snapshot of 8; D's says 57 after 30
        "output": 212 + 96 + 140 + 57,
        "reasoning": 0,
        "requests": 4,
    }
    assert report["model"] == "claude-sonnet-4-5-20250929"
    assert report["cost_estimate"] is None
    assert report["cost_estimate_source"] is None


def test_claude_code_replayed_history_counts_once() -> None:
    rows = [r for r in _lines(CLAUDE) if "usage" in r.get("message", {})]
    ids = [(r["message"]["id"], r.get("requestId")) for r in rows]
    replayed = {key for key in ids if ids.count(key) > 1}
    assert ("msg_01Hq7TzDk3vR5bYw9XcLp2aN", "req_011CTm4xQ8vB2nHd6Yk1LsZe") in replayed

    usage = read_usage(CLAUDE)["claude-sonnet-4-5-20250929"]

    assert usage.requests == 4
    assert usage.cache_read == 44550


def test_claude_code_input_excludes_cache() -> None:
    usage = read_usage(CLAUDE)["claude-sonnet-4-5-20250929"]

    # input_tokens is already the uncached part: nothing is subtracted from it.
    assert usage.input == 14
    assert usage.cache_read + usage.cache_write > usage.input


def test_claude_code_sidechain_calls_count_and_synthetic_lines_do_not() -> None:
    rows = _lines(CLAUDE)
    assert any(r.get("isSidechain") and "usage" in r["message"] for r in rows)
    assert any(r["message"].get("model") == "<synthetic>" for r in rows if "message" in r)

    usages = read_usage(CLAUDE)

    assert list(usages) == ["claude-sonnet-4-5-20250929"]
    assert usages["claude-sonnet-4-5-20250929"].cache_write == 6650  # 2200 is the sidechain's


def test_claude_code_project_directory_drops_a_subagent_replay_of_a_parent_message() -> None:
    sub = CLAUDE_PROJECT / "8b7e1f20-3c4d-4e5f-8a9b-0c1d2e3f4a5b" / "subagents"
    replay = _lines(sub / "agent-a3f9c1.jsonl")[0]
    assert replay["isSidechain"] is True
    assert replay["message"]["id"] == "msg_01Pa1BcD2eF3gH4iJ5kL6mN7"  # the parent's first reply

    report = summarise(CLAUDE_PROJECT)

    assert _counts(report) == {
        "input": 6 + 4 + 9,
        "cache_read": 10000 + 13000 + 0,
        "cache_write": 3000 + 500 + 1800,
        "output": 120 + 80 + 64,
        "reasoning": 0,
        "requests": 3,
    }
    assert report["cost_estimate"] == pytest.approx(0.0182 + 0.0071 + 0.0079)
    assert "CLI's own estimate" in report["cost_estimate_source"]


def test_claude_code_keeps_the_largest_line_not_the_first_or_last(tmp_path: Path) -> None:
    reversed_file = tmp_path / "session.jsonl"
    reversed_file.write_text("".join(reversed(CLAUDE.read_text().splitlines(keepends=True))))

    assert _counts(summarise(reversed_file)) == _counts(summarise(CLAUDE))


def test_claude_code_torn_last_line_is_skipped(tmp_path: Path) -> None:
    torn = tmp_path / "session.jsonl"
    torn.write_text(CLAUDE.read_text() + '{"parentUuid":"d2","message":{"id":"msg_x","us')

    assert _counts(summarise(torn, "claude_code")) == _counts(summarise(CLAUDE))


def test_claude_code_a_message_id_reused_across_turns_is_several_calls() -> None:
    rows = [r for r in _lines(CLAUDE_REUSED) if "usage" in r.get("message", {})]
    # The trap: a gateway fixed every message id and sent no request id, so (message id,
    # request id) names one call for the whole session (the old reading counted 1 call).
    assert {(r["message"]["id"], r.get("requestId")) for r in rows} == {("msg_gateway", None)}
    # 8 lines, 6 uuids (a1 a2 b1 s1 c1 c2): a resumed session replayed a2 and b1.
    assert (len(rows), len({r["uuid"] for r in rows})) == (8, 6)

    report = summarise(CLAUDE_REUSED)

    # By hand, one line per call: A's final line a2 (its snapshot a1 is its parent, with an
    # all-zero input side), B's b1, the subagent's s1, C's c2 (c1 repeats its usage); the
    # replayed a2 and b1 keep their uuids and count once.
    assert _counts(report) == {
        "input": 12 + 5 + 9 + 4,
        "cache_read": 0 + 2400 + 0 + 2710,
        "cache_write": 2400 + 310 + 1500 + 150,
        "output": 180 + 95 + 70 + 42,
        "reasoning": 0,
        "requests": 4,
    }


def test_claude_code_reused_ids_read_the_same_in_any_line_order(tmp_path: Path) -> None:
    reversed_file = tmp_path / "session.jsonl"
    reversed_file.write_text("".join(reversed(CLAUDE_REUSED.read_text().splitlines(True))))

    assert _counts(summarise(reversed_file)) == _counts(summarise(CLAUDE_REUSED))


# -- Codex CLI -------------------------------------------------------------------------------


def _token_counts(path: Path) -> list[dict[str, Any]]:
    return [
        r["payload"]["info"]
        for r in _lines(path)
        if r["type"] == "event_msg"
        and r["payload"]["type"] == "token_count"
        and r["payload"]["info"]
    ]


def test_codex_rollout_ignores_reemitted_token_counts() -> None:
    infos = _token_counts(ROLLOUT)
    assert len(infos) == 7  # the trap: 3 calls, 4 re-emits with unchanged totals
    naive = sum(i["last_token_usage"]["output_tokens"] for i in infos)
    assert naive != 870

    report = summarise(ROLLOUT)

    final = infos[-1]["total_token_usage"]
    assert report["format"] == "codex"
    assert _counts(report) == {
        "input": final["input_tokens"] - final["cached_input_tokens"],
        "cache_read": final["cached_input_tokens"],
        "cache_write": 0,
        "output": final["output_tokens"],
        "reasoning": final["reasoning_output_tokens"],
        "requests": 3,
    }
    assert report["input"] == 26700 - 16896


def test_codex_rollout_cached_input_is_subtracted_and_reasoning_is_part_of_output() -> None:
    usages = read_usage(ROLLOUT)

    assert set(usages) == {"gpt-5-codex", "gpt-5"}
    codex = usages["gpt-5-codex"]
    assert (codex.input, codex.cache_read) == ((8000 - 0) + (9100 - 7936), 7936)
    assert (codex.output, codex.reasoning, codex.requests) == (300 + 150, 192 + 64, 2)
    later = usages["gpt-5"]
    assert (later.input, later.cache_read, later.output, later.reasoning) == (640, 8960, 420, 256)
    assert later.reasoning <= later.output


def test_codex_forked_rollout_counts_its_copy_of_the_parent_once() -> None:
    files = sorted(CODEX_SESSIONS.rglob("rollout-*.jsonl"))
    child = files[1]
    copied = _token_counts(child)[:-1]
    assert copied == _token_counts(files[0])  # the trap: the fork opens with the parent's events

    report = summarise(CODEX_SESSIONS)

    final = _token_counts(child)[-1]["total_token_usage"]  # the fork's totals continue the parent's
    assert report["input"] == final["input_tokens"] - final["cached_input_tokens"]
    assert report["cache_read"] == final["cached_input_tokens"]
    assert report["output"] == final["output_tokens"]
    assert report["reasoning"] == final["reasoning_output_tokens"]
    assert report["requests"] == 4


def test_codex_exec_stdout_usage_is_a_running_total() -> None:
    completed = [r["usage"] for r in _lines(CODEX_EXEC) if r["type"] == "turn.completed"]
    assert len(completed) == 2  # the trap: summing them counts the first turn twice

    report = summarise(CODEX_EXEC)

    last = completed[-1]
    assert report["format"] == "codex"
    assert _counts(report) == {
        "input": last["input_tokens"] - last["cached_input_tokens"],
        "cache_read": last["cached_input_tokens"],
        "cache_write": 0,
        "output": last["output_tokens"],
        "reasoning": 0,
        "requests": 2,
    }
    assert report["model"] == "unknown"


def test_codex_exec_stdout_adds_a_new_thread_whose_total_restarts(tmp_path: Path) -> None:
    def turn(given: int, cached: int, output: int) -> dict[str, Any]:
        usage = {"input_tokens": given, "cached_input_tokens": cached, "output_tokens": output}
        return {"type": "turn.completed", "usage": usage}

    rows = [
        {"type": "thread.started", "thread_id": "t1"},
        turn(900, 0, 50),
        turn(2000, 800, 90),
        {"type": "thread.started", "thread_id": "t2"},
        turn(700, 0, 40),
    ]
    log = tmp_path / "exec.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))

    report = summarise(log)

    assert (report["input"], report["cache_read"], report["output"]) == (1200 + 700, 800, 130)


def test_codex_calls_with_equal_usage_count_each(tmp_path: Path) -> None:
    # Codex keys calls on the moving cumulative total, never on a response id or a usage:
    # two calls that each used the same tokens are two calls.
    def token_count(at: str, total: int) -> dict[str, Any]:
        vector = {"input_tokens": 1000, "cached_input_tokens": 0, "output_tokens": 50}
        totals = {k: v * total for k, v in vector.items()}
        info = {"total_token_usage": totals, "last_token_usage": vector}
        payload = {"type": "token_count", "info": info}
        return {"timestamp": at, "type": "event_msg", "payload": payload}

    rows = [
        {"timestamp": "t0", "type": "turn_context", "payload": {"model": "gpt-5.5"}},
        token_count("t1", 1),
        token_count("t2", 2),
        token_count("t3", 2),  # a re-emit: the total did not move
    ]
    rollout = tmp_path / "rollout-2026-11-20T09-00-00-x.jsonl"
    rollout.write_text("".join(json.dumps(r) + "\n" for r in rows))

    report = summarise(rollout)

    assert (report["input"], report["output"], report["requests"]) == (2000, 100, 2)


# -- Gemini CLI ------------------------------------------------------------------------------


def test_gemini_reappended_message_is_kept_once() -> None:
    rows = _lines(GEMINI)
    ids = [r["id"] for r in rows if r.get("type") == "gemini"]
    assert len(ids) > len(set(ids))  # the trap: the same message appended again
    assert any("messages" in r.get("$set", {}) for r in rows)  # and copied by a checkpoint

    report = summarise(GEMINI)

    assert report["format"] == "gemini"
    assert _counts(report) == {
        # pro: (9120 - 0) + (9800 - 8900); flash: 1200 + 25 tool-use prompt tokens
        "input": 9120 + 900 + 1225,
        "cache_read": 8900,
        "cache_write": 0,
        # candidates plus thoughts
        "output": (85 + 310) + (140 + 96) + 40,
        "reasoning": 310 + 96,
        "requests": 3,
    }
    assert report["model"] is None


def test_gemini_keeps_the_copy_with_tokens_whatever_the_order(tmp_path: Path) -> None:
    # The first copy of a message can have no tokens yet: the copy with them must win.
    reversed_file = tmp_path / "session.jsonl"
    reversed_file.write_text("".join(reversed(GEMINI.read_text().splitlines(keepends=True))))

    assert _counts(summarise(reversed_file, "gemini")) == _counts(summarise(GEMINI))


def test_gemini_output_includes_thoughts_and_input_excludes_cached() -> None:
    usages = read_usage(GEMINI)

    pro = usages["gemini-2.5-pro"]
    assert pro == TokenUsage(
        input=9120 + (9800 - 8900),
        cache_read=8900,
        cache_write=0,
        output=85 + 310 + 140 + 96,
        reasoning=310 + 96,
        model="gemini-2.5-pro",
        requests=2,
        cost_estimate=None,
    )
    assert usages["gemini-2.5-flash"].input == 1200 + 25


def test_gemini_resumed_legacy_json_copied_into_jsonl_counts_once() -> None:
    legacy = json.loads((GEMINI_CHATS / "session-2025-10-01T09-00-4f0a2b3c.json").read_text())
    copied = {r.get("id") for r in _lines(GEMINI_CHATS / "session-2025-10-01T09-00-4f0a2b3c.jsonl")}
    assert {m["id"] for m in legacy["messages"]} <= copied

    report = summarise(GEMINI_CHATS)

    assert report["requests"] == 2
    assert (report["input"], report["cache_read"], report["output"]) == (900 + 1225, 8900, 236 + 40)


def test_gemini_distinct_message_ids_with_equal_tokens_count_each(tmp_path: Path) -> None:
    # The Gemini CLI names each message with its own randomUUID (chatRecordingService
    # newMessage), so only a repeated id is a copy; equal tokens under two ids are two calls.
    tokens = {"input": 700, "output": 30, "cached": 0, "thoughts": 10, "tool": 0, "total": 740}
    rows = [
        {"sessionId": "s", "projectHash": "p", "startTime": "t0"},
        {"id": "uuid-1", "type": "gemini", "model": "gemini-2.5-pro", "tokens": tokens},
        {"id": "uuid-2", "type": "gemini", "model": "gemini-2.5-pro", "tokens": tokens},
        {"id": "uuid-2", "type": "gemini", "model": "gemini-2.5-pro", "tokens": tokens},
    ]
    session = tmp_path / "session-2026-11-20T09-00-abcd.jsonl"
    session.write_text("".join(json.dumps(r) + "\n" for r in rows))

    report = summarise(session)

    assert (report["input"], report["output"], report["requests"]) == (1400, 80, 2)


# -- mini-swe-agent --------------------------------------------------------------------------


def test_mini_swe_sums_the_usage_kept_in_each_message() -> None:
    trajectory = json.loads(MINI.read_text())
    extras = [m.get("extra", {}) for m in trajectory["messages"]]
    responses = [extra["response"] for extra in extras if "response" in extra]
    assert len(responses) == 3  # one of them on a format-error message, not an assistant one
    assert sum(r["usage"]["prompt_tokens"] for r in responses) == 16730  # cache included

    report = summarise(MINI)

    assert report["format"] == "mini_swe"
    assert _counts(report) == {
        "input": (5230 - 0 - 5226) + (5600 - 5226 - 370) + (5900 - 5596 - 300),
        "cache_read": 0 + 5226 + 5596,
        "cache_write": 5226 + 370 + 300,
        "output": 180 + 60 + 250,
        "reasoning": 120,
        "requests": 3,
    }
    assert report["model"] == "claude-sonnet-4-5-20250929"
    assert report["cost_estimate"] == pytest.approx(0.0421)
    assert "model_stats.instance_cost" in report["cost_estimate_source"]


def test_mini_swe_responses_api_messages_carry_their_own_usage() -> None:
    report = summarise(MINI_RESPONSES)

    assert _counts(report) == {
        "input": 4100 + (4400 - 3968),
        "cache_read": 3968,
        "cache_write": 0,
        "output": 900 + 500,
        "reasoning": 640 + 384,
        "requests": 2,
    }
    assert report["cost_estimate"] == pytest.approx(0.00312)


def test_mini_swe_a_response_id_reused_across_turns_is_several_calls() -> None:
    messages = json.loads(MINI_REUSED.read_text())["messages"]
    responses = [m["extra"]["response"] for m in messages if "response" in m.get("extra", {})]
    # The trap: an OpenAI-compatible server that answers every call with one id (the old
    # reading counted each id once: 1 call, 90 output tokens).
    assert {r["id"] for r in responses} == {"chatcmpl-local"}
    assert len(responses) == 3

    report = summarise(MINI_REUSED)

    # By hand, each call's prompt_tokens less cached_tokens: 1200-0, 1500-1024, 1650-1408;
    # the second call is the format-error turn (a user message carrying the reply's usage).
    assert _counts(report) == {
        "input": 1200 + 476 + 242,
        "cache_read": 1024 + 1408,
        "cache_write": 0,
        "output": 90 + 40 + 70,
        "reasoning": 30,
        "requests": 3,
    }
    assert report["model"] == "qwen3-coder-30b"
    assert report["cost_estimate"] == 0.0  # a local model: LiteLLM knows no price


def test_mini_swe_responses_api_format_error_turn_carries_its_call_usage() -> None:
    messages = json.loads(MINI_RESPONSES_FORMAT_ERROR.read_text())["messages"]
    (error,) = [m for m in messages if m.get("extra", {}).get("interrupt_type") == "FormatError"]
    assert error["role"] == "user" and "usage" not in error  # the trap: not an assistant message
    assert error["extra"]["response"]["usage"]["output_tokens"] == 150

    report = summarise(MINI_RESPONSES_FORMAT_ERROR)

    # By hand, input_tokens less cached_tokens: 2000-0, 2300-1920 (the format error), 2500-2176.
    assert _counts(report) == {
        "input": 2000 + 380 + 324,
        "cache_read": 1920 + 2176,
        "cache_write": 0,
        "output": 300 + 150 + 210,
        "reasoning": 200 + 96 + 128,
        "requests": 3,
    }
    assert report["cost_estimate"] == pytest.approx(0.0042)


# -- detection, API and command line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (CLAUDE, "claude_code"),
        (CLAUDE_PROJECT, "claude_code"),
        (CLAUDE_REUSED, "claude_code"),
        (ROLLOUT, "codex"),
        (CODEX_SESSIONS, "codex"),
        (CODEX_EXEC, "codex"),
        (GEMINI, "gemini"),
        (GEMINI_CHATS, "gemini"),
        (MINI, "mini_swe"),
        (MINI_RESPONSES, "mini_swe"),
        (MINI_REUSED, "mini_swe"),
        (MINI_RESPONSES_FORMAT_ERROR, "mini_swe"),
    ],
)
def test_detect_format(path: Path, expected: str) -> None:
    assert detect_format(path) == expected
    assert expected in FORMATS


def test_read_usage_is_keyed_by_model() -> None:
    usages = read_usage(ROLLOUT, format="codex")

    assert all(isinstance(u, TokenUsage) and u.model == name for name, u in usages.items())


def test_explicit_format_skips_other_files_in_a_directory(tmp_path: Path) -> None:
    shutil.copy(CLAUDE, tmp_path / "claude.jsonl")
    shutil.copy(GEMINI, tmp_path / "gemini.jsonl")

    with pytest.raises(TokenRecordError, match="several formats"):
        detect_format(tmp_path)
    assert summarise(tmp_path, "gemini")["requests"] == 3
    assert summarise(tmp_path, "claude_code")["requests"] == 4


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(GEMINI), "--format", "gemini"]) == 0

    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    report = json.loads(out)
    assert set(COUNTS) | {"format", "model", "models", "cost_estimate"} <= set(report)
    assert report["models"]["gemini-2.5-flash"]["input"] == 1225


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([str(FIXTURES / "not_a_record.txt")], "cannot tell the format"),
        ([str(FIXTURES / "missing.jsonl")], "no such file"),
        ([str(FIXTURES / "claude_code_no_usage.jsonl")], "no claude_code token usage"),
        ([str(CLAUDE), "--format", "codex"], "no codex token usage"),
        ([str(CLAUDE), "--format", "cursor"], "unknown format 'cursor'"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert message in captured.err


def test_cli_unreadable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "session.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x81")

    assert main([str(binary)]) == 2
    assert "not a UTF-8 text file" in capsys.readouterr().err


def test_python_m_analysis_tokens() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "analysis.tokens", str(MINI)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == 490


def test_codex_exec_stdout_keeps_reasoning_where_the_release_reports_it(tmp_path: Path) -> None:
    # Codex 0.171 puts reasoning_output_tokens in turn.completed (seen by the real-client test).
    lines = [
        {"type": "thread.started", "thread_id": "t"},
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 900,
                "cached_input_tokens": 100,
                "output_tokens": 70,
                "reasoning_output_tokens": 30,
            },
        },
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 2000,
                "cached_input_tokens": 800,
                "output_tokens": 150,
                "reasoning_output_tokens": 55,
            },
        },
    ]
    path = tmp_path / "exec.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (usage,) = read_usage(path, "codex").values()
    assert (usage.input, usage.cache_read, usage.output, usage.reasoning) == (1200, 800, 150, 55)
