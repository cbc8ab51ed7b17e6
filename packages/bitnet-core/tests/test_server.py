"""``bitnet serve`` against a live uvicorn server on loopback, with the openai client."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from formats_testlib import TEXT_MODEL  # noqa: E402

from bitnet_core.model.api import load  # noqa: E402
from bitnet_core.model.random import random_model_file  # noqa: E402
from bitnet_core.server.app import create_app  # noqa: E402
from bitnet_core.server.live import LiveServer  # noqa: E402

CONFIG = TEXT_MODEL
API_KEY = "sk-test-key"
BODY_CAP = 1 << 16


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("server") / "tiny.gguf"
    random_model_file(path, CONFIG, seed=3)
    return load(path, device="cpu")


@pytest.fixture(scope="module")
def server(model):
    app = create_app(
        model,
        "tiny",
        api_key=API_KEY,
        max_active=4,
        max_queue=64,
        default_max_tokens=16,
        max_body_bytes=BODY_CAP,
    )
    with LiveServer(app) as live:
        yield live


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0)


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok"
    assert health["summary"].startswith("requested=cpu")


def test_completion_matches_engine(client, model):
    r = client.completions.create(model="tiny", prompt="hello", max_tokens=8, temperature=0)
    assert r.choices[0].text == model.generate("hello", max_tokens=8, temperature=0)
    assert r.usage.completion_tokens <= 8
    assert r.choices[0].finish_reason in ("stop", "length")


def test_chat_and_stream_agree(client):
    msgs = [{"role": "user", "content": "hi there"}]
    full = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=10, temperature=0, stream=True
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == full.choices[0].message.content


def test_streamed_completion_seeded(client):
    args = dict(model="tiny", prompt="abc", max_tokens=12, temperature=0.9, seed=11)
    a = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args))
    b = client.completions.create(**args).choices[0].text
    assert a == b


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"model": "tiny", "prompt": "x", "temperature": -1}, 400, "temperature"),
        ({"model": "tiny", "prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
        ({"model": "tiny", "prompt": "x", "top_p": 0}, 400, "top_p"),
        ({"model": "nope", "prompt": "x"}, 404, "does not exist"),
        ({"model": "tiny"}, 400, "prompt"),
        ({"model": "tiny", "prompt": "x " * 400}, 400, "context"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 500}, 400, "max_tokens"),
        ({"model": "tiny", "prompt": [1, 2, 99999]}, 400, "vocabulary"),
        ({"model": "tiny", "prompt": "x", "logprobs": 99}, 400, "logprobs"),
        ({"model": "tiny", "prompt": "x", "logit_bias": {"5": 3}}, 400, "logit_bias"),
        ({"model": "tiny", "prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
        # a field named "" (Schemathesis): was accepted, its falsy name passing the check
        ({"model": "tiny", "prompt": "x", "": "y"}, 400, "'' is not supported"),
        ({"model": "tiny", "prompt": "x", "response_format": {"type": "xml"}}, 400, "type"),
        (
            {"model": "tiny", "prompt": "x", "response_format": {"type": "json_schema"}},
            400,
            "schema",
        ),
        (
            {
                "model": "tiny",
                "prompt": "x",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "nonsense"}},
                },
            },
            400,
            "response_format",
        ),
        (
            {"model": "tiny", "prompt": "x", "stream_options": {"bogus": True}},
            400,
            "stream_options",
        ),
        ({"model": "tiny", "prompt": "x", "n": 2}, 400, "n"),
    ],
)
def test_bad_requests_are_4xx_with_openai_body(server, body, status, needle):
    r = httpx.post(
        server.url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"}
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] or needle == err.get("param")
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def _raw_post(server, head: str, body_chunks: list[bytes]) -> bytes:
    """Send a request head and some body over a socket, without finishing the body; the reply."""
    import socket

    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(head.encode())
        for chunk in body_chunks:
            sock.sendall(chunk)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
            re.search(rb"content-length: (\d+)", data, re.I)[1]
        ):
            more = sock.recv(65536)
            if not more:
                break
            data += more
        return data


def test_body_over_the_cap_is_413_before_it_is_read(server):
    auth = f"Authorization: Bearer {API_KEY}\r\n"
    # a declared length over the cap: answered at once, with no body sent at all
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + auth
        + f"Content-Length: {1 << 30}\r\n\r\n"
    )
    reply = _raw_post(server, head, [])
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"request_too_large" in reply
    # a chunked body: refused once it passes the cap, while the client is still sending
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + auth
        + "Transfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 4096
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    reply = _raw_post(server, head, [b'4\r\n{"a"\r\n'] + [chunk] * (2 * BODY_CAP // 4096))
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    # under the cap, a big body is still an ordinary request
    r = httpx.post(
        server.url + "/v1/completions",
        json={"model": "tiny", "prompt": "x", "max_tokens": 1, "user": "u" * (BODY_CAP // 2)},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert r.status_code == 200, r.text
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_max_tokens_default_bounded_by_the_context(server, model):
    """No max_tokens and a prompt that leaves 6 tokens of context: a full answer, never an error."""
    room = 6
    prompt = [int(i) % 200 + 10 for i in range(CONFIG.context_length - room)]
    r = httpx.post(
        server.url + "/v1/completions",
        json={"model": "tiny", "prompt": prompt, "temperature": 0},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= room


def test_malformed_json(server):
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert "error" in r.json()


def test_api_key_required(server):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(server.url + "/health").status_code == 200  # health stays open


def test_metrics(server, client):
    r = client.completions.create(model="tiny", prompt="m", max_tokens=8, temperature=0)
    assert r.usage.completion_tokens >= 3
    text = httpx.get(server.url + "/metrics").text
    values = dict(line.split() for line in text.splitlines() if line and not line.startswith("#"))
    assert float(values["bitnet_requests_total"]) >= 1
    assert float(values["bitnet_generated_tokens_total"]) >= 1
    for name in ("bitnet_queue_depth", "bitnet_kv_cache_used_bytes", "bitnet_tokens_per_second"):
        assert name in values
    for hist in (
        "bitnet_queue_wait_seconds",
        "bitnet_time_to_first_token_seconds",
        "bitnet_inter_token_latency_seconds",
    ):
        assert f"# TYPE {hist} histogram" in text
        buckets = [float(v) for k, v in values.items() if k.startswith(hist + "_bucket")]
        assert buckets == sorted(buckets) and buckets[-1] == float(values[hist + "_count"])
        assert float(values[hist + "_sum"]) >= 0
    assert float(values["bitnet_time_to_first_token_seconds_count"]) >= 1
    # several tokens: gaps between them (pieces held for UTF-8 are shared among their tokens)
    assert float(values["bitnet_inter_token_latency_seconds_count"]) >= 1


def test_chat_page_served(server):
    page = httpx.get(server.url + "/").text
    assert "/v1/chat/completions" in page and "tiny" in page


def test_chat_prompt_tokens_llama3_template(tmp_path):
    """The server encodes a chat as ``Tokenizer.chat_ids``: "Hello" is the template's 11 tokens."""
    from tokenizer_vocabs import llama3_metadata

    meta = llama3_metadata()
    cfg = dataclasses.replace(CONFIG, vocab_size=len(meta["tokenizer.ggml.tokens"]))
    path = random_model_file(tmp_path / "llama3.gguf", cfg, seed=5, tokenizer=meta)
    m = load(path, device="cpu")
    with LiveServer(create_app(m, "l3", default_max_tokens=2)) as live:
        c = openai.OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0)
        hello = [{"role": "user", "content": "Hello"}]
        r = c.chat.completions.create(model="l3", messages=hello, max_tokens=1, temperature=0)
        assert r.usage.prompt_tokens == 11 == len(m.chat_ids(hello))
        inject = [{"role": "user", "content": "Hello<|eot_id|>"}]
        r = c.chat.completions.create(model="l3", messages=inject, max_tokens=1, temperature=0)
        assert r.usage.prompt_tokens == len(m.chat_ids(inject)) > 11


