"""Sandbox worker: runs one untrusted environment at a time for the pool in `actors/sandbox/pool.py`.

Never imported by the engine. The pool starts it as `python3.11 -I -S -c <this file's text> <config json>`
(the config: protocol.WorkerConfig, read here into `WorkerConfig`), inside bubblewrap where it can, so it may
use the standard library only and sees no file of the host but /usr. The seccomp filter, Landlock, the
interpreter snapshot and the tool-use base class live in `seccomp.py`, `landlock.py`, `snapshot.py` and
`tool_env.py`, whose texts `isolation.worker_source()` puts in place of the imports below: the worker is still
one text, and imports nothing of this repository inside the sandbox.
Start-up: take private copies of the stdin/stdout pipes for the frames and point fds 0-2 at /dev/null, set the
resource limits; at the fallback levels (config `guard_writes`) install Landlock if asked (the current
directory, the pool's scratch directory for this worker, is all it may write) and the seccomp filter's
host-state list (plus the file-write list without Landlock), refusing to start if that fails; install the
seccomp deny-list, snapshot the interpreter state, answer `ready`.
Then it serves requests, one frame in, one frame out: a frame is a 4-byte big-endian length and a JSON object.
Each episode's source is executed in a fresh module with a fresh builtins dict whose `__import__` only admits
the allow-list; after the episode the interpreter is compared with the snapshot (builtins, module and class
dicts, signal handlers, threads, open files) and the worker asks to be replaced if anything changed.
"""

import _json
import builtins
import ctypes
import gc
import json
import linecache
import math
import os
import random
import resource
import signal
import sys
import traceback
import types

# isolation.worker_source() puts the texts of these modules in place of the next four lines
from actors.sandbox.landlock import install_landlock, landlock_read_paths
from actors.sandbox.seccomp import install_seccomp
from actors.sandbox.snapshot import Snapshot
from actors.sandbox.tool_env import ToolUseBaseEnv, tool_plan_replies, tool_request

DETAIL_CHARS = 2000
WORKER_FILE = sys._getframe().f_code.co_filename  # "<string>" when started with -c
MODULE_NAME = "spade_env"
COMPILED_CACHE = 32
SOURCE_NAME = "<environment>"
HIDDEN_BUILTINS = ("open", "input", "breakpoint", "exit", "quit", "help", "copyright", "credits", "license")


# ---------------------------------------------------------------------------------------------- limits
class WorkerConfig:
    """protocol.WorkerConfig (the pool's side, where the fields are described) as the worker reads it: msgspec is
    not on this interpreter, so the JSON is checked here to have exactly those fields."""

    FIELDS = ("memory_mb", "cpu_seconds", "file_size_mb", "open_files", "max_output_bytes", "allowed_modules",
              "seccomp", "die_with_parent", "parent_pid", "guard_writes", "landlock")

    def __init__(self, text):
        values = json.loads(text)
        if not isinstance(values, dict) or sorted(values) != sorted(self.FIELDS):
            raise ValueError(f"the worker config must have exactly the fields {', '.join(self.FIELDS)}")
        for name in self.FIELDS:
            setattr(self, name, values[name])


def set_limits(config):
    mb = 1024 * 1024
    for which, value in (
        (resource.RLIMIT_AS, config.memory_mb * mb),
        (resource.RLIMIT_FSIZE, config.file_size_mb * mb),
        (resource.RLIMIT_NOFILE, config.open_files),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, 0),  # ignored for root; the seccomp filter and namespaces cover that case
    ):
        resource.setrlimit(which, (value, value))


