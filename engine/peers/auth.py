"""Who may talk to the engine.

- tcp worker socket: CURVE (engine/protocol/keys.py). `WorkerAuthenticator` is the ZAP handler (pyzmq's thread
  authenticator, which answers libzmq's handshake requests on its own thread, outside Trio) and admits exactly the
  run's worker key; every handshake it refuses is counted.
- learner socket: the engine starts its learner with a per-run secret in the environment (`LEARNER_TOKEN_ENV`);
  `LearnerGate` takes the first `LearnerHello` that carries it and after that only messages from the identity that
  sent it. Anything else (a forged `PolicyPublished`, a second hello) is rejected and counted.
- ipc worker socket: in an owner-only folder, and `HelloGate` admits a hello only with the run's ipc secret
  (RUN_DIR/keys/ipc.secret, engine/protocol/keys.py); a peer that says hello without it is never a worker.
- worker results: only from the worker holding the task's lease (engine/peers/dispatch.py, engine/peers/leases.py).
"""

from __future__ import annotations

import collections
import hmac
import logging
import secrets
import threading

import zmq
from zmq.auth.thread import ThreadAuthenticator

from engine.protocol.keys import ZAP_DOMAIN, ServerKeys
from engine.protocol.messages import LearnerHello, WorkerHello


class WorkerAuthenticator:
    def __init__(self, keys: ServerKeys, context: zmq.Context | None = None):
        self._allowed = keys.worker_public.encode()
        self._lock = threading.Lock()
        self.counters: collections.Counter[str] = collections.Counter()
        log = logging.getLogger("spade.zap")
        log.addHandler(logging.NullHandler())
        log.propagate = False
        self._auth = ThreadAuthenticator(context or zmq.Context.instance(), log=log)

    def callback(self, domain: str, client_key: bytes) -> bool:  # called on the authenticator's thread
        admitted = hmac.compare_digest(client_key, self._allowed)
        with self._lock:
            self.counters["admitted_peers" if admitted else "refused_peers"] += 1
        return admitted

    def start(self) -> None:
        """Before the CURVE socket binds, so no handshake ever finds no handler."""
        self._auth.start()
        self._auth.configure_curve_callback(domain=ZAP_DOMAIN.decode(), credentials_provider=self)

    def stop(self) -> None:
        self._auth.stop()


def new_token() -> str:
    return secrets.token_hex(16)


class LearnerGate:
    def __init__(self, token: str):
        self._token = token
        self.ident: bytes | None = None
        self.counters: collections.Counter[str] = collections.Counter()

    def admit(self, ident: bytes, message) -> bool:
        """Whether `message` from `ident` comes from the engine's own learner."""
        if self.ident is None:
            if isinstance(message, LearnerHello) and hmac.compare_digest(message.token.encode(), self._token.encode()):
                self.ident = ident
                return True
        elif ident == self.ident and not isinstance(message, LearnerHello):
            return True
        self.counters["rejected_messages"] += 1
        return False


class HelloGate:
    """Worker hellos on an ipc socket: only with the run's ipc secret (None: a tcp socket, where CURVE decides)."""

    def __init__(self, secret: str | None):
        self._secret = secret
        self.counters: collections.Counter[str] = collections.Counter()

    def admit(self, message: WorkerHello) -> bool:
        if self._secret is None or hmac.compare_digest(message.secret.encode(), self._secret.encode()):
            return True
        self.counters["refused_hellos"] += 1
        return False