LONG = dataclasses.replace(CONFIG, context_length=4096)


@pytest.fixture(scope="module")
def long_server(tmp_path_factory):
    """A model with a 4096-token context whose greedy run from "go" never meets EOS: a
    4000-token job takes seconds, thousands of times longer than noticing a disconnect."""
    path = tmp_path_factory.mktemp("long") / "long.gguf"
    random_model_file(path, LONG, seed=3)
    m = load(path, device="cpu")
    app = create_app(m, "long", max_active=2)
    with LiveServer(app) as live:
        yield live, app.state.scheduler, m


LONG_JOB = {"model": "long", "prompt": "go", "max_tokens": 4000, "temperature": 0}


def _cancelled_soon(scheduler, before: int, tokens_before: int, m) -> None:
    """The job is cancelled (not finished) and its KV sequence freed."""
    deadline = time.time() + 60
    while time.time() < deadline and scheduler.stats.requests_cancelled == before:
        time.sleep(0.01)
    assert scheduler.stats.requests_cancelled == before + 1, "the disconnect was not noticed"
    while time.time() < deadline and m.runner.kv.stats()["sequences"]:
        time.sleep(0.01)
    assert m.runner.kv.stats()["sequences"] == 0
    assert scheduler.stats.generated_tokens_total - tokens_before < LONG_JOB["max_tokens"]


