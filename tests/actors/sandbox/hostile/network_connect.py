# hostile: opens a TCP connection (to a listener the test keeps on the host's loopback) through the real __import__
# needs: network
# outcome: any
# rejected-by: no_dunder_tricks
import random


class NetworkEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        socket = random.__builtins__["__import__"]("socket")
        try:
            conn = socket.create_connection(("127.0.0.1", @@TCP_PORT@@), timeout=2)
            conn.close()
            return "LEAK: CONNECTED", {}
        except OSError as error:
            return f"no network: {error}", {}

    def step(self, action):
        return "", 0.0, True, False, {}
