# hostile: resolves a host name
# needs: namespaces
# outcome: any
# rejected-by: no_dunder_tricks
import random


class DnsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        socket = random.__builtins__["__import__"]("socket")
        try:
            return "LEAK: RESOLVED " + str(socket.getaddrinfo("example.com", 80)), {}
        except OSError as error:
            return f"no dns: {error}", {}

    def step(self, action):
        return "", 0.0, True, False, {}
