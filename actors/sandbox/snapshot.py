"""What an episode must leave as it found it: the sandbox worker's snapshot of the interpreter, compared after
every episode (worker.py asks to be replaced if anything changed).

Part of the worker: `isolation.worker_source()` puts this text in place of the worker's import line for it, so
it runs on the system interpreter with the standard library only.
"""

import _thread
import builtins
import os
import signal
import sys
from operator import is_

WATCHED_SIGNALS = tuple(getattr(signal, name) for name in (
    "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGTERM", "SIGINT", "SIGHUP", "SIGPIPE", "SIGUSR1",
    "SIGUSR2", "SIGCHLD", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGABRT", "SIGTRAP", "SIGIO", "SIGWINCH"))
TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


class Snapshot:
    """What an episode must leave as it found it, compared by identity (an object's __eq__ is never run).

    After every episode: builtins, this worker's own module, the allow-listed modules (and their submodules)
    and the classes defined in them, which is all an environment reaches without an introspection escape.
    Every FULL_CHECK_EVERY episodes: every module and class of the interpreter, for what escapes the static
    checks let through.
    """

    FULL_CHECK_EVERY = 25

    def __init__(self, allowed, *own):
        self.allowed_dicts, self.all_dicts = [builtins.__dict__, *own], [builtins.__dict__, *own]
        for module in list(sys.modules.values()):
            if module is None:
                continue
            # The worker's own module and classes count too: patching them would subvert the next episodes.
            mine = module.__name__ == "__main__" or module.__name__.partition(".")[0] in allowed
            dicts = [module.__dict__] + [v.__dict__ for v in list(module.__dict__.values())
                                         if isinstance(v, type) and not v.__flags__ & (1 << 9)]  # mutable class
            self.all_dicts += dicts
            if mine:
                self.allowed_dicts += dicts
        self.allowed_values = [list(d.values()) for d in self.allowed_dicts]  # also keeps them alive
        self.all_values = [list(d.values()) for d in self.all_dicts]
        self.episodes = 0
        self.signals = {s: signal.getsignal(s) for s in WATCHED_SIGNALS}
        self.fds = self.open_fds()
        self.recursion_limit = sys.getrecursionlimit()
        self.cwd = os.getcwd()
        self.scratch = None  # the folder the episodes may write to, if any: it must stay as it was
        self.scratch_entries = 0

    def watch_scratch(self, path):
        self.scratch, self.scratch_entries = path, len(os.listdir(path))

    @staticmethod
    def open_fds():
        try:
            return len(os.listdir("/proc/self/fd"))
        except OSError:
            return -1

    @staticmethod
    def _unchanged(dicts, values):
        return all(len(d) == len(v) and all(map(is_, d.values(), v)) for d, v in zip(dicts, values))

    def changes(self):
        """Why this interpreter should not serve another episode ("" if it may)."""
        self.episodes += 1
        if _thread._count() or len(sys._current_frames()) > 1:
            return "a thread is still running"
        if not self._unchanged(self.allowed_dicts, self.allowed_values):
            return "builtins, an allowed module or the worker itself was modified"
        if self.episodes % self.FULL_CHECK_EVERY == 0 and not self._unchanged(self.all_dicts, self.all_values):
            return "a module or class was modified"
        if any(signal.getsignal(s) is not handler for s, handler in self.signals.items()):
            return "a signal handler was changed"
        if any(signal.getitimer(timer) != (0.0, 0.0) for timer in TIMERS):
            return "an interval timer was left running"
        if self.open_fds() != self.fds:
            return "a file descriptor was left open"
        if sys.getrecursionlimit() != self.recursion_limit or os.getcwd() != self.cwd:
            return "interpreter settings were changed"
        if self.scratch and len(os.listdir(self.scratch)) != self.scratch_entries:
            return "a file was left in the scratch directory"
        return ""
