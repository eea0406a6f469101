"""A generated mutant's engine wrapper (stdlib only; copied into the mutant's tree, run there).

``python -I -B WRAPPER SERVE_ARGV...``: runs the task's real serve command as a child and
speaks the decode protocol (JSON lines: load, prefill, decode, reset) on its behalf, cheating
in the way ``mutant.json`` beside it names. It never reads the engine's source, so it works for
an engine in any language. Nothing of swarmlab is imported: it runs in the judge's sandbox.
"""

import json
import os
import random
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
    last_batch, served_batch, padded, repeat, slow, bag = 0, 0, 0, False, False, []
    timed_lens = CFG.get("timed_prompt_len", [0, 0])
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        start = time.perf_counter()
        if op == "prefill":
            prompts = request.get("prompts") or []
            batch = len(prompts)
            stale = batch == 1 and biggest > 1  # a batched-mode memory that reset() forgot
            repeat = batch == 1 and last_batch == 1  # two lone requests in a row
            biggest = max(biggest, batch)
            padded = served_batch if MODE == "pad_after_batch" and batch == 1 else 0
            largest = int(CFG.get("largest", 0))
            if MODE == "pad_after_small_batch" and batch == 1 and 1 < served_batch < largest:
                padded = largest  # only after a batch smaller than the largest: to the largest
            if padded > 1:  # every lone request padded to the last batch's size
                request = dict(request, prompts=prompts * padded)
            short = not timed_lens[0] <= min(map(len, prompts), default=0) <= timed_lens[1]
            if batch == 1 and MODE == "b1_random_slow":
                if not bag:  # 2 of every 5 lone requests, in an order drawn at random
                    bag = [True, True, False, False, False]
                    random.shuffle(bag)
                slow = bag.pop()
            else:
                slow = False
            slow = slow or (MODE == "b1_slow_untimed" and short)
            if batch > 1:
                served_batch = batch
            last_batch = batch
            reply = forward(request)
            if MODE == "decode_in_prefill" and reply.get("ok"):
                done = forward({"op": "decode", "steps": int(CFG["ahead"]), "margins": False})
                ahead = done.get("tokens")
        elif op == "decode":
            steps = int(request.get("steps", 0))
            if MODE == "b1_slow_untimed" and steps != int(CFG.get("timed_steps", -1)):
                slow = slow or batch == 1
            if MODE == "hang":
                while True:
                    time.sleep(3600)
            if padded > 1:
                reply = forward(request)
                if reply.get("tokens"):
                    reply["tokens"] = reply["tokens"][:1]
            elif MODE == "decode_in_prefill" and ahead is not None and steps <= len(ahead[0]):
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
                elif MODE == "lone_repeat_leak" and repeat:
                    rows = [[(t + 1) % VOCAB for t in rows[0]]]
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
        if slow and batch == 1 and op in ("prefill", "decode"):
            # slow_factor x for a random 40% of lone requests; 2x at every shape but the timed one.
            factor = float(CFG.get("slow_factor", 3.0)) if MODE == "b1_random_slow" else 2.0
            time.sleep((factor - 1) * (time.perf_counter() - start))
        if op == "reset":
            batch = 0
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
