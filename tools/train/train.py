"""Trains weft-tiny, Weft's default model, in one run on one GPU.

  python3 tools/train/train.py --corpus build/corpus --out OUT_DIR [--seconds 240] [--steps N]

Other shapes take --layers, --hidden, --heads, --kv-heads, --head-dim and --intermediate (the
defaults are weft-tiny's); --tokenizer FILE reuses a trained tokenizer.json (copied byte for
byte) instead of training one, so a smaller model shares a target's vocabulary and can draft
for it (docs/speculative.md). weft-tiny-draft (models/weft-tiny-draft/README.md):

  python3 tools/train/train.py --corpus build/corpus --out models/weft-tiny-draft \
      --tokenizer models/weft-tiny/tokenizer.json --layers 2 --hidden 192 --heads 3 \
      --kv-heads 1 --intermediate 512 --seconds 60

1. A byte-level BPE tokenizer (GPT-2 style pre-tokenization) trained with `tokenizers`.
2. A Llama-architecture model (transformers' LlamaForCausalLM, ~14.5M parameters, tied
   embeddings, GQA) trained from scratch with AdamW in bf16 autocast. The number of steps is
   fitted to --seconds from the speed of the first steps, unless --steps fixes it; the
   checkpoint with the lowest validation loss (a 3% slice of the *training* documents) is kept,
   so the held-out text never influences training or model selection.
3. Export as a Hugging Face folder (bf16 safetensors, tokenizer.json, tokenizer_config.json with
   a chat template, generation_config.json) and the held-out perplexity, computed in fp32 from
   the exported bf16 weights with the sliding window that `weft perplexity` uses.

Fixed seeds throughout; the loss curve is printed as training goes.
"""
import argparse
import json
import math
import pathlib
import random
import shutil
import time

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

EOT = "<|endoftext|>"
SPECIALS = [EOT, "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SEQ_LEN = 512
WINDOW, STRIDE = 512, 256  # perplexity's sliding window; weft perplexity uses the same


def log(msg):
    print(msg, flush=True)


def train_tokenizer(documents, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents, trainer)
    return tok


def encode_documents(tok, documents):
    eot = tok.token_to_id(EOT)
    ids = []
    for enc in tok.encode_batch(documents):
        ids.extend(enc.ids)
        ids.append(eot)
    return np.array(ids, dtype=np.int64)


def model_config(vocab_size, eot, args):
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim or args.hidden // args.heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=eot,
        eos_token_id=eot,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
    )


def batches(ids, batch, rng):
    starts = rng.integers(0, len(ids) - SEQ_LEN - 1, size=batch)
    x = np.stack([ids[s : s + SEQ_LEN + 1] for s in starts])
    return torch.from_numpy(x).cuda(non_blocking=True)


