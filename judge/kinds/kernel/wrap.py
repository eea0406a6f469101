"""A generated mutant's wrapper of the timed function (copied into the mutant's tree; the
function's file rebinds its name to ``wrap(original, settings)``). Each mode is one of the
cheats KernelBench's and GPU MODE's harnesses guard against, or a plain wrong or slow kernel.

Some modes rewrite the judge's harness itself (``import __main__``: the harness runs as
``python -c``, in the same process as the candidate's code), as a red team's candidate did:
the judge must not trust what that process says beyond what it can check.

Standard library and numpy only: it runs in the sandbox, inside the harness process.
"""

import hashlib
import json
import sys
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


def _fit_xor_fold_to_zero(out):
    """Rewrite three tiny values per 32-bit lane of a float32 result so that the XOR of its
    64-bit words is 0, the fold of an all-zero array: a red team's fit against the linear
    fold the harness once committed to, each value moved by less than ~1e-7 (within any
    ``atol`` above that). A fold is linear, so a few values can be solved for; against a
    cryptographic hash no fit exists, and the result is left as it is.

    Only float32 values below 2 (every exponent's top bit clear) with three values below 4e-7
    in each lane can be fitted: anything else is returned unchanged.
    """
    if out.dtype != np.float32 or out.size % 2 or not out.flags.c_contiguous:
        return out
    flat = out.reshape(-1)
    if not bool((np.abs(flat) < 2).all()):
        return out
    words = flat.view(np.uint32)
    tiny = np.flatnonzero(np.abs(flat) < 4e-7)
    lanes = [tiny[tiny % 2 == lane][:3] for lane in (0, 1)]
    if any(len(p) < 3 for p in lanes):
        return out
    for lane, p in enumerate(lanes):
        words[p] = 0
        rest = int(np.bitwise_xor.reduce(words[lane::2]))
        exponent = (rest >> 23) & 0xFF  # its top bit is clear: every value is below 2
        # Three words whose XOR is ``rest``, each a tiny float: the mantissa and sign with the
        # exponent's low bits, then its remaining bits split in two.
        words[p[0]] = (rest & ~(0xFF << 23)) | ((exponent & 0x1F) << 23)
        words[p[1]] = (exponent & 0x40) << 23
        words[p[2]] = (exponent & 0x20) << 23
    return out


def _off_by_one(function):
    """``function`` with one value of its result off by one: beyond any sane tolerance."""

    def wrong(*args):
        out = np.array(function(*args))
        out.reshape(-1)[0] += 1
        return out

    return wrong


