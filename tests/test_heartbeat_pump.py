"""The worker process's heartbeat pump: one round reports every live runtime, several at a time
(one after another, 256 workers' reports outlasted the hub's dead-after time)."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from swarm.worker.runtime import HeartbeatPump, WorkerRuntime


class SlowRuntime:
    """A runtime whose report takes as long as a busy hub's answer."""

    def __init__(self, state: str, seen: dict[str, Any]) -> None:
        self.state = state
        self.reported = 0.0
        self.seen = seen

    def heartbeat(self) -> bool:
        with self.seen["lock"]:
            self.seen["in_flight"] += 1
            self.seen["most"] = max(self.seen["most"], self.seen["in_flight"])
        time.sleep(0.2)
        with self.seen["lock"]:
            self.seen["in_flight"] -= 1
            self.seen["reports"].append(self)
        self.reported = time.monotonic()
        return True


def test_one_round_reports_every_live_runtime_several_at_a_time() -> None:
    seen: dict[str, Any] = {"lock": threading.Lock(), "in_flight": 0, "most": 0, "reports": []}
    live = [SlowRuntime("in_session", seen) for _ in range(24)]
    idle = [SlowRuntime("starting", seen), SlowRuntime("stopped", seen)]
    pump = HeartbeatPump(cast("list[WorkerRuntime]", [*live, *idle]), interval=0.3).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(r.reported for r in live):
            time.sleep(0.05)
    finally:
        pump.stop()
    assert all(runtime.reported for runtime in live)
    assert not any(runtime.reported for runtime in idle)  # not started, or already gone
    assert seen["most"] > 1  # sent side by side, never more than the pump's senders
    assert seen["most"] <= HeartbeatPump.SENDERS