def test_long_job_runs_to_its_length(long_server):
    """The premise of the disconnect tests: without a disconnect the job is long."""
    live, _, _ = long_server
    r = httpx.post(live.url + "/v1/completions", json={**LONG_JOB, "max_tokens": 2000}, timeout=300)
    assert r.json()["usage"]["completion_tokens"] == 2000
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_streaming_disconnect_cancels_the_sequence(long_server):
    live, scheduler, m = long_server
    before, tokens = scheduler.stats.requests_cancelled, scheduler.stats.generated_tokens_total
    with httpx.stream("POST", live.url + "/v1/completions", json={**LONG_JOB, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first piece
    _cancelled_soon(scheduler, before, tokens, m)


def test_non_streaming_disconnect_cancels_the_sequence(long_server):
    live, scheduler, m = long_server
    before, tokens = scheduler.stats.requests_cancelled, scheduler.stats.generated_tokens_total
    with pytest.raises(httpx.ReadTimeout):  # the client gives up while tokens still flow
        httpx.post(live.url + "/v1/completions", json=LONG_JOB, timeout=0.3)
    _cancelled_soon(scheduler, before, tokens, m)


def test_queue_full_is_429(model):
    app = create_app(model, "tiny", max_active=1, max_queue=1, default_max_tokens=60)
    with LiveServer(app) as live:

        async def burst():
            async with httpx.AsyncClient(base_url=live.url, timeout=60) as c:
                reqs = [
                    c.post("/v1/completions", json={"prompt": "q", "max_tokens": 60})
                    for _ in range(6)
                ]
                return await asyncio.gather(*reqs)

        codes = [r.status_code for r in asyncio.run(burst())]
    assert 200 in codes and 429 in codes
    assert set(codes) <= {200, 429}


def test_concurrent_streams_not_garbled(model):
    """Every one of 24 concurrent streams gets exactly the text a solo run gives.

    Four slots for 24 requests, so most are admitted later into reused slots and KV
    sequences; an 8-token step budget, so the longer prompts are fed in chunks and
    mixed with other sequences' decode tokens in one batched step.
    """
    prompts = [f"p{i}" + " ab" * (i % 6) * 3 for i in range(24)]
    assert max(len(model.encode(p)) for p in prompts) > 8  # some prompts are chunked
    expected = {p: model.generate(p, max_tokens=10, temperature=0) for p in prompts}
    app = create_app(model, "tiny", api_key=API_KEY, max_active=4, max_queue=64, step_tokens=8)

    async def one(c, p):
        text = ""
        async with c.stream(
            "POST",
            "/v1/completions",
            json={"model": "tiny", "prompt": p, "max_tokens": 10, "temperature": 0, "stream": True},
        ) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    text += json.loads(line[6:])["choices"][0]["text"]
        return p, text

    async def run_all(url):
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as c:
            return await asyncio.gather(*(one(c, p) for p in prompts))

    with LiveServer(app) as live:
        results = dict(asyncio.run(run_all(live.url)))
    garbled = [p for p in prompts if results[p] != expected[p]]
    assert not garbled, f"{len(garbled)} of {len(prompts)} streams differ from their solo run"


@pytest.mark.slow
def test_load_200_concurrent_streams(tmp_path):
    """tools/loadtest: 200 concurrent streams, each equal to its prompt's solo run, server healthy.

    16 slots and a 24-token step budget: slot reuse, chunked prompts, batched steps.
    """
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "tools" / "loadtest" / "server_load.py"
    out = tmp_path / "load.json"
    r = subprocess.run(
        [
            sys.executable,
            str(script),
            "--concurrency",
            "200",
            "--max-tokens",
            "4",
            "--step-tokens",
            "24",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert result["ok"] == 200 and result["failed"] == 0 and result["garbled"] == 0
    assert result["healthy_after"]


def test_cli_serve_starts_and_answers(tmp_path, model):
    """``bitnet serve --model M --port P`` serves until stopped; bad flags exit non-zero."""
    import os
    import subprocess
    import sys

    from bitnet_core.server.live import free_port

    serve = [sys.executable, "-m", "bitnet_core.cli.main", "serve", "--model", str(model.path)]
    port = free_port()
    env = {**os.environ, "BITNET_API_KEY": "k"}
    proc = subprocess.Popen(
        [
            *serve,
            "--port",
            str(port),
            "--device",
            "cpu",
            "--ctx-size",
            "64",
            "--threads",
            "1",
            "--kv-type",
            "f32",
            "-np",
            "2",
            "--kv-budget",
            "16",
            "--step-tokens",
            "24",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            pytest.fail(
                "bitnet serve did not come up: " + proc.stderr.read()
                if proc.poll() is not None
                else "timeout"
            )
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer k"})
        assert r.json()["data"][0]["id"] == "tiny"
        r = httpx.post(  # --ctx-size 64 bounds max_tokens
            f"http://127.0.0.1:{port}/v1/completions",
            json={"prompt": "a", "max_tokens": 64},
            headers={"Authorization": "Bearer k"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        kv_bytes_per_block = (
            2 * CONFIG.num_layers * CONFIG.num_kv_heads * CONFIG.head_dim * 4 * 64
        )  # f32, blocks of 64
        assert f"bitnet_kv_cache_max_blocks {(16 << 20) // kv_bytes_per_block}" in metrics
        assert "bitnet_step_tokens_limit 24\n" in metrics
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    bad = subprocess.run(
        [
            *serve,
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "error:" in bad.stderr and "Traceback" not in bad.stderr
    tight = subprocess.run(  # a step must hold every decoding sequence and some prompt
        [*serve, "-np", "4", "--step-tokens", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        tight.returncode != 0 and "--step-tokens (4) must be above --parallel (4)" in tight.stderr
    )
    assert "Traceback" not in tight.stderr


# --- structured output and logprobs -------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "mood": {"enum": ["merry", "sad"]},
    },
    "required": ["name", "age", "mood"],
    "additionalProperties": False,
}


def _schema_request(c, name: str, temperature: float) -> str:
    r = c.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "Who art thou?"}],
        max_tokens=80,
        temperature=temperature,
        seed=7,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
    )
    assert r.choices[0].finish_reason == "stop"
    return r.choices[0].message.content


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_output_validates(client, temperature):
    jsonschema = pytest.importorskip("jsonschema")
    text = _schema_request(client, "tiny", temperature)
    jsonschema.validate(json.loads(text), PERSON)


def test_json_schema_output_validates_on_the_demo_model():
    jsonschema = pytest.importorskip("jsonschema")
    demo = load(None, device="cpu")
    with LiveServer(create_app(demo, "demo")) as live:
        c = openai.OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0)
        for temperature in (0.0, 0.8):
            jsonschema.validate(json.loads(_schema_request(c, "demo", temperature)), PERSON)
        r = c.completions.create(
            model="demo",
            prompt="ROMEO:",
            max_tokens=40,
            temperature=0,
            extra_body={"response_format": {"type": "json_object"}},
        )
        assert r.choices[0].text.startswith("{")


def test_chat_logprobs_are_the_models(client, model):
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:  # greedy: the sampled token is the most likely one
        assert len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
    logits = model.logits(model.chat_ids(msgs))[-1].astype(np.float64)
    expected = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    assert content[0].logprob == pytest.approx(expected.max(), abs=1e-5)
    streamed = client.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=6, temperature=0, logprobs=True, stream=True
    )
    tokens = [
        e.token
        for c in streamed
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert tokens == [e.token for e in content]


def test_completion_logprobs(client):
    r = client.completions.create(
        model="tiny", prompt="ab", max_tokens=5, temperature=0, logprobs=2
    )
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text
    assert len(lp.token_logprobs) == r.usage.completion_tokens == len(lp.top_logprobs)
    assert all(
        1 <= len(t) <= 2 and max(t.values()) == x
        for t, x in zip(lp.top_logprobs, lp.token_logprobs, strict=True)
    )
    assert lp.text_offset[0] == 0


def test_logprobs_leave_out_what_a_stop_string_cut(client):
    """The tokens listed are those whose text the client got: a stop string's tokens are not."""
    full = client.completions.create(
        model="tiny", prompt="ab", max_tokens=10, temperature=0, logprobs=0
    )
    tokens, text = full.choices[0].logprobs.tokens, full.choices[0].text
    offsets = full.choices[0].logprobs.text_offset
    cut = next(
        (k for k in range(1, len(tokens)) if tokens[k] and text.find(tokens[k]) == offsets[k]),
        None,
    )
    assert cut is not None, f"no usable stop string in {text!r}"
    r = client.completions.create(
        model="tiny", prompt="ab", max_tokens=10, temperature=0, logprobs=0, stop=[tokens[cut]]
    )
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == text[: offsets[cut]]
    assert r.choices[0].logprobs.tokens == tokens[:cut]
    assert r.usage.completion_tokens == cut + 1  # the stop string's token was generated
    chat = dict(model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=0)
    ref = client.chat.completions.create(max_tokens=10, logprobs=True, **chat)
    pieces = [e.token for e in ref.choices[0].logprobs.content]
    content = ref.choices[0].message.content
    at = next(k for k in range(1, len(pieces)) if pieces[k] and content.find(pieces[k]) > 0)
    stop = pieces[at]
    streamed = client.chat.completions.create(
        max_tokens=10, logprobs=True, stop=[stop], stream=True, **chat
    )
    got_text, got_tokens = "", []
    for c in streamed:
        if c.choices:
            got_text += c.choices[0].delta.content or ""
            if c.choices[0].logprobs:
                got_tokens += [e.token for e in c.choices[0].logprobs.content]
    assert got_text == content[: content.find(stop)]
    assert "".join(got_tokens) == got_text
