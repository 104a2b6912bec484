# hostile: reaches the sandbox worker's own classes through a frame and patches them for later episodes
# outcome: completes
# rejected-by: no_dunder_tricks
class PatchWorkerEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        try:
            raise ValueError
        except ValueError as error:
            frame = error.__traceback__.tb_frame
        while frame.f_back is not None:
            frame = frame.f_back
        worker_globals = frame.f_globals
        for name in ("Worker", "Channel", "Sink"):
            cls = worker_globals.get(name)
            if isinstance(cls, type):
                cls.patched_by_environment = True
        worker_globals["DETAIL_CHARS"] = 1
        return "patched", {}

    def step(self, action):
        return "ok", 0.0, True, False, {}
