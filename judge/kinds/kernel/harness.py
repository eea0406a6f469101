"""The kernel kind's harness: the judge's own program, run inside the sandbox as
``python -I -B -c <this file's text> FILE.py:FUNCTION``, that loads the candidate's function
and calls it on the judge's request. It is never a file of the candidate's tree.

It speaks the engine protocol's framing (one JSON line per request on stdin, one reply line
on stdout; docs/kinds-kernel.md), and the judge reads every reply on its own clock:

* ``load``: import the function (its file loaded by path from the tree).
* ``put``: stage the next call's arguments, masked (XOR with a keystream of a key not yet
  sent): staged, they are noise, so nothing in this process can start on them early.
* ``call`` (timed by the judge): unmask the arguments into the buffers of the previous call
  (the same objects, so a cache keyed on identity answers stale), call the function, and
  reply with the sha256 of the result's dtype, shape and bytes (:func:`commit`): the clock
  stops only after every byte of the result was hashed, and the judge hashes the bytes it
  reads back itself, so no work can be left for later (a lazy object is no ndarray; a thread
  still writing, or a patched ``call`` answering before the result exists, cannot commit to
  the hash of bytes not yet computed). Unmasking and hashing cost both sides the same (~2 ms
  for 2 MB; docs/kinds-kernel.md).
* ``get``: the sha256 of the arguments as they are now (a mutated input), whether the result
  shares memory with an argument or the previous result, its dtype, shape and size;
  ``read`` its bytes from an offset, a chunk at a time (a reply line holds at most 1 MiB).

Only the standard library and numpy: it runs in the task's image. The candidate's code runs
in this process and can replace anything here: what the judge trusts of it is only the
commitment (a hash the judge recomputes over the bytes it reads back) and its own clock; every
reply is validated by the judge, see docs/kinds-kernel.md.
"""

import base64
import hashlib
import importlib.util
import json
import os
import sys
import traceback

import numpy as np


def _load(spec, root):
    """The function ``FILE.py:NAME`` of the tree at ``root``, its file loaded by path."""
    file, _, name = spec.partition(":")
    path = os.path.join(root, file)
    module_spec = importlib.util.spec_from_file_location("candidate_kernel", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return getattr(module, name)


# Raw bytes of the result per ``read`` reply: 4/3 of it in base64 stays under the 1 MiB line.
CHUNK = 512 * 1024


def keystream(key, size):
    """``size`` bytes of mask drawn from ``key`` (the judge makes the same bytes): PCG64's raw
    output, the cheapest stream numpy draws."""
    words = np.random.PCG64(key).random_raw((size + 7) // 8)
    return words.view(np.uint8)[:size]


def commit(array):
    """sha256 of an array's dtype, shape and C-order bytes, as hex: the call's commitment to its
    result. A cryptographic hash, not a cheaper linear fold: a fold (XOR of words) can be
    matched later by fitting a few values within the task's tolerance to any fold sent ahead,
    a hash only by the bytes themselves. The judge computes the same over the bytes it reads."""
    header = json.dumps([array.dtype.str, [int(n) for n in array.shape]]).encode()
    hasher = hashlib.sha256(header)
    hasher.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))  # no copy if contiguous
    return hasher.hexdigest()


def digest(array):
    """sha256 of an array's C-order bytes (reads every byte)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


class Harness:
    """The state of one harness process: the function, the staged and current arguments."""

    def __init__(self, spec, root):
        self.spec = spec
        self.root = root
        self.function = None
        self.staged = []  # masked arguments (uint8 arrays) and their dtypes and shapes
        self.args = []  # the arrays passed to the function, reused call after call
        self.result = None
        self.previous = None

    def handle(self, request):
        op = request.get("op")
        if op == "load":
            sys.path.insert(0, self.root)  # the candidate's module may import its siblings
            self.function = _load(self.spec, self.root)
            return {"ok": True}
        if op == "put":
            self.staged = [
                (np.frombuffer(base64.b64decode(a["data"]), dtype=np.uint8), a["dtype"], a["shape"])
                for a in request["args"]
            ]
            return {"ok": True}
        if op == "call":
            return self.call(int(request["key"]))
        if op == "get":
            return self.get()
        if op == "read":
            return self.read(int(request["at"]))
        return {"ok": False, "error": f"unknown op {op!r}"}

    def call(self, key):
        stream = keystream(key, sum(masked.size for masked, _, _ in self.staged))
        args, at = [], 0
        for i, (masked, dtype, shape) in enumerate(self.staged):
            old = self.args[i] if i < len(self.args) else None
            if old is None or old.dtype.str != dtype or list(old.shape) != list(shape):
                old = np.empty(shape, dtype=np.dtype(dtype))
            np.bitwise_xor(
                masked, stream[at : at + masked.size], out=old.reshape(-1).view(np.uint8)
            )
            at += masked.size
            args.append(old)
        self.args = args
        self.previous, self.result = self.result, None
        result = self.function(*args)
        self.result = result
        if type(result) is not np.ndarray:  # a lazy object, a generator, a subclass: refused
            return {"ok": True, "type": type(result).__name__[:100]}
        return {"ok": True, "sha256": commit(result), "type": "ndarray"}

    def get(self):
        result = self.result
        reply = {"ok": True, "inputs": [digest(a) for a in self.args]}
        if type(result) is not np.ndarray:
            reply["type"] = type(result).__name__[:100]
            return reply
        reply["type"] = "ndarray"
        reply["aliased"] = any(np.shares_memory(result, a) for a in self.args)
        reply["reused"] = type(self.previous) is np.ndarray and np.shares_memory(
            result, self.previous
        )
        reply.update(dtype=result.dtype.str, shape=list(result.shape), nbytes=int(result.nbytes))
        return reply

    def read(self, at):
        """The result's bytes from ``at``, as they are now (a late writer shows here)."""
        raw = np.ascontiguousarray(self.result).reshape(-1).view(np.uint8)[at : at + CHUNK]
        return {"ok": True, "data": base64.b64encode(raw.tobytes()).decode("ascii")}


def main():
    # The protocol's own stream: whatever the candidate prints (Python or C) goes to stderr.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    harness = Harness(sys.argv[1], os.getcwd())
    for line in sys.stdin:
        try:
            reply = harness.handle(json.loads(line))
        except BaseException as exc:  # the candidate's failure: said, and the process lives on
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
