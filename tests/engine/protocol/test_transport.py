"""The ZeroMQ transport: a router-dealer round trip, and a malformed message turned into a protocol error."""

import contextlib

import pytest
import trio
import zmq

from engine.protocol.messages import EngineToWorker, Heartbeat, PolicyUpdate, WorkerToEngine
from engine.protocol.transport import ProtocolError, open_socket


@contextlib.asynccontextmanager
async def router_and_dealer(tmp_path):
    """An engine-side ROUTER and a worker-side DEALER ("w1") connected over ipc, within 20 s."""
    address = f"ipc://{tmp_path}/t.sock"
    with trio.fail_after(20):
        async with (
            open_socket(zmq.ROUTER, address, bind=True, decode=WorkerToEngine) as router,
            open_socket(zmq.DEALER, address, bind=False, decode=EngineToWorker, identity=b"w1") as dealer,
        ):
            yield router, dealer


def test_router_dealer_round_trip_and_malformed_message(tmp_path):
    async def main():
        async with router_and_dealer(tmp_path) as (router, dealer):
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


def test_a_batch_receive_takes_what_waits_in_order_up_to_its_limit_with_bad_frames_in_place(tmp_path):
    async def main():
        async with router_and_dealer(tmp_path) as (router, dealer):
            for i in range(5):
                await dealer.send(Heartbeat(worker_id="w1", policy_version=i, busy=0))
            await dealer._send_frames([b"not msgpack of any message"])
            await dealer._send_frames([b"one frame too many", b"x"])
            await dealer.send(Heartbeat(worker_id="w1", policy_version=5, busy=0))
            received = []
            while len(received) < 8:
                batch = await router.receive_batch_from(3)
                assert 1 <= len(batch) <= 3
                received += batch
            assert all(ident == b"w1" for ident, _ in received)
            messages = [m for _, m in received]
            assert [m.policy_version for m in messages[:5]] == [0, 1, 2, 3, 4] and messages[7].policy_version == 5
            assert isinstance(messages[5], ProtocolError) and str(messages[5]).startswith("undecodable message (26 bytes)")
            assert isinstance(messages[6], ProtocolError) and "expected 2 frames" in str(messages[6])
            assert router.counters["bad_frames"] == 2

    trio.run(main)
