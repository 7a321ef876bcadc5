#!/usr/bin/env python3
"""Writes the seed corpus of one fuzz target into OUT_DIR, from the repository's test fixtures
(tests/fixtures, tests/tools/grammar, test-data tokenizers fetched into a build folder) plus a
few hand-made inputs for the formats that have no fixture files (raw HTTP, WebSocket frames,
small safetensors files).

Usage: tests/fuzz/make_seeds.py TARGET OUT_DIR [BUILD_DIR...]
"""
import glob
import hashlib
import json
import os
import struct
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def files(*patterns):
    out = []
    for p in patterns:
        out += sorted(glob.glob(os.path.join(ROOT, p)))
    return out


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def ws_frame(payload, opcode=1, fin=True, mask=b"\x01\x02\x03\x04"):
    if isinstance(payload, str):
        payload = payload.encode()
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        head = bytes([b0, 0x80 | n])
    elif n < 65536:
        head = bytes([b0, 0x80 | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, 0x80 | 127]) + struct.pack(">Q", n)
    masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + mask + masked


CHAT = {"model": "weft-tiny", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}],
        "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n"], "stream": True,
        "stream_options": {"include_usage": True}, "seed": 3, "logprobs": True, "top_logprobs": 2}
COMPLETION = {"model": "weft-tiny", "prompt": "Once upon", "max_tokens": 16, "n": 2,
              "logprobs": 1, "echo": False, "presence_penalty": 0.5, "frequency_penalty": 0.1,
              "logit_bias": {"5": -100}, "stop": "END"}
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "p", "schema": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
WS = {"type": "generate", "id": 1, "prompt": "Hello", "max_tokens": 4, "temperature": 0}


def gguf(metadata, tensors):
    """A GGUF v3 file: metadata {key: (type id, value)}, tensors [(name, dims, type id, raw)]."""
    def string(v):
        b = v.encode()
        return struct.pack("<Q", len(b)) + b

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
              11: "<q", 12: "<d"}

    def value(t, v):
        if t == 8:
            return string(v)
        if t == 9:
            et, items = v
            return struct.pack("<IQ", et, len(items)) + b"".join(value(et, i) for i in items)
        return struct.pack(scalar[t], v)

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, (t, v) in metadata.items():
        out += string(k) + struct.pack("<I", t) + value(t, v)
    offset, data = 0, b""
    for name, dims, t, raw in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        raw += b"\0" * (-len(raw) % 32)
        data += raw
        offset += len(raw)
    return out + b"\0" * (-len(out) % 32) + data


