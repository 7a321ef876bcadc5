#!/usr/bin/env python3
"""`weft serve` on an encoder-decoder folder (tests/fixtures/seq2seq_tiny/t5, no tokenizer):
/v1/completions with the prompt as token ids (the encoder's input), plain and streamed over
SSE, and a WebSocket generate frame whose token ids must equal EXPECTED (what `weft generate`
gives for the same request); /metrics shows every KV page free afterwards. Python's standard
library only. Environment: WEFT_URL (run_with_server.sh), EXPECTED (space-separated ids).
"""
import base64
import json
import os
import socket
import struct
import urllib.request

BASE = os.environ["WEFT_URL"]
HOST, PORT = BASE.removeprefix("http://").split(":")
EXPECTED = [int(t) for t in os.environ["EXPECTED"].split()]
SOURCE = [5, 9, 3, 12, 7, 30, 21, 2]
failures = 0


def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    failures += not ok


def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=60).read().decode()


def metric(name):
    text = urllib.request.urlopen(BASE + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} missing from /metrics")


def websocket_tokens(frame):
    sock = socket.create_connection((HOST, int(PORT)), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /ws HTTP/1.1\r\nHost: {HOST}:{PORT}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    head, buf = buf.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 101"), head
    payload = json.dumps(frame).encode()
    mask = os.urandom(4)
    header = bytes([0x81, 0x80 | 126]) + struct.pack(">H", len(payload))
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def take(n):
        nonlocal buf
        while len(buf) < n:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            buf += chunk
        out, buf = buf[:n], buf[n:]
        return out

    tokens = []
    while True:
        b0, b1 = take(2)
        length = b1 & 0x7F
        if length == 126:
            length = struct.unpack(">H", take(2))[0]
        elif length == 127:
            length = struct.unpack(">Q", take(8))[0]
        data = take(length)
        if b0 & 0x0F != 1:
            continue
        message = json.loads(data)
        if message["type"] == "token":
            tokens += message["token_ids"]
        else:
            sock.close()
            return tokens, message


out = json.loads(post("/v1/completions", {"prompt": SOURCE, "max_tokens": 10,
                                          "temperature": 0, "ignore_eos": True}))
check("completion", out["choices"][0]["finish_reason"] == "length"
      and out["usage"]["prompt_tokens"] == 8 and out["usage"]["completion_tokens"] == 10, out)

stream = post("/v1/completions", {"prompt": SOURCE, "max_tokens": 6, "temperature": 0,
                                  "ignore_eos": True, "stream": True,
                                  "stream_options": {"include_usage": True}})
events = [line[6:] for line in stream.splitlines() if line.startswith("data: ")]
check("completion_stream", events and events[-1] == "[DONE]"
      and '"completion_tokens":6' in stream and '"finish_reason":"length"' in stream, stream)

tokens, done = websocket_tokens({"type": "generate", "id": "s2s", "prompt": SOURCE,
                                 "max_tokens": 10, "temperature": 0, "ignore_eos": True})
check("websocket_tokens", tokens == EXPECTED, f"{tokens} != {EXPECTED}")
check("websocket_done", done.get("type") == "done" and done.get("finish_reason") == "length",
      done)

# A forced decoder prefix: forcing the first greedy token continues as the unforced run.
tokens, done = websocket_tokens({"type": "generate", "id": "p", "prompt": SOURCE,
                                 "max_tokens": 9, "temperature": 0, "ignore_eos": True,
                                 "decoder_prefix_ids": EXPECTED[:1]})
check("websocket_decoder_prefix", tokens == EXPECTED[1:], f"{tokens} != {EXPECTED[1:]}")

try:
    post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
    check("text_prompt_refused", False, "accepted")
except urllib.error.HTTPError as e:
    body = e.read().decode()
    check("text_prompt_refused", e.code == 400 and "no tokenizer.json" in body, body)

check("pages_free", metric("weft_kv_pages_used") == 0, metric("weft_kv_pages_used"))
print(f"{failures} failure(s)")
