# hostile: raises a BaseException subclass whose __str__ itself raises
# outcome: error
# rejected-by: malformed_action
class Boom(BaseException):
    def __str__(self):
        raise Boom()


class BaseExceptionEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        raise Boom()
