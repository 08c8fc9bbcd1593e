"""statekeep.background: a paced Periodic (the tick sets the next wait) and a Consumer's idle item."""

from __future__ import annotations

import logging
import threading
import time

from statekeep.background import Consumer, Periodic

log = logging.getLogger(__name__)


def test_a_paced_tick_sets_the_next_wait_and_can_stop_its_own_loop():
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> float | None:
        ticks.append(time.monotonic())
        if len(ticks) == 3:
            loop.stop()  # from the loop's own thread: no join
            done.set()
        return 0.0 if len(ticks) < 2 else None  # at once, then the (long) interval

    loop = Periodic("test-paced", 0.3, tick, what="paced test", log=log, immediately=True, paced=True)
    loop.start()
    assert done.wait(5)
    loop.stop()
    assert len(ticks) == 3
    assert ticks[1] - ticks[0] < 0.25 <= ticks[2] - ticks[1]


def test_an_unpaced_tick_result_is_ignored():
    ticks: list[float] = []
    loop = Periodic("test-unpaced", 0.05, lambda: ticks.append(time.monotonic()) or 0.0, what="test", log=log,
                    immediately=True)
    loop.start()
    deadline = time.monotonic() + 5
    while len(ticks) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop()
    assert ticks[1] - ticks[0] >= 0.04


def test_a_consumer_handles_its_idle_item_when_nothing_arrives_by_the_deadline():
    handled: list[str] = []
    idle = threading.Event()

    def handle(item: str) -> None:
        handled.append(item)
        if item == "idle":
            idle.set()

    started = time.monotonic()
    consumer: Consumer[str] = Consumer("test-idle", handle, what="test", log=log, idle="idle",
                                       idle_after=lambda: started + 0.2 - time.monotonic())
    consumer.put("a")
    assert idle.wait(5)
    consumer.stop()
    assert handled[0] == "a" and handled[1] == "idle"
