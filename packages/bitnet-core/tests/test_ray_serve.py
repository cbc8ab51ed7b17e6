"""``bitnet serve`` as a Ray Serve application on a local Ray cluster on loopback (lane ``ray``).

Two replicas of the demo model, one kernel thread each, behind Ray's HTTP proxy:
the ``openai`` client unchanged, a burst served by both replicas, and a replica
killed with ``ray.kill`` in the middle of a burst.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest
import yaml

from bitnet_core.model.api import load
from bitnet_core.server.app import create_app
from bitnet_core.server.live import LiveServer, free_port
from bitnet_core.server.ray_config import APP_NAME, DEPLOYMENT_NAME, RayServeArgs, serve_config

# Ray's own pydantic models warn on import; not ours to fix
pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

MODEL = "demo-shakespeare"
HEADER = "x-bitnet-replica"
REQUEST_TIMEOUT = 90  # seconds: a request still open after this counts as hung


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster (2 CPUs, loopback) serving two 1-thread replicas of the demo model."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    import ray
    from ray import serve

    from bitnet_core.server.ray_serve import build_app, start_ray

    start_ray(num_cpus=2)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {"replicas": 2, "threads": 1, "kv_budget": 8, "step_tokens": 40}
        serve.run(build_app(args), name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_cli_serves_until_interrupted(tmp_path):
    """``bitnet serve-ray`` starts its own local cluster, serves, and stops on Ctrl-C.

    First in the file: it runs before the module's cluster exists.
    """
    port = free_port()
    log = tmp_path / "serve-ray.log"
    argv = ["serve-ray", "--replicas", "1", "--threads", "1", "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bitnet_core.cli.main", *argv, "--model-name", "cli"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # as a terminal's foreground job gets it: a test run started in the background
            # inherits SIGINT ignored, and Python then keeps ignoring it (no Ctrl-C at all)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "bitnet serve-ray did not come up"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        raw = client.completions.with_raw_response.create(model="cli", prompt="O", max_tokens=8)
        assert raw.headers[HEADER] and raw.parse().usage.completion_tokens >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    assert code == 130, log.read_text()[-3000:]  # `bitnet`'s exit code for an interrupt
    assert "bitnet replica " in log.read_text()  # the replica's startup summary reached the log


def replicas(url: str, want: int = 2, within_s: float = 30.0) -> dict[str, dict]:
    """``GET /replica`` until ``want`` distinct replicas answered (or ``within_s`` passed):
    id -> info. Paced, because Ray's router picks the lowest queue length it has cached,
    and an entry left by an earlier test's burst (kept up to 10 s) can send every quick
    request to the other replica until it expires."""
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + within_s
    with httpx.Client(base_url=url, timeout=30) as c:
        while len(seen) < want and time.monotonic() < deadline:
            info = c.get("/replica").json()
            if info["replica"] in seen:
                time.sleep(0.1)
            seen[info["replica"]] = info
    return seen


def running_replicas() -> int:
    from ray import serve

    status = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME]
    return status.replica_states.get("RUNNING", 0)


def test_openai_client_unchanged_and_same_answers_as_bitnet_serve(cluster):
    """The openai client talks to Ray's proxy unchanged; answers and errors equal ``bitnet serve``'s."""
    ray_client = openai.OpenAI(base_url=f"{cluster}/v1", api_key="unused")
    local_model = load(None, device="cpu")
    with LiveServer(create_app(local_model, MODEL)) as local:
        local_client = openai.OpenAI(base_url=f"{local.url}/v1", api_key="unused")
        for client in (ray_client, local_client):
            assert [m.id for m in client.models.list().data] == [MODEL]
        ask = {"model": MODEL, "prompt": "To be, or not", "max_tokens": 24, "temperature": 0}
        via_ray = ray_client.completions.create(**ask)
        via_local = local_client.completions.create(**ask)
        assert via_ray.choices[0].text == via_local.choices[0].text
        assert via_ray.usage == via_local.usage
        chat = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Speak, friend."}],
            "max_tokens": 16,
            "temperature": 0,
        }
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in ray_client.chat.completions.create(**chat, stream=True)
            if chunk.choices
        )
        assert streamed == local_client.chat.completions.create(**chat).choices[0].message.content
        errors = []
        for client in (ray_client, local_client):
            with pytest.raises(openai.NotFoundError) as info:
                client.completions.create(model="nope", prompt="x", max_tokens=2)
            errors.append(info.value.body)
        assert errors[0] == errors[1] and errors[0]["code"] == "model_not_found"
        for client in (ray_client, local_client):
            with pytest.raises(openai.BadRequestError, match="max_tokens"):
                client.completions.create(model=MODEL, prompt="x", max_tokens=-3)
        local_metrics = httpx.get(f"{local.url}/metrics").text
    ray_metrics = httpx.get(f"{cluster}/metrics").text
    names = {line.split()[2] for line in local_metrics.splitlines() if line.startswith("# TYPE")}
    assert names <= {
        line.split()[2] for line in ray_metrics.splitlines() if line.startswith("# TYPE")
    }
    # the engine settings reached the replica: its step budget and its 8 MiB KV cache
    assert "bitnet_step_tokens_limit 40\n" in ray_metrics

    def blocks(text: str) -> int:
        line = next(x for x in text.splitlines() if x.startswith("bitnet_kv_cache_max_blocks "))
        return int(float(line.split()[1]))

    assert 0 <= blocks(local_metrics) - 128 * blocks(ray_metrics) < 128  # default: 1024 MiB


def test_each_replica_reports_its_startup_summary(cluster):
    seen = replicas(cluster)
    assert len(seen) == 2
    for info in seen.values():
        assert info["threads"] == 1
        assert "selected=" in info["summary"] and "detected=[" in info["summary"]
        assert info["model"].endswith(f"{MODEL}.gguf")
    assert len({info["pid"] for info in seen.values()}) == 2  # two processes, two models
    with httpx.Client(base_url=cluster) as c:
        r = c.get("/health")
        assert r.json()["summary"] == seen[r.headers[HEADER]]["summary"]


def test_burst_is_served_by_both_replicas(cluster):
    client = openai.AsyncOpenAI(base_url=f"{cluster}/v1", api_key="unused")

    async def one(i: int) -> tuple[str, str]:
        raw = await client.completions.with_raw_response.create(
            model=MODEL, prompt=f"Act {i}:", max_tokens=48, temperature=0
        )
        return raw.headers[HEADER], raw.parse().choices[0].finish_reason

    async def burst() -> list[tuple[str, str]]:
        return await asyncio.gather(*(one(i) for i in range(16)))

    results = asyncio.run(asyncio.wait_for(burst(), REQUEST_TIMEOUT))
    served = {replica for replica, _ in results}
    assert len(served) == 2, f"one replica took the whole burst: {results}"
    assert all(finish in ("stop", "length") for _, finish in results)
    # per-replica counters: each replica's /metrics names itself and counts what it answered
    counted: dict[str, float] = {}
    with httpx.Client(base_url=cluster, timeout=30) as c:
        for _ in range(60):
            r = c.get("/metrics")
            replica = r.headers[HEADER]
            line = next(x for x in r.text.splitlines() if x.startswith("bitnet_replica_requests"))
            assert f'replica="{replica}"' in line
            counted[replica] = float(line.split()[-1])
            if counted.keys() == served:
                break
    assert counted.keys() == served and all(n >= 1 for n in counted.values())


def test_conversations_go_to_the_replica_that_holds_their_prefix(cluster):
    """20 conversations of 5 turns, each named by Ray's session header: the turns after the
    first reuse cached KV (each replica has its own prefix cache) and stay on one replica."""

    async def conversation(c: httpx.AsyncClient, i: int, gate: asyncio.Semaphore) -> list:
        messages = [
            {"role": "system", "content": f"Conversation {i}: you are player {i * 7919}."},
            {"role": "user", "content": f"Scene {i}: who enters?"},
        ]
        turns = []
        for turn in range(5):
            async with gate:
                r = await c.post(
                    "/v1/chat/completions",
                    json={"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0},
                    headers={"x-session-id": f"conversation-{i}"},
                )
            r.raise_for_status()
            body = r.json()
            turns.append(
                (r.headers[HEADER], body["usage"]["prompt_tokens_details"]["cached_tokens"])
            )
            reply = body["choices"][0]["message"]["content"]
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"And then, {turn}?"},
            ]
        return turns

    async def all_of_them() -> list[list]:
        gate = asyncio.Semaphore(8)  # 4 a replica, half its --max-active: room at home
        async with httpx.AsyncClient(base_url=cluster, timeout=REQUEST_TIMEOUT) as c:
            return await asyncio.gather(*(conversation(c, i, gate) for i in range(20)))

    convs = asyncio.run(asyncio.wait_for(all_of_them(), 6 * REQUEST_TIMEOUT))
    later = [t for turns in convs for t in turns[1:]]
    hits = sum(1 for _, cached in later if cached > 0)
    home = sum(1 for turns in convs for replica, _ in turns[1:] if replica == turns[0][0])
    assert hits >= 0.9 * len(later), f"{hits} of {len(later)} later turns reused a prefix"
    assert home >= 0.9 * len(later), f"{home} of {len(later)} later turns stayed home"
    assert len({turns[0][0] for turns in convs}) == 2  # the sessions spread over both


async def _request(client: httpx.AsyncClient, i: int, victim: str, on_victim: asyncio.Event):
    """One request of the burst: ('complete'|'error', replica, detail); never raises."""
    stream = i % 2 == 0
    # long enough to be mid-stream when the replica dies, short of the demo model's 256-token context
    body = {"model": MODEL, "prompt": f"Scene {i}:", "max_tokens": 240, "temperature": 0}
    replica = None
    try:
        if not stream:
            r = await client.post("/v1/completions", json=body)
            replica = r.headers.get(HEADER)
            if r.status_code == 200 and r.json()["choices"][0]["finish_reason"]:
                return "complete", replica, "json"
            assert r.status_code >= 500, f"not a server error: {r.status_code} {r.text[:200]}"
            return "error", replica, f"HTTP {r.status_code}"
        async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            replica = r.headers.get(HEADER)
            if r.status_code != 200:
                assert r.status_code >= 500, f"not a server error: {r.status_code}"
                return "error", replica, f"HTTP {r.status_code}"
            lines = []
            async for line in r.aiter_lines():
                if line:
                    lines.append(line)
                if replica == victim and len(lines) == 2:
                    on_victim.set()  # the victim is streaming: kill it now
            assert lines[-1] == "data: [DONE]", f"stream ended without [DONE]: {lines[-2:]}"
            return "complete", replica, "stream"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        # the proxy closed the connection of a stream whose replica died
        return "error", replica, repr(exc)


def test_killed_replica_fails_cleanly_and_is_replaced(cluster):
    import ray

    seen = replicas(cluster)
    victim, survivor = sorted(seen)
    actor = ray.get_actor(seen[victim]["actor_name"], namespace="serve")
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10)

    async def burst():
        on_victim = asyncio.Event()
        async with httpx.AsyncClient(
            base_url=cluster, timeout=timeout, limits=httpx.Limits(max_connections=32)
        ) as client:
            tasks = [asyncio.create_task(_request(client, i, victim, on_victim)) for i in range(12)]
            await asyncio.wait_for(on_victim.wait(), REQUEST_TIMEOUT)
            ray.kill(actor, no_restart=True)
            killed_at = time.monotonic()
            # a hung request would surface here as httpx.ReadTimeout and fail the test
            results = await asyncio.gather(*tasks)
            return results, time.monotonic() - killed_at

    results, settle_s = asyncio.run(burst())
    outcomes = {outcome for outcome, _, _ in results}
    assert outcomes <= {"complete", "error"}
    assert any(replica == victim for _, replica, _ in results), results
    assert any(outcome == "complete" and r == survivor for outcome, r, _ in results), results
    assert settle_s < REQUEST_TIMEOUT, "requests on the dead replica were left hanging"

    # Ray notices the death, starts a replacement; the proxy routes to live replicas only
    deadline = time.monotonic() + 180
    while True:
        after = replicas(cluster, within_s=5)
        assert victim not in after, "a request was routed to the dead replica"
        if len(after) == 2 and running_replicas() == 2:
            break
        assert time.monotonic() < deadline, "the deployment did not return to 2 replicas"
        time.sleep(1)
    client = openai.OpenAI(base_url=f"{cluster}/v1", api_key="unused", max_retries=0)
    for i in range(8):
        answer = client.completions.create(model=MODEL, prompt=f"Epilogue {i}:", max_tokens=16)
        assert answer.choices[0].finish_reason in ("stop", "length")


def test_config_file_builds_the_application(cluster):
    """The printed config passes Ray Serve's own schema, and its import path builds the app."""
    from ray.serve.schema import ServeDeploySchema

    cfg = yaml.safe_load(yaml.safe_dump(serve_config(RayServeArgs(replicas=2, threads=1))))
    schema = ServeDeploySchema.model_validate(cfg)
    (app,) = schema.applications
    module, builder = app.import_path.split(":")
    built = getattr(importlib.import_module(module), builder)(app.args)
    assert type(built).__name__ == "Application"