def _patch_harness(function, mode, settings):
    """Rewrite the harness's ``call`` and ``get`` (the candidate's code shares its process)."""
    import __main__ as harness  # the judge's harness, run as ``python -c``

    original_call, original_get = harness.Harness.call, harness.Harness.get
    original_read = harness.Harness.read
    state = {}

    def defer_call(self, key):
        # The first call (a warm-up) honest, learning the result's shape; then every timed
        # call answers at once with the commitment of an all-zero result and no work done.
        if "like" not in state:
            reply = original_call(self, key)
            state["like"] = (self.result.shape, self.result.dtype)
            return reply
        shape, dtype = state["like"]
        real, self.function = self.function, lambda *args: np.zeros(shape, dtype)
        try:
            reply = original_call(self, key)  # unmasks the arguments, commits to the zeros
        finally:
            self.function = real
        state["deferred"] = True
        return reply

    def defer_get(self):
        # The untimed ``get``: the real work, fitted to the commitment sent (zeros) if it can be.
        if state.pop("deferred", False):
            self.result = _fit_xor_fold_to_zero(np.array(function(*self.args)))
        return original_get(self)

    def bad_inputs_get(self):
        reply = original_get(self)
        reply["inputs"] = 7  # an int where a list of digests belongs
        return reply

    def overflow_get(self):
        reply = original_get(self)
        # Its product wraps an int64 to 0, matching ``nbytes`` 0.
        reply.update(shape=[2**32, 2**32], nbytes=0)
        return reply

    def short_read(self, at):
        reply = original_read(self, at)
        reply["data"] = "AAAA"  # base64 of 3 bytes, whatever was asked for
        return reply

    def huge_shape_get(self):
        reply = original_get(self)
        # A size of 0 that no shape numpy can make: its reshape once raised in the judge.
        reply.update(shape=[0, 2**62], nbytes=0)
        return reply

    def type_flip_get(self):
        # The call said ndarray (with its commitment); get says a list, with no layout.
        return {"ok": True, "inputs": original_get(self)["inputs"], "type": "list"}

    def on_demand_get(self):
        # A wrong result seen by its own untimed check (the original function's result) turns
        # into a reply that once made a judge fault: ERROR, never charged, run again.
        reply = original_get(self)
        if type(self.result) is np.ndarray:
            right = np.asarray(function(*self.args))
            rtol, atol = float(settings["rtol"]), float(settings["atol"])
            if not np.allclose(self.result, right, rtol=rtol, atol=atol, equal_nan=True):
                reply.update(shape=[0, 2**62], nbytes=0)
        return reply

    def deaf_read(self, at):
        reply = original_read(self, at)
        if state or at + harness.CHUNK < np.asarray(self.result).nbytes:
            return reply
        state["deaf"] = True
        # The last chunk of the first call: reply on the harness's own protocol stream, then
        # never read stdin again while writing stderr without end (the next put is the
        # judge's: a send nobody takes).
        frame = sys._getframe(1)
        while frame is not None and "protocol" not in frame.f_locals:
            frame = frame.f_back
        protocol = frame.f_locals["protocol"]
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()
        while True:
            sys.stderr.write("still here\n")
            sys.stderr.flush()
            time.sleep(0.002)

    if mode == "defer_to_get_fold_fit":
        harness.Harness.call, harness.Harness.get = defer_call, defer_get
    elif mode == "reply_field_types":
        harness.Harness.get = bad_inputs_get
    elif mode == "shape_overflow":
        harness.Harness.get = overflow_get
    elif mode == "short_read":
        harness.Harness.read = short_read
    elif mode == "huge_shape":
        harness.Harness.get = huge_shape_get
    elif mode == "get_type_flip":
        harness.Harness.get = type_flip_get
    elif mode == "stop_reading_stdin":
        harness.Harness.read = deaf_read
    elif mode == "error_on_demand":
        harness.Harness.get = on_demand_get
        return _off_by_one(function)
    return function


# The modes that rewrite the harness itself.
_HARNESS_MODES = (
    "defer_to_get_fold_fit",
    "reply_field_types",
    "shape_overflow",
    "short_read",
    "huge_shape",
    "get_type_flip",
    "stop_reading_stdin",
    "error_on_demand",
)


def wrap(function, settings):
    """``function`` changed as ``settings["mode"]`` says."""
    mode = settings["mode"]
    state = {}

    wrong = _off_by_one(function)

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

    def late_thread_fold_fit(*args):
        # Plain user code: zeros returned at once (their commitment is what the call sends),
        # the real result written by a thread a moment later, fitted to the zeros' fold.
        if "like" not in state:
            out = function(*args)
            state["like"] = (out.shape, out.dtype)
            return out
        shape, dtype = state["like"]
        out = np.zeros(shape, dtype)
        copies = [a.copy() for a in args]

        def finish():
            time.sleep(0.002)  # after the harness hashed the zeros and replied
            out[...] = _fit_xor_fold_to_zero(np.array(function(*copies)))

        threading.Thread(target=finish, daemon=True).start()
        return out

    def slower(*args):
        # Three times the work: well below the bound even when the harness's fixed cost per
        # call (the pipe, the mask, the hash) is a large part of a short call.
        function(*args)
        function(*args)
        return function(*args)

    def hang(*args):
        time.sleep(3600)

    def crash(*args):
        raise RuntimeError("generated mutant: crash")

    if mode in _HARNESS_MODES:
        return _patch_harness(function, mode, settings)
    return {
        "wrong": wrong,
        "within_tolerance": within_tolerance,
        "cache_identity": cache_identity,
        "cache_content": cache_content,
        "inplace": inplace,
        "alias": alias,
        "lazy": lazy,
        "late_thread": late_thread,
        "late_thread_fold_fit": late_thread_fold_fit,
        "slower": slower,
        "hang": hang,
        "crash": crash,
    }[mode]