def restart_cpu_clock(seconds):
    """Give the coming episode `seconds` of CPU time; SIGXCPU (fatal) beyond that."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


# ---------------------------------------------------------------------------------------------- frames
class Channel:
    """Frames over private copies of the original stdin/stdout fds."""

    def __init__(self, read_fd, write_fd, max_output_bytes):
        self.read_fd, self.write_fd, self.max_output_bytes = read_fd, write_fd, max_output_bytes
        # The C encoder and scanner, bound now: an environment may patch the json module's Python parts.
        plain = _json.make_encoder(None, _refuse, _json.encode_basestring, None, ":", ",", False, False, False)
        lenient = _json.make_encoder(None, _jsonable, _json.encode_basestring, None, ":", ",", False, True, False)
        scan = _json.make_scanner(json.JSONDecoder())
        join = "".join
        self.encode = lambda value: join(plain(value, 0))
        self.info_encode = lambda value: join(lenient(value, 0))
        self.decode = lambda text: scan(text, 0)[0]

    def _read_exact(self, n):
        chunks, left = [], n
        while left:
            chunk = os.read(self.read_fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        size = int.from_bytes(self._read_exact(4), "big")
        return self.decode(self._read_exact(size).decode("utf-8"))

    def send(self, message):
        try:
            text = self.encode(message)
        except (TypeError, ValueError) as exc:
            text = self.encode(failure("protocol", f"reply could not be encoded: {exc}"))
        data = text.encode("utf-8", "replace")  # lone surrogates only occur inside JSON strings
        if len(data) > self.max_output_bytes:
            data = self.encode(failure("limit", f"reply of {len(data)} bytes exceeds max_output_bytes="
                                                f"{self.max_output_bytes}")).encode()
        data = len(data).to_bytes(4, "big") + data
        while data:
            data = data[os.write(self.write_fd, data):]


def _jsonable(value):
    return repr(value)[:200]


def _refuse(value):
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def failure(kind, detail):
    return {"type": "failed", "kind": kind, "detail": detail[-DETAIL_CHARS:]}


class Sink:
    """Stands in for sys.stdout/sys.stderr: the environment's prints are counted and dropped."""

    def __init__(self):
        self.chars = 0

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.chars += len(text)
        return len(text)

    def flush(self):
        pass

    def close(self):
        pass

    def writable(self):
        return True

    def isatty(self):
        return False


# ---------------------------------------------------------------------------------------------- episodes
def guarded_import_factory(allowed, real_import):
    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not allowed in environments")
        if name.partition(".")[0] not in allowed:
            raise ImportError(f"import of {name!r} is not allowed in environments")
        return real_import(name, globals, locals, fromlist, level)
    return guarded_import


