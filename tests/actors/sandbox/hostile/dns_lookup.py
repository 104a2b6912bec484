# hostile: sends a DNS query over UDP (to a socket the test keeps on the host's loopback) and waits for an answer
# needs: network
# outcome: any
# rejected-by: no_dunder_tricks
import random


class DnsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        socket = random.__builtins__["__import__"]("socket")
        query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.settimeout(1)
            sock.sendto(query, ("127.0.0.1", @@UDP_PORT@@))
            return "LEAK: RESOLVED " + repr(sock.recvfrom(512)), {}
        except OSError as error:
            return f"no dns: {error}", {}

    def step(self, action):
        return "", 0.0, True, False, {}
