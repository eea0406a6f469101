"""The kernel kind's harness: the judge's own program, run inside the sandbox as
``python -I -B -c <this file's text> FILE.py:FUNCTION``, that loads the candidate's function
and calls it on the judge's request. It is never a file of the candidate's tree.

It speaks the engine protocol's framing (one JSON line per request on stdin, one reply line
on stdout; docs/kinds-kernel.md), and the judge reads every reply on its own clock:

* ``load``: import the function (its file loaded by path from the tree).
* ``put``: stage the next call's arguments, masked (XOR with a keystream of a seed not yet
  sent): staged, they are noise, so nothing in this process can start on them early.
* ``call`` (timed by the judge): unmask the arguments into the buffers of the previous call
  (the same objects, so a cache keyed on identity answers stale), call the function, and
  reply with the sha256 of the result's bytes: the clock stops only after every byte of the
  result was read, so no work can be left for later (a lazy object is no ndarray; a thread
  still writing changes the bytes after the digest).
* ``get``: the result's bytes, the digests of the arguments as they are now (a mutated
  input), and whether the result shares memory with an argument or the previous result.

Only the standard library and numpy: it runs in the task's image. The candidate's code runs
in this process; what the judge trusts of it is the digest (the judge hashes the bytes it
gets back itself) and its own clock, see docs/kinds-kernel.md.
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


def keystream(seed, size):
    """``size`` bytes of mask drawn from ``seed`` (the judge makes the same bytes)."""
    return np.frombuffer(np.random.default_rng(seed).bytes(size), dtype=np.uint8)


def encode(array):
    """An array as a JSON-safe mapping (dtype, shape, base64 of its C-order bytes)."""
    data = np.ascontiguousarray(array)
    return {
        "dtype": data.dtype.str,
        "shape": list(data.shape),
        "data": base64.b64encode(data.tobytes()).decode("ascii"),
    }


def decode(item):
    """The array :func:`encode` made (a fresh, writable copy)."""
    raw = base64.b64decode(item["data"])
    return np.frombuffer(raw, dtype=np.dtype(item["dtype"])).reshape(item["shape"]).copy()


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
        return {"ok": False, "error": f"unknown op {op!r}"}

    def call(self, key):
        stream = keystream(key, sum(masked.size for masked, _, _ in self.staged))
        args, at = [], 0
        for i, (masked, dtype, shape) in enumerate(self.staged):
            old = self.args[i] if i < len(self.args) else None
            if old is None or old.dtype.str != dtype or list(old.shape) != list(shape):
                old = np.empty(shape, dtype=np.dtype(dtype))
            np.bitwise_xor(masked, stream[at : at + masked.size], out=old.reshape(-1).view(np.uint8))
            at += masked.size
            args.append(old)
        self.args = args
        self.previous, self.result = self.result, None
        result = self.function(*args)
        self.result = result
        if type(result) is not np.ndarray:  # a lazy object, a generator, a subclass: refused
            return {"ok": True, "digest": "", "type": type(result).__name__}
        return {"ok": True, "digest": digest(result), "type": "ndarray"}

    def get(self):
        result = self.result
        reply = {"ok": True, "inputs": [digest(a) for a in self.args]}
        if type(result) is not np.ndarray:
            reply["type"] = type(result).__name__
            return reply
        reply["type"] = "ndarray"
        reply["aliased"] = any(np.shares_memory(result, a) for a in self.args)
        reply["reused"] = type(self.previous) is np.ndarray and np.shares_memory(
            result, self.previous
        )
        reply["out"] = encode(result)
        return reply


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