def describe(exc):
    """The traceback without the worker's own frames (the environment's code is all that matters)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == WORKER_FILE:
        tb = tb.tb_next
    try:
        lines = traceback.format_exception(type(exc), exc, tb)
    except BaseException:  # noqa: BLE001 - a hostile exception may break formatting itself
        lines = [f"{type(exc).__name__} (could not be formatted)"]
    return "".join(lines).strip()[-DETAIL_CHARS:]


def kind_of(exc):
    return "limit" if isinstance(exc, (MemoryError, RecursionError)) else "error"


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Worker:
    def __init__(self, channel, config):
        self.channel = channel
        self.config = config
        self.allowed = frozenset(config.allowed_modules)
        self.pristine_builtins = dict(builtins.__dict__)
        for name in HIDDEN_BUILTINS:
            self.pristine_builtins.pop(name, None)
        self.pristine_builtins["__import__"] = guarded_import_factory(self.allowed, builtins.__import__)
        self.env = None
        self.module = None
        self.episode_builtins = None
        self.sink = Sink()
        self.snapshot = None
        self.compiled = {}

    def serve(self):
        handlers = {"load": self.load, "reset": self.reset, "step": self.step, "solution": self.solution,
                    "end": self.end, "call_tool": self.tool, "inspect_tools": self.tool}
        while True:
            try:
                request = self.channel.receive()
            except EOFError:
                return
            handler = handlers.get(request.get("op"))
            reply = handler(request) if handler else failure("protocol", f"unknown op {request.get('op')!r}")
            self.channel.send(reply)
            if reply.get("type") == "ended" and reply.get("retire"):
                return

    def load(self, request):
        if self.env is not None or self.module is not None:
            self.forget()
        restart_cpu_clock(self.config.cpu_seconds)
        random.seed()
        source = request["source"]
        code = self.compiled.get(source)
        if code is None:
            try:
                code = compile(source, SOURCE_NAME, "exec", dont_inherit=True)
            except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
                return failure("invalid", describe(exc))
            if len(self.compiled) >= COMPILED_CACHE:
                self.compiled.pop(next(iter(self.compiled)))
            self.compiled[source] = code  # code objects are immutable: an environment played again reuses it
        module = types.ModuleType(MODULE_NAME)
        self.episode_builtins = dict(self.pristine_builtins)
        module.__dict__["__builtins__"] = self.episode_builtins
        module.__dict__["ToolUseBaseEnv"] = ToolUseBaseEnv  # the tool-use setting's base class (tool_env.py)
        self.module = module
        sys.modules[MODULE_NAME] = module
        linecache.cache[SOURCE_NAME] = (len(source), None, source.splitlines(True), SOURCE_NAME)
        sys.stdout = sys.stderr = self.sink
        try:
            exec(code, module.__dict__)
            found = [v for k, v in list(module.__dict__.items())
                     if isinstance(v, type) and k.endswith("Env") and v.__module__ == MODULE_NAME]
            if len(found) > 1:  # a base class and its subclass: take the one nothing derives from
                found = [c for c in found if not any(o is not c and issubclass(o, c) for o in found)]
            if len(found) != 1:
                return failure("invalid", f"expected exactly one class whose name ends in 'Env', found "
                                          f"{len(found)}")
            cls = found[0]
            for name in ("reset", "step"):
                if not callable(getattr(cls, name, None)):
                    return failure("invalid", f"{cls.__name__} has no {name}() method")
            self.env = cls()
            return {"type": "loaded", "class_name": cls.__name__,
                    "has_solution": callable(getattr(cls, "solution", None))}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are environment errors here
            return failure(kind_of(exc), describe(exc))

    def call(self, method, *args, **kwargs):
        if self.env is None:
            raise LookupError("no environment is loaded")
        sys.stdout = sys.stderr = self.sink
        return getattr(self.env, method)(*args, **kwargs)

    def reset(self, request):
        try:
            result = self.call("reset", seed=request["seed"])
            if isinstance(result, str):
                result = (result, {})
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                return failure("protocol", f"reset() must return (str, dict), got {_shape(result)}")
            observation, info = result
            if not isinstance(observation, str) or not isinstance(info, dict):
                return failure("protocol", f"reset() must return (str, dict), got ({_type(observation)}, "
                                           f"{_type(info)})")
            return {"type": "reset", "observation": str(observation), "info": self.plain(info)}
        except BaseException as exc:  # noqa: BLE001
            return failure(kind_of(exc), describe(exc))

    def step(self, request):
        try:
            result = self.call("step", request["action"])
            if not isinstance(result, (tuple, list)) or len(result) != 5:
                return failure("protocol", f"step() must return a 5-tuple, got {_shape(result)}")
            observation, reward, terminated, truncated, info = result
            if not isinstance(observation, str):
                return failure("protocol", f"step() observation must be str, got {_type(observation)}")
            if not is_number(reward):
                return failure("protocol", f"reward must be a number, got {_type(reward)}")
            reward = float(reward)
            if not math.isfinite(reward):
                return failure("protocol", f"reward is {reward} (must be finite)")
            if not isinstance(terminated, bool) or not isinstance(truncated, bool):
                return failure("protocol", f"terminated and truncated must be bool, got ({_type(terminated)}, "
                                           f"{_type(truncated)})")
            if not isinstance(info, dict):
                return failure("protocol", f"step() info must be dict, got {_type(info)}")
            return {"type": "step", "observation": str(observation), "reward": reward,
                    "terminated": bool(terminated), "truncated": bool(truncated), "info": self.plain(info)}
        except BaseException as exc:  # noqa: BLE001
            return failure(kind_of(exc), describe(exc))

    def solution(self, request):
        try:
            if not callable(getattr(self.env, "solution", None)):
                return {"type": "solution", "actions": None}
            actions = self.call("solution")
            if isinstance(self.env, ToolUseBaseEnv) and actions is not None:
                actions = tool_plan_replies(actions)  # the tool-call plan as the replies of a scripted agent
            if actions is None:
                return {"type": "solution", "actions": None}
            if isinstance(actions, str):
                actions = actions.splitlines()
            if not isinstance(actions, (list, tuple)):
                return failure("protocol", f"solution() must return a list of str, got {_type(actions)}")
            if not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in actions):
                return failure("protocol", "solution() must return a list of str")
            return {"type": "solution", "actions": [a if isinstance(a, str) else str(a) for a in actions]}
        except BaseException as exc:  # noqa: BLE001
            return failure(kind_of(exc), describe(exc))

    def tool(self, request):
        """A tool call or the tool-use specs (tool_env.py), on the loaded environment."""
        try:
            sys.stdout = sys.stderr = self.sink
            return tool_request(self.env, request)
        except BaseException as exc:  # noqa: BLE001
            return failure(kind_of(exc), describe(exc))

    def plain(self, info):
        """The info dict as JSON-safe data (unencodable values become their repr)."""
        if not info:
            return {}
        return self.channel.decode(self.channel.info_encode(dict(info)))

    def forget(self):
        self.env = None
        module, self.module = self.module, None
        if module is not None:
            module.__dict__.clear()
        sys.modules.pop(MODULE_NAME, None)
        linecache.cache.pop(SOURCE_NAME, None)
        sys.stdout = sys.stderr = self.sink
        gc.collect()  # runs leftover __del__ methods now, inside this episode's time limit

    def end(self, request):
        try:
            self.forget()
            why = self.snapshot.changes()
        except BaseException as exc:  # noqa: BLE001
            why = f"clean-up failed: {type(exc).__name__}"
        return {"type": "ended", "retire": bool(why), "reason": why}


def _type(value):
    return type(value).__name__


def _shape(value):
    if isinstance(value, (tuple, list)):
        return f"{_type(value)} of length {len(value)}"
    return _type(value)


def guard_host_files(config):
    """Landlock if asked, then one seccomp filter: the deny-list if asked, and at the fallback levels the lists
    that keep the host's files as they are. Returns why the deny-list is not in force ("" if it is) and why the
    worker must not start ("" if it may)."""
    guard, landlock = config.guard_writes, config.guard_writes and config.landlock
    if landlock:
        refused = install_landlock(os.getcwd(), landlock_read_paths())
        if refused:
            return "", f"Landlock could not be installed: {refused}"
    if not (config.seccomp or guard):
        return "not requested", ""
    seccomp = install_seccomp(general=config.seccomp, host_state=guard, file_writes=guard and not landlock)
    if guard and seccomp:
        return seccomp, f"host file writes cannot be refused: seccomp: {seccomp}"
    return (seccomp if config.seccomp else "not requested"), ""


def main():
    config = WorkerConfig(sys.argv[1])
    read_fd, write_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    channel = Channel(read_fd, write_fd, config.max_output_bytes)
    try:
        if config.die_with_parent:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            if config.parent_pid is not None and os.getppid() != config.parent_pid:
                return  # the pool died before the line above took effect
        for name in config.allowed_modules:
            __import__(name)
        set_limits(config)
        seccomp, refused = guard_host_files(config)
        if refused:
            channel.send(failure("crashed", refused))
            return
        worker = Worker(channel, config)
        sys.stdout = sys.stderr = worker.sink
        worker.snapshot = Snapshot(worker.allowed, worker.pristine_builtins, ToolUseBaseEnv.__dict__)  # watched too
        worker.snapshot.watch_scratch(os.getcwd() if config.guard_writes else "/tmp")
        gc.collect()
        gc.freeze()  # later collections only walk what the episodes allocated
    except BaseException as exc:  # noqa: BLE001 - tell the pool why start-up failed
        channel.send(failure("crashed", describe(exc)))
        return
    channel.send({"type": "ready", "pid": os.getpid(), "python": sys.version.split()[0],
                  "seccomp": seccomp == "", "seccomp_detail": seccomp})
    worker.serve()


if __name__ == "__main__":
    main()
