"""``/v1/embeddings`` of ``bitnet serve`` on a live uvicorn server, with the openai client."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import zlib

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi", reason="the server extra (fastapi) is not installed")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from embedding_files import config_of, latent, write_ours  # noqa: E402
from formats_testlib import TEXT_MODEL  # noqa: E402

from bitnet_core.model.api import load  # noqa: E402
from bitnet_core.model.random import random_model_file  # noqa: E402
from bitnet_core.server.app import create_app  # noqa: E402
from bitnet_core.server.live import LiveServer  # noqa: E402

TEXTS = ["the quick brown fox", "BitNet b1.58", "café 日本語", "x"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    cfg = config_of("qwen3", context_length=48)
    path = tmp_path_factory.mktemp("emb-server") / "emb.gguf"
    write_ours(path, cfg, latent(cfg, zlib.crc32(b"server")))
    return load(path, device="cpu")


@pytest.fixture(scope="module")
def server(model):
    with LiveServer(create_app(model, "emb")) as live:
        yield live


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


def test_openai_client_embeddings(client, server, model):
    """The client's default (base64) and float formats, token ids, dimensions, usage."""
    want = model.embed(TEXTS)
    got = client.embeddings.create(model="emb", input=TEXTS)  # base64 on the wire
    assert [d.index for d in got.data] == [0, 1, 2, 3]
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), want, atol=1e-6)
    assert got.usage.prompt_tokens == sum(len(model.encode(t)) for t in TEXTS)
    one = client.embeddings.create(model="emb", input=TEXTS[0], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, want[0], atol=1e-6)
    ids = [model.encode(t) for t in TEXTS[:2]]
    by_ids = client.embeddings.create(model="emb", input=ids, dimensions=32)
    short = np.array([d.embedding for d in by_ids.data])
    assert short.shape == (2, 32)
    np.testing.assert_allclose(short, model.embed(ids, dimensions=32), atol=1e-6)
    raw = httpx.post(
        server.url + "/v1/embeddings", json={"input": ids[0], "encoding_format": "base64"}
    ).json()
    vec = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, want[0], atol=1e-6)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"input": []}, "empty"),
        ({"input": [[]]}, "empty"),
        ({"input": [[5] * 49]}, "context"),
        ({"input": "a", "dimensions": 1000}, "dimensions"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "model": "other"}, "does not exist"),
        ({"input": [[5, 100000]]}, "token"),
    ],
)
def test_bad_embedding_requests_are_4xx(server, body, needle):
    r = httpx.post(server.url + "/v1/embeddings", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert needle in r.json()["error"]["message"], r.text


def test_generation_on_an_embedding_model_is_400(server):
    for path, body in (
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        r = httpx.post(server.url + path, json=body)
        assert r.status_code == 400, r.text
        assert "embedding model" in r.json()["error"]["message"]


def test_concurrent_requests_share_one_forward(server, model):
    """Requests that wait while a forward runs go together into the next one."""
    batcher = server.server.config.app.state.embedding_batcher
    before, submitted = batcher.batches, batcher.submitted
    lock = model.runner._lock
    lock.acquire()  # the worker's first forward waits here; the others queue
    try:

        async def many() -> list:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
                calls = [c.post("/v1/embeddings", json={"input": t}) for t in TEXTS]
                tasks = [asyncio.ensure_future(x) for x in calls]
                deadline = time.time() + 30
                while batcher.submitted - submitted < len(TEXTS) and time.time() < deadline:
                    await asyncio.sleep(0.02)
                threading.Timer(0, lock.release).start()
                return await asyncio.gather(*tasks)

        replies = asyncio.run(many())
    finally:
        if lock.locked():
            lock.release()
    got = np.array([r.json()["data"][0]["embedding"] for r in replies])
    np.testing.assert_allclose(got, model.embed(TEXTS), atol=1e-5)
    # the worker's first take waits on the lock; every request that came meanwhile
    # goes into the one forward after it
    assert 1 <= batcher.batches - before <= 2


def test_embeddings_on_a_language_model_is_400(tmp_path):
    path = tmp_path / "lm.gguf"
    random_model_file(path, TEXT_MODEL, seed=1)
    with LiveServer(create_app(load(path, device="cpu"), "lm")) as live:
        r = httpx.post(live.url + "/v1/embeddings", json={"input": "hi"})
    assert r.status_code == 400
    assert "not an embedding model" in r.json()["error"]["message"]
