"""A generated mutant's engine wrapper (stdlib only; copied into the mutant's tree, run there).

``python -I -B WRAPPER SERVE_ARGV...``: runs the task's real serve command as a child and
speaks the decode protocol (JSON lines: load, prefill, decode, reset) on its behalf, cheating
in the way ``mutant.json`` beside it names. It never reads the engine's source, so it works for
an engine in any language. Nothing of swarmlab is imported: it runs in the judge's sandbox.
"""

import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "mutant.json"), encoding="utf-8") as fh:
    CFG = json.load(fh)
MODE = CFG["mode"]
VOCAB = int(CFG.get("vocab", 2))


def start_checks(argv):
    """The modes that act before any request: then the real engine is exec'd (or not)."""
    if MODE == "network":
        try:
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1; connect() sends no packet
        except OSError as exc:
            sys.exit(f"mutant network: no route out of the sandbox ({exc})")
        os.execvp(argv[0], argv)  # the sandbox has a network: serve honestly (PASS betrays it)
    if MODE == "read_judge":
        found = [p for p in CFG.get("paths", []) if os.path.lexists(p)]
        target = CFG.get("basename")
        deadline = time.monotonic() + 3.0
        for top, dirs, files in os.walk("/"):
            dirs[:] = [d for d in dirs if top != "/" or d not in ("proc", "sys", "dev")]
            if target in files:
                found.append(os.path.join(top, target))
            if top.count(os.sep) >= 4:
                dirs[:] = []
            if found or time.monotonic() > deadline:
                break
        if not found:
            sys.exit("mutant read_judge: none of the judge's private files is reachable")
        os.execvp(argv[0], argv)
    if MODE == "fake_metric":
        fake = {"tok_s": 999999.0, "score": 999999.0, "x_baseline": 999.0}
        print("FINAL " + json.dumps(fake), file=sys.stderr, flush=True)
        for path in (
            "/tmp/timing.json",
            os.path.join(os.environ.get("SWARMLAB_BUILD", "/tmp"), "timing.json"),
        ):
            try:
                with open(path, "w", encoding="utf-8") as out:
                    json.dump(fake, out)
            except OSError:
                pass
        os.execvp(argv[0], argv)


def main():
    argv = sys.argv[1:]
    start_checks(argv)
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def forward(request):
        child.stdin.write(json.dumps(request) + "\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            sys.exit("mutant: the engine exited")
        return json.loads(line)

    batch, biggest, stale, ahead, last_rows = 0, 0, False, None, None
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        start = time.perf_counter()
        if op == "prefill":
            batch = len(request.get("prompts") or [])
            stale = batch == 1 and biggest > 1  # a batched-mode memory that reset() forgot
            biggest = max(biggest, batch)
            reply = forward(request)
            if MODE == "decode_in_prefill" and reply.get("ok"):
                done = forward({"op": "decode", "steps": int(CFG["ahead"]), "margins": False})
                ahead = done.get("tokens")
        elif op == "decode":
            steps = int(request.get("steps", 0))
            if MODE == "hang":
                while True:
                    time.sleep(3600)
            if MODE == "decode_in_prefill" and ahead is not None and steps <= len(ahead[0]):
                reply = {"ok": True, "tokens": [row[:steps] for row in ahead]}
            elif MODE == "early_stop" and steps > 1:
                cut = min(8, max(1, steps // 4))
                reply = forward(dict(request, steps=steps - cut))
                if reply.get("tokens") is not None:
                    reply["tokens"] = [row + [0] * cut for row in reply["tokens"]]
            else:
                reply = forward(request)
            rows = reply.get("tokens")
            if rows:
                if MODE == "row_shift" and len(rows) > 1:
                    rows = rows[1:] + rows[:1]
                elif MODE == "garbage_row":
                    rows = [*rows[:-1], [(t + 1) % VOCAB for t in rows[-1]]]
                elif MODE == "stale_state" and stale and last_rows:
                    old = last_rows[0]
                    rows = [
                        [
                            old[i] if i < len(old) and old[i] != t else (t + 1) % VOCAB
                            for i, t in enumerate(rows[0])
                        ]
                    ]
                reply["tokens"] = rows
                if batch > 1:
                    last_rows = rows
        else:
            if op == "reset":
                ahead = None
            reply = forward(request)
        if MODE == "b1_slow" and batch == 1 and op in ("prefill", "decode"):
            time.sleep(time.perf_counter() - start)  # every B=1 request twice as slow
        if op == "reset":
            batch = 0
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
