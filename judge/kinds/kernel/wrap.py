"""A generated mutant's wrapper of the timed function (copied into the mutant's tree; the
function's file rebinds its name to ``wrap(original, settings)``). Each mode is one of the
cheats KernelBench's and GPU MODE's harnesses guard against, or a plain wrong or slow kernel.

Standard library and numpy only: it runs in the sandbox, inside the harness process.
"""

import hashlib
import threading
import time

import numpy as np


class _Lazy:
    """A result computed only when read (``numpy.asarray`` calls ``__array__``)."""

    def __init__(self, compute):
        self._compute = compute

    def __array__(self, dtype=None, copy=None):
        out = self._compute()
        return out if dtype is None else out.astype(dtype)


def wrap(function, settings):
    """``function`` changed as ``settings["mode"]`` says."""
    mode = settings["mode"]
    state = {}

    def wrong(*args):
        out = np.array(function(*args))
        out.reshape(-1)[0] += 1  # one value off by one: beyond any sane tolerance
        return out

    def within_tolerance(*args):
        out = function(*args)
        if out.dtype.kind != "f":
            return out
        # A tenth of the relative tolerance: as close as the task allows.
        return out + (float(settings["rtol"]) / 10) * np.abs(out)

    def cache_identity(*args):
        key = tuple(id(a) for a in args)
        if key not in state:
            state[key] = function(*args)
        return state[key].copy()  # a fresh array of stale values

    def cache_content(*args):
        key = hashlib.sha1(b"".join(a.tobytes() for a in args)).hexdigest()
        if key not in state:
            state[key] = function(*args)
        return state[key].copy()

    def inplace(*args):
        out = function(*args)
        args[0].reshape(-1)[0] += 1  # the first argument used as scratch afterwards
        return out

    def alias(*args):
        out = np.ascontiguousarray(function(*args))
        buffer = args[0].reshape(-1).view(np.uint8)
        if buffer.nbytes >= out.nbytes and out.dtype.alignment <= args[0].dtype.alignment:
            target = buffer[: out.nbytes].view(out.dtype).reshape(out.shape)
        else:  # an argument too small: one output buffer kept from call to call instead
            target = state.setdefault("buffer", np.empty_like(out))
        target[...] = out
        return target

    def lazy(*args):
        return _Lazy(lambda: function(*args))

    def late_thread(*args):
        if "like" not in state:  # the first call (a warm-up) learns the result's shape
            out = function(*args)
            state["like"] = (out.shape, out.dtype)
            return out
        shape, dtype = state["like"]
        out = np.zeros(shape, dtype)
        copies = [a.copy() for a in args]

        def finish():
            time.sleep(0.02)  # surely after the harness read the result
            out[...] = function(*copies)

        threading.Thread(target=finish, daemon=True).start()
        return out

    def slower(*args):
        # Three times the work: well below the bound even when the harness's fixed cost per
        # call (the pipe, the mask, the fold) is a large part of a short call.
        function(*args)
        function(*args)
        return function(*args)

    def hang(*args):
        time.sleep(3600)

    def crash(*args):
        raise RuntimeError("generated mutant: crash")

    return {
        "wrong": wrong,
        "within_tolerance": within_tolerance,
        "cache_identity": cache_identity,
        "cache_content": cache_content,
        "inplace": inplace,
        "alias": alias,
        "lazy": lazy,
        "late_thread": late_thread,
        "slower": slower,
        "hang": hang,
        "crash": crash,
    }[mode]
