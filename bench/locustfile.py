"""Load test for POST /v1/tts with locust (QPS, P50/P95/P99), as the seed article suggests.

    # locust comes with the test tools (scripts/setup.sh --test); elsewhere: pip install locust
    locust -f bench/locustfile.py --host http://127.0.0.1:8000 --headless -u 16 -r 4 -t 60s

``TTS_TOKEN`` (optional) is sent as the bearer token. Each simulated user posts a short
sentence (a different seed each time) and waits for the whole WAV; locust prints requests
per second and the latency percentiles, and counts a 503 ``busy`` (admission control at
capacity, with ``Retry-After``) as a failure of its own kind; the last line is a JSON
line of the headline figures. Pass ``--csv out`` for files. A quick check that it runs
(the suite's): ``-u 2 -r 2 -t 3s --only-summary``.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

from locust import HttpUser, between, events, task

SENTENCES = (
    "你好，欢迎使用流式语音合成服务。",
    "今天天气很好，我们一起去公园散步吧。",
    "会议将在下午三点开始，请准时参加。",
)


class TTSUser(HttpUser):
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        token = os.environ.get("TTS_TOKEN")
        if token:
            self.client.headers["Authorization"] = f"Bearer {token}"

    @task
    def speak(self) -> None:
        body = {"text": random.choice(SENTENCES), "seed": random.randrange(1 << 20)}
        with self.client.post("/v1/tts", json=body, catch_response=True) as response:
            if response.status_code == 503 and "busy" in response.text:
                response.failure("busy (at capacity)")
            elif response.status_code != 200 or not response.content.startswith(b"RIFF"):
                response.failure(f"status {response.status_code}")


#: The run's environment (its stats), kept from locust's init event for the report.
_RUN: dict[str, Any] = {}


@events.init.add_listener
def remember(environment: Any, **_: Any) -> None:
    _RUN["environment"] = environment


@events.quit.add_listener
def report(exit_code: int, **_: Any) -> None:
    """The headline figures as one JSON line, the last one: after locust's own tables."""
    total = _RUN["environment"].stats.total
    percentiles = {f"p{q}_ms": total.get_response_time_percentile(q / 100) for q in (50, 95, 99)}
    figures = {
        "bench": "locust_tts",
        "requests": total.num_requests,
        "failures": total.num_failures,
        "qps": round(total.total_rps, 2),
        **percentiles,
    }
    print(json.dumps(figures), flush=True)
