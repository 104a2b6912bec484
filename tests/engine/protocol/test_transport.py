"""The ZeroMQ transport: a router-dealer round trip, and a malformed message turned into a protocol error."""

import pytest
import trio
import zmq

from engine.protocol.messages import EngineToWorker, Heartbeat, PolicyUpdate, WorkerToEngine
from engine.protocol.transport import ProtocolError, open_socket


def test_router_dealer_round_trip_and_malformed_message(tmp_path):
    address = f"ipc://{tmp_path}/t.sock"

    async def main():
      with trio.fail_after(20):
        async with (
            open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine) as router,
            open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"w1") as dealer,
        ):
            for i in range(200):  # more than fit in one read: exercises the edge-triggered FD handling
                await dealer.send(Heartbeat(worker_id="w1", policy_version=i, busy=0))
            for i in range(200):
                ident, message = await router.receive_from()
                assert ident == b"w1" and message == Heartbeat(worker_id="w1", policy_version=i, busy=0)
            await router.send_to(b"w1", PolicyUpdate(version=3, path="/p"))
            assert await dealer.receive() == PolicyUpdate(version=3, path="/p")
            await dealer._send_frames([b"not msgpack of any message"])
            with pytest.raises(ProtocolError, match=r"^undecodable message \(26 bytes\)"):
                await router.receive_from()

    trio.run(main)