def lm_loss(model, x):
    """Next-token cross-entropy of a [batch, SEQ_LEN + 1] block, logits in fp32."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=x[:, :-1]).logits
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


@torch.no_grad()
def mean_loss(model, ids, n_batches=16, batch=32):
    rng = np.random.default_rng(1234)
    model.eval()
    total = 0.0
    for _ in range(n_batches):
        x = batches(ids, batch, rng)
        total += lm_loss(model, x).item()
    model.train()
    return total / n_batches


@torch.no_grad()
def perplexity(model, ids, window=WINDOW, stride=STRIDE):
    """exp(mean NLL) of every token but the first, each scored once: windows of `window`
    tokens start every `stride` tokens, and a window scores only the tokens after the end of
    the previous one, so each token sees at least window - stride tokens of context."""
    model.eval()
    nll, count, prev_end = 0.0, 0, 0
    n = len(ids)
    for begin in range(0, n, stride):
        end = min(begin + window, n)
        x = torch.tensor(ids[begin:end], device="cuda")[None]
        logits = model(input_ids=x).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        first = max(prev_end, begin + 1)  # first position scored in this window
        targets = x[0, first - begin : end - begin]
        scored = logprobs[first - begin - 1 : end - begin - 1]
        nll -= scored.gather(1, targets[:, None]).sum().item()
        count += end - first
        prev_end = end
        if end == n:
            break
    return math.exp(nll / count), count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=240.0, help="training time budget")
    ap.add_argument("--steps", type=int, default=0, help="fix the step count (reproduce a run)")
    # 2.7M training tokens overfit a 14.5M model after ~8 passes (validation loss rises from
    # there), so the cosine schedule ends at 9.
    ap.add_argument("--epochs", type=float, default=9.0, help="at most this many passes")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    # The model's shape; the defaults are weft-tiny's (~14.5M parameters).
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=0, help="0: hidden / heads")
    ap.add_argument("--intermediate", type=int, default=896)
    ap.add_argument("--tokenizer", type=pathlib.Path, default=None,
                    help="a tokenizer.json to reuse (copied as it is) instead of training one")
    args = ap.parse_args()
    if args.hidden % args.heads or args.heads % args.kv_heads:
        ap.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}, and "
                 f"--heads a multiple of --kv-heads {args.kv_heads}")
    if args.tokenizer is not None and not args.tokenizer.is_file():
        ap.error(f"--tokenizer {args.tokenizer}: no such file")

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()

    text = (args.corpus / "train.txt").read_text(encoding="utf-8")
    documents = [d for d in text.split(EOT) if d.strip()]
    heldout_text = (args.corpus / "heldout.txt").read_text(encoding="utf-8")
    rng = random.Random(args.seed)
    val_docs = sorted(rng.sample(range(len(documents)), max(1, len(documents) * 3 // 100)))
    val_set = set(val_docs)

    if args.tokenizer is not None:
        tok = Tokenizer.from_file(str(args.tokenizer))
        for t in SPECIALS:
            if tok.token_to_id(t) is None:
                raise SystemExit(f"--tokenizer {args.tokenizer}: has no special token {t}")
    else:
        tok = train_tokenizer(documents, args.vocab_size)
    vocab = tok.get_vocab_size()
    eot = tok.token_to_id(EOT)
    train_ids = encode_documents(tok, [d for i, d in enumerate(documents) if i not in val_set])
    val_ids = encode_documents(tok, [documents[i] for i in val_docs])
    held_ids = tok.encode(heldout_text).ids
    log(f"tokenizer: vocab {vocab}, train {len(train_ids)} tokens, validation {len(val_ids)}, "
        f"held-out {len(held_ids)} ({time.time() - t0:.0f} s)")

    config = model_config(vocab, eot, args)
    model = LlamaForCausalLM(config).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), fused=True)
    data_rng = np.random.default_rng(args.seed)
    warmup = 100

    def lr_at(step, total):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        p = min(1.0, (step - warmup) / max(1, total - warmup))
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    total_steps = args.steps or 10**9
    best = (float("inf"), -1, None)
    step, t_train = 0, time.time()
    while step < total_steps:
        for g in opt.param_groups:
            # Until the speed is measured (step 50), schedule as if for 2000 steps: warm-up only.
            g["lr"] = lr_at(step, total_steps if total_steps < 10**9 else 2000)
        x = batches(train_ids, args.batch, data_rng)
        loss = lm_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 50 and not args.steps:
            torch.cuda.synchronize()
            per_step = (time.time() - t_train) / 50
            by_time = int(args.seconds / (per_step * 1.08))
            by_epochs = int(args.epochs * len(train_ids) / (args.batch * SEQ_LEN))
            total_steps = max(500, min(by_time, by_epochs))
            log(f"speed: {per_step * 1000:.1f} ms/step, "
                f"{args.batch * SEQ_LEN / per_step / 1e3:.0f}k tokens/s: {total_steps} steps")
        if step % 100 == 0 or step == total_steps:
            val = mean_loss(model, val_ids)
            log(f"step {step:5d}  train loss {loss.item():.3f}  val loss {val:.3f}  "
                f"lr {opt.param_groups[0]['lr']:.2e}  {time.time() - t_train:.0f} s")
            if val < best[0]:
                best = (val, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
    log(f"best validation loss {best[0]:.3f} at step {best[1]} of {step}; "
        f"{step * args.batch * SEQ_LEN / 1e6:.0f}M tokens seen in {time.time() - t_train:.0f} s")
    model.load_state_dict(best[2])

    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    if args.tokenizer is not None:
        # Byte for byte: a draft model must have its target's tokenizer.json (checked at start).
        shutil.copyfile(args.tokenizer, out_dir / "tokenizer.json")
    else:
        tok.save(str(out_dir / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                  "rstrip": False, "single_word": False, "special": True}
        for t in SPECIALS
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": EOT,
        "eos_token": EOT,
        "pad_token": EOT,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps({
        "bos_token_id": eot, "eos_token_id": eot, "do_sample": True,
        "temperature": 0.8, "top_p": 0.95, "max_new_tokens": 256,
    }, indent=2) + "\n")

    # The reference: the exported bf16 weights, upcast, run in fp32 (as weft's CPU path does).
    ref = LlamaForCausalLM.from_pretrained(out_dir, torch_dtype=torch.float32).cuda()
    ppl, count = perplexity(ref, held_ids)
    head_text = heldout_text[:16000]
    head_ppl, head_count = perplexity(ref, tok.encode(head_text).ids)
    log(f"held-out perplexity (PyTorch fp32 over bf16 weights, window {WINDOW}, stride {STRIDE}): "
        f"{ppl:.3f} over {count} tokens; first 16000 characters: {head_ppl:.3f} "
        f"over {head_count} tokens")
    (out_dir / "eval.json").write_text(json.dumps({
        "parameters": n_params, "vocab_size": vocab, "train_tokens": int(len(train_ids)),
        "steps": step, "best_step": best[1], "batch": args.batch, "seq_len": SEQ_LEN,
        "validation_loss": best[0], "heldout_tokens": count, "heldout_perplexity": ppl,
        "heldout_head_chars": 16000, "heldout_head_tokens": head_count,
        "heldout_head_perplexity": head_ppl, "window": WINDOW, "stride": STRIDE,
        "seed": args.seed, "torch": torch.__version__,
    }, indent=2) + "\n")

    from transformers import AutoTokenizer
    hf_tok = AutoTokenizer.from_pretrained(out_dir)
    assert hf_tok.encode("Fellow-citizens") == tok.encode("Fellow-citizens").ids
    chat = hf_tok.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False,
                                      add_generation_prompt=True)
    log(f"chat template renders: {chat!r}")
    for prompt in ["Fellow-Citizens of the Senate and House of Representatives:",
                   "Call me Ishmael. The whale"]:
        x = hf_tok(prompt, return_tensors="pt").input_ids.cuda()
        torch.manual_seed(args.seed)
        y = ref.generate(x, max_new_tokens=60, do_sample=True, temperature=0.8, top_p=0.95)
        log(f"sample: {hf_tok.decode(y[0])!r}")
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
