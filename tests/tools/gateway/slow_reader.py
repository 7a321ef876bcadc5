#!/usr/bin/env python3
"""A WebSocket client that stops reading, against `weft serve --ws-outbox-bytes 4096
--socket-send-buffer-bytes 8192`.

Node cannot shrink a socket's receive buffer, and the kernel's buffers on loopback hold
megabytes, so this client speaks the (small) client side of RFC 6455 itself over a socket
whose SO_RCVBUF is 4 KiB. It asks for 2 x 150 tokens with 20 alternatives each (about
0.5 MB of frames), reads nothing until /metrics shows that the server paused it, checks
that the server still answers another client meanwhile, then reads everything and checks
that every token arrived, in order, exactly once, each sample ending with its done frame.
"""
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.request

BASE = os.environ["WEFT_URL"]
HOST, PORT = BASE.removeprefix("http://").split(":")


def metric(name):
    text = urllib.request.urlopen(BASE + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} missing from /metrics")


def send_text(sock, text):
    payload = text.encode()
    mask = os.urandom(4)
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
    else:
        header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(header + mask + masked)


class Reader:
    def __init__(self, sock, initial=b""):
        self.sock, self.buf = sock, initial

    def take(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("the server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        b0, b1 = self.take(2)
        length = b1 & 0x7F
        if length == 126:
            length = struct.unpack(">H", self.take(2))[0]
        elif length == 127:
            length = struct.unpack(">Q", self.take(8))[0]
        assert not b1 & 0x80, "server frames are not masked"
        return b0 & 0x0F, self.take(length)


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((HOST, int(PORT)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /ws HTTP/1.1\r\nHost: {HOST}:{PORT}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    head, rest = head.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 101"), head
    before = metric("weft_gateway_backpressure_pauses_total")
    send_text(sock, json.dumps({"type": "generate", "id": "s", "prompt": "The whale", "n": 2,
                                "max_tokens": 150, "ignore_eos": True, "logprobs": True,
                                "top_logprobs": 20, "seed": 3}))
    deadline = time.time() + 30
    while metric("weft_gateway_backpressure_pauses_total") == before:
        assert time.time() < deadline, "the server never paused the slow reader"
        time.sleep(0.1)
    # Someone else is still served while this client is paused.
    body = json.dumps({"prompt": "Call me", "max_tokens": 3}).encode()
    req = urllib.request.Request(BASE + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    other = json.load(urllib.request.urlopen(req, timeout=30))
    assert other["usage"]["completion_tokens"] == 3, other
    reader = Reader(sock, rest)
    tokens = {0: [], 1: []}
    done = {}
    while len(done) < 2:
        opcode, payload = reader.frame()
        if opcode != 1:
            continue  # a ping: the server's keep-alive
        frame = json.loads(payload)
        assert frame["id"] == "s", frame
        index = frame["index"]
        assert index not in done, f"a frame after sample {index}'s done frame: {frame}"
        if frame["type"] == "token":
            tokens[index] += frame["token_ids"]
        else:
            assert frame["type"] == "done", frame
            done[index] = frame
    for index in (0, 1):
        assert done[index]["finish_reason"] == "length", done[index]
        assert len(tokens[index]) == 150 == done[index]["usage"]["completion_tokens"], (
            index, len(tokens[index]))
    paused = metric("weft_gateway_backpressure_pauses_total") - before
    print(f"ok   slow reader paused {paused:g} time(s); another client served meanwhile; "
          "2 x 150 tokens arrived in order, once each")
    print("slow reader checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL", e)
        sys.exit(1)