def gguf_raw(rows, cols, typ, block_bytes, block_elems):
    return bytes((i * 37 + 11) % 256 for i in range(rows * cols // block_elems * block_bytes))


def gguf_llama(tensor_type, block_bytes, block_elems, tokenizer):
    """A one-layer Llama (hidden 32) in F32 or a 32-block type, with a tokenizer."""
    hidden, ffn, heads, vocab = 32, 64, 2, 6
    meta = {"general.architecture": (8, "llama"), "llama.embedding_length": (4, hidden),
            "llama.block_count": (4, 1), "llama.feed_forward_length": (4, ffn),
            "llama.attention.head_count": (4, heads), "llama.attention.head_count_kv": (4, 1),
            "llama.rope.freq_base": (6, 10000.0), "llama.context_length": (4, 64)}
    meta.update(tokenizer)

    def t(name, rows, cols, typ=tensor_type):
        if typ == 0:
            return (name, [cols, rows], 0, struct.pack("<%df" % (rows * cols), *([0.5] * (rows * cols))))
        return (name, [cols, rows], typ, gguf_raw(rows, cols, typ, block_bytes, block_elems))

    hd = hidden // heads
    tensors = [t("token_embd.weight", vocab, hidden), t("output_norm.weight", 1, hidden, 0)]
    for n, r, c in [("attn_q", hidden, hidden), ("attn_k", hd, hidden), ("attn_v", hd, hidden),
                    ("attn_output", hidden, hidden), ("ffn_gate", ffn, hidden), ("ffn_up", ffn, hidden),
                    ("ffn_down", hidden, ffn)]:
        tensors.append(t("blk.0.%s.weight" % n, r, c))
    tensors += [t("blk.0.attn_norm.weight", 1, hidden, 0), t("blk.0.ffn_norm.weight", 1, hidden, 0)]
    return gguf(meta, tensors)


def gguf_k(tensor_type, block_bytes, tokenizer):
    """K-quant tensors (rows of 256) with a tokenizer: no whole model, to stay small."""
    tensors = [("a.weight", [256, 2], tensor_type, gguf_raw(2, 256, tensor_type, block_bytes, 256)),
               ("b.weight", [512, 1], tensor_type, gguf_raw(1, 512, tensor_type, block_bytes, 256))]
    return gguf(dict(tokenizer, **{"general.architecture": (8, "llama")}), tensors)


GPT2_TOKENIZER = {"tokenizer.ggml.model": (8, "gpt2"), "tokenizer.ggml.pre": (8, "llama-bpe"),
                  "tokenizer.ggml.tokens": (9, (8, ["<s>", "H", "e", "He", "\u0120", "llo"])),
                  "tokenizer.ggml.token_type": (9, (5, [3, 1, 1, 1, 1, 1])),
                  "tokenizer.ggml.merges": (9, (8, ["H e"])), "tokenizer.ggml.bos_token_id": (4, 0),
                  "tokenizer.ggml.add_bos_token": (7, True),
                  "tokenizer.chat_template": (8, "{% for m in messages %}{{ m.content }}{% endfor %}")}
SPM_TOKENIZER = {"tokenizer.ggml.model": (8, "llama"),
                 "tokenizer.ggml.tokens": (9, (8, ["<unk>", "<s>", "</s>", "\u2581", "h", "\u2581h"])),
                 "tokenizer.ggml.scores": (9, (6, [0.0, 0.0, 0.0, -1.0, -2.0, -0.5])),
                 "tokenizer.ggml.token_type": (9, (5, [2, 3, 3, 1, 1, 1])),
                 "tokenizer.ggml.unknown_token_id": (4, 0), "tokenizer.ggml.eos_token_id": (4, 2)}


def generated(target):
    """Hand-made seeds: {name: bytes}."""
    s = {}
    if target == "fuzz_gguf":
        s["f32_gpt2"] = gguf_llama(0, 4, 1, GPT2_TOKENIZER)
        s["q8_0_spm"] = gguf_llama(8, 34, 32, SPM_TOKENIZER)
        s["q4_0"] = gguf_llama(2, 18, 32, GPT2_TOKENIZER)
        s["q4_k"] = gguf_k(12, 144, SPM_TOKENIZER)
        s["q5_k"] = gguf_k(13, 176, GPT2_TOKENIZER)
        s["q6_k"] = gguf_k(14, 210, SPM_TOKENIZER)
        s["metadata_only"] = gguf({"general.alignment": (4, 64), "nested": (9, (9, [(4, [1, 2]), (8, ["x"])])),
                                   "i64": (11, -5), "f64": (12, 2.5), "u16": (2, 7)}, [])
    if target == "fuzz_safetensors":
        s["two_f32"] = safetensors({"a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                                    "b.weight": ("F32", [3], struct.pack("<3f", 5, 6, 7))},
                                   {"format": "pt"})
        s["bf16_f16"] = safetensors({"x": ("BF16", [1, 3], b"\x80\x3f" * 3),
                                     "y": ("F16", [2], b"\x00\x3c" * 2), "z": ("I64", [1], b"\x07" + b"\0" * 7)})
        s["empty"] = safetensors({})
        s["scalar_and_zero"] = safetensors({"s": ("F32", [], struct.pack("<f", 1)),
                                            "e": ("F32", [0, 4], b"")})
    elif target == "fuzz_openai_request":
        s["completion"] = b"\x00" + json.dumps(COMPLETION).encode()
        chat = dict(CHAT, response_format=SCHEMA_FORMAT)
        s["chat"] = b"\x01" + json.dumps(chat).encode()
        s["chat_regex"] = b"\x01" + json.dumps(dict(CHAT, response_format={"type": "regex", "regex": "[a-z]+"})).encode()
        tools = [{"type": "function", "function": {"name": "get", "description": "weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        s["chat_tools"] = b"\x01" + json.dumps(dict(CHAT, tools=tools, tool_choice="required")).encode()
        s["chat_tool_calls"] = b"\x01" + json.dumps(dict(CHAT, tools=tools, tool_choice={
            "type": "function", "function": {"name": "get"}}, messages=CHAT["messages"] + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "21"}])).encode()
        s["ws"] = b"\x02" + json.dumps(WS).encode()
        s["ws_messages"] = b"\x02" + json.dumps({"type": "generate", "id": "x", "messages": CHAT["messages"]}).encode()
    elif target == "fuzz_http_request":
        body = json.dumps(CHAT).encode()
        s["chat"] = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body)) + body
        body = json.dumps(COMPLETION).encode()
        s["completion_chunked"] = (b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body)) + body + b"\r\n0\r\n\r\n"
        s["keepalive"] = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"POST /v1/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
        s["upgrade"] = (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    elif target == "fuzz_websocket":
        s["generate"] = ws_frame(json.dumps(WS))
        s["two_and_cancel"] = (ws_frame(json.dumps(WS)) + ws_frame(json.dumps(dict(WS, id=2, messages=CHAT["messages"])))
                               + ws_frame(json.dumps({"type": "cancel", "id": 1})))
        s["fragmented"] = (ws_frame('{"type":"gener', fin=False) + ws_frame(b"", opcode=9)
                           + ws_frame('ate","id":3,"prompt":"x"}', opcode=0))
        s["binary_ping_close"] = (ws_frame(b"\x00\x01", opcode=2) + ws_frame(b"hi", opcode=9)
                                  + ws_frame(struct.pack(">H", 1000) + b"bye", opcode=8))
        s["long"] = ws_frame(json.dumps(dict(WS, prompt="a" * 300)))
    elif target == "fuzz_regex":
        for i, r in enumerate([r"[a-z]+", r"\d{3}-\d{4}", r"(foo|bar)*baz?", r"^[A-Z][a-z]{2,8}$",
                               r"[^\x00-\x1f\"\\]{0,20}", r"\p{L}+\s\w*", r"(a(b(c)?)+)+", r"[\u00e9\u4e00-\u9fff]",
                               r"x{2,}y{,3}z{4}", r".*?(?:ab|cd)+", r"\\[tn]|\.\*\+", r"[[:alpha:]]"]):
            s["r%02d" % i] = r.encode()
    elif target == "fuzz_tokenizer_json":
        # Small files of each model type and component, beside the 40-128 KB fixtures: the time
        # per input grows with its size, and mutations of a small file reach the same code.
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5, "\u0120": 6, "\u2581": 7, "##b": 8}
        added = [{"id": 1, "content": "<s>", "special": True, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False}]
        bpe = {"type": "BPE", "vocab": vocab, "merges": ["a b"], "unk_token": "<unk>", "byte_fallback": True}
        s["small_bpe"] = json.dumps({"added_tokens": added, "normalizer": {"type": "NFC"},
                                     "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
                                     "model": bpe, "decoder": {"type": "ByteLevel"},
                                     "post_processor": {"type": "TemplateProcessing",
                                                        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                   {"Sequence": {"id": "A", "type_id": 0}}],
                                                        "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}}}).encode()
        s["small_spm_bpe"] = json.dumps({"normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "model": bpe, "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}).encode()
        s["small_wordpiece"] = json.dumps({"normalizer": {"type": "BertNormalizer", "lowercase": True},
                                           "pre_tokenizer": {"type": "BertPreTokenizer"},
                                           "model": {"type": "WordPiece", "vocab": vocab, "unk_token": "<unk>",
                                                     "continuing_subword_prefix": "##"},
                                           "decoder": {"type": "WordPiece", "prefix": "##"}}).encode()
        s["small_unigram"] = json.dumps({"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                                           "prepend_scheme": "always"},
                                         "model": {"type": "Unigram", "unk_id": 0, "vocab": [
                                             [k, -float(i)] for i, k in enumerate(vocab)]},
                                         "decoder": {"type": "Metaspace", "replacement": "\u2581"}}).encode()
        s["small_split"] = json.dumps({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
            {"type": "Digits", "individual_digits": True}, {"type": "Punctuation"}]},
            "model": bpe}).encode()
    elif target == "fuzz_ebnf":
        s["json_like"] = (b'root ::= obj\nobj ::= "{" ws (pair ("," ws pair)*)? "}"\n'
                          b'pair ::= str ws ":" ws val\nval ::= str | [0-9]+ | obj | "true"\n'
                          b'str ::= "\\"" [^"\\\\]* "\\""\nws ::= [ \\t\\n]*\n')
        s["repeat"] = b'root ::= ("ab" | [x-z]){2,5} "." item?\nitem ::= "\\u00e9"+ # comment\n'
    return s


def fixture_seeds(target, build_dirs):
    """Fixture files: {name: bytes}."""
    s = {}

    def add(path, data=None):
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        s[os.path.relpath(path, ROOT).replace("/", "_")] = data

    fetched = []
    for b in build_dirs:
        fetched += sorted(glob.glob(os.path.join(b, "test-data/tokenizers/*/tokenizer_config.json")))
    if target == "fuzz_config_json":
        for p in files("tests/fixtures/models/*/config.json", "tests/fixtures/models/*/generation_config.json"):
            add(p)
    elif target == "fuzz_tokenizer_json":
        for p in files("tests/fixtures/tokenizers/*.json", "tests/fixtures/tokenizers/bad/*.json"):
            add(p)
    elif target == "fuzz_chat_template":
        for p in files("tests/fixtures/chat_templates/*/tokenizer_config.json") + fetched:
            t = json.load(open(p)).get("chat_template")
            if isinstance(t, list):
                for i, entry in enumerate(t):
                    add(p + str(i), entry.get("template", "").encode())
            elif isinstance(t, str):
                add(p, t.encode())
        for p in files("tests/fixtures/chat_templates/jinja_snippets.json"):
            for entry in json.load(open(p)):
                if isinstance(entry, dict) and isinstance(entry.get("template"), str):
                    add(p + "_" + entry.get("name", str(len(s))), entry["template"].encode())
    elif target == "fuzz_json_schema":
        for p in files("tests/tools/grammar/schemas/*.json", "tests/tools/grammar/unsupported/*.json"):
            add(p)
    elif target == "fuzz_regex":
        for p in files("tests/tools/grammar/schemas/*.json"):
            text = open(p).read()
            for key in ("pattern",):
                try:
                    stack = [json.loads(text)]
                except ValueError:
                    continue
                while stack:
                    v = stack.pop()
                    if isinstance(v, dict):
                        if isinstance(v.get(key), str):
                            add(p + "_pattern", v[key].encode())
                        stack += list(v.values())
                    elif isinstance(v, list):
                        stack += v
    elif target == "fuzz_ebnf":
        for p in files("tests/tools/grammar/*.gbnf"):
            add(p)
    elif target == "fuzz_torch_checkpoint":
        for p in files("tests/fixtures/pickle/*/*.bin", "tests/fixtures/pickle/torch/*/*.bin"):
            if os.path.getsize(p) <= 65536:
                add(p)
    elif target == "fuzz_pickle":
        for p in files("tests/fixtures/pickle/*/*.pkl"):
            add(p)
        # The data.pkl of each checkpoint fixture (a zip archive).
        for p in files("tests/fixtures/pickle/*/*.bin", "tests/fixtures/pickle/torch/*/*.bin"):
            try:
                with zipfile.ZipFile(p) as z:
                    for name in z.namelist():
                        if name.endswith("data.pkl"):
                            add(p + "_data.pkl", z.read(name))
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):  # hostile fixtures
                pass
    return s


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    target, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    seeds = fixture_seeds(target, sys.argv[3:])
    seeds.update(generated(target))
    for name, data in seeds.items():
        # libFuzzer names corpus files by content hash; keep a readable prefix.
        h = hashlib.sha1(data).hexdigest()[:12]
        with open(os.path.join(out, "%s-%s" % (name[-60:], h)), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (target, len(seeds)))


if __name__ == "__main__":
    main()
