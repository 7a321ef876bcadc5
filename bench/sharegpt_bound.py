#!/usr/bin/env python3
"""Lower bound on an offline run's duration (so an upper bound on output tok/s) for ANY schedule.

Reads a workload (JSON lines, as bench/make_sharegpt_workload.py writes: {"input_len": N,
"output_len": M} or {"prompt_ids": [...], "output_len": M}) and a step-cost model, and prints:

  (a) the least time any scheduler could take on the workload under the measured step costs,
      hence the most output tok/s any schedule can reach with today's kernels;
  (b) the same at the hardware floor (weights + KV bytes at the copy bandwidth, FLOPs at the
      GEMM peak): what perfect kernels would allow;
  (c) both again with the outputs capped (--caps), to show how much the longest requests decide.

Derivation (docs/engine.md, "How fast can this workload go"):

  Chain. Request r needs out_r steps one after another: the step that computes the last prompt
  token samples its first output token, and each later token needs the step after the one that
  sampled the token before it. Every request arrives at t = 0, so any schedule takes at least
  n_min = max_r out_r steps.

  Fixed work. Whatever the schedule (without preemption, which only adds work), the run computes
  sum_r in_r prefill rows and sum_r (out_r - 1) decode rows, and decode row j of request r
  (j = 1 .. out_r - 1) attends to in_r + j keys, so the keys read are
  K = sum_r [(out_r - 1) in_r + (out_r - 1) out_r / 2].

  (a) Measured model: a step with B decode rows reading K_s keys and P prefill rows costs
        t = N(B + w P) + c K_s
      N: the step cost without its KV reads, as a function of rows; c: ms per key read; w: what
      a prefill row weighs against a decode row (a prefill row computes no head and no sample).
      They come from a few measured points: decode steps at one context (--decode-points at
      --decode-context), one decode step at a longer context (--kv-point) gives c, and one
      prefill step (--prefill) gives w. N is taken as the greatest convex function under the
      measured points (a lower envelope, so the model never exceeds a measurement), extended
      past the last point with its last slope. Summing over n steps, the KV term is c K
      whatever the schedule, and by Jensen's inequality sum_s N(R_s) >= n N(R / n) with
      R = sum_r (out_r - 1) + w sum_r in_r. n N(R / n) is convex in n and, for a convex N with a
      positive tangent intercept, grows with n, so the bound is its least value over
      n >= n_min (at n_min in practice):
        duration >= min_{n >= n_min} n N(R / n) + c K
  (b) Floor: a step moves at least the weights W (every layer and the head; the embedding
      table is only gathered) plus the KV it reads and writes, at the copy bandwidth, and does
      its FLOPs at the GEMM peak; it takes at least the larger of the two. Summed over n >= n_min
      steps (max is convex, so the sum of maxima is at least the maximum of the sums):
        duration >= max(n_min W / BW + (K + rows) kv_bytes / BW, FLOPs / peak)
      FLOPs: 2 x (layer parameters) per row, 2 x hidden x vocab per sampled token, and
      4 x layers x heads x head_dim per key attended (decode) and per causal key (prefill).

  Both ignore the KV pool's size (a limit can only add steps) and every host cost, so they are
  bounds, not predictions: the measured run can only be slower.

Defaults: the H100 figures of docs/PERFORMANCE.md for the Llama-3-8B shape in bf16 (decode steps
at context 512: batch 1 6.30 ms, 64 8.55, 256 15.68, 512 27.44; batch 128 at context 2048 19.96
ms; a 512-token prefill 12.6 ms; copy bandwidth 3,000 GB/s, GEMM peak 890 TFLOP/s). A JSON file
(--model) may set any of them: {"decode_context": 512, "decode_ms": {"1": 6.3, ...},
"kv_point": {"batch": 128, "context": 2048, "ms": 19.96}, "prefill": {"tokens": 512, "ms": 12.6},
"bandwidth_gbs": 3000, "peak_tflops": 890, "shape": {"layers": 32, "hidden": 4096, "heads": 32,
"kv_heads": 8, "head_dim": 128, "intermediate": 14336, "vocab": 128256, "dtype_bytes": 2}}, and
instead of a shape the floor's quantities directly: "weights_bytes", "kv_bytes_per_token",
"flops_per_row", "flops_per_sample", "flops_per_key".

    python3 bench/make_sharegpt_workload.py --out sg.jsonl
    python3 bench/sharegpt_bound.py sg.jsonl                      # defaults: H100, 8B bf16
    python3 bench/sharegpt_bound.py sg.jsonl --caps 1024,512 --steps 2182 --json
"""

import argparse
import json
import math
import sys

H100_8B = {
    "decode_context": 512,
    "decode_ms": {"1": 6.30, "64": 8.55, "256": 15.68, "512": 27.44},
    "kv_point": {"batch": 128, "context": 2048, "ms": 19.96},
    "prefill": {"tokens": 512, "ms": 12.6},
    "bandwidth_gbs": 3000.0,
    "peak_tflops": 890.0,
    "shape": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
              "intermediate": 14336, "vocab": 128256, "dtype_bytes": 2},
}
FLOOR_KEYS = ("weights_bytes", "kv_bytes_per_token", "flops_per_row", "flops_per_sample",
              "flops_per_key")


class BadInput(Exception):
    pass


def read_workload(path):
    """[(input_len, output_len)] from a JSON-lines workload; errors name the file and line."""
    rows = []
    try:
        f = open(path)
    except OSError as e:
        raise BadInput(f"{path}: cannot be read ({e.strerror})")
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadInput(f"{where}: not JSON ({e.msg})")
            if not isinstance(obj, dict):
                raise BadInput(f"{where}: expected an object")
            if "prompt_ids" in obj:
                ids = obj["prompt_ids"]
                if not isinstance(ids, list) or not ids:
                    raise BadInput(f"{where}: prompt_ids must be a non-empty array")
                i = len(ids)
            else:
                i = obj.get("input_len")
            o = obj.get("output_len")
            for name, v in (("input_len", i), ("output_len", o)):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise BadInput(f"{where}: {name} must be an integer >= 1, not {v!r}")
            rows.append((i, o))
    if not rows:
        raise BadInput(f"{path}: no requests")
    return rows


def number(where, v, positive=True):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadInput(f"{where} must be a number, not {v!r}")
    if positive and v <= 0:
        raise BadInput(f"{where} must be > 0, not {v!r}")
    return float(v)


def load_model(path):
    model = json.loads(json.dumps(H100_8B))
    if path:
        try:
            with open(path) as f:
                given = json.load(f)
        except OSError as e:
            raise BadInput(f"{path}: cannot be read ({e.strerror})")
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}: not JSON ({e.msg})")
        if not isinstance(given, dict):
            raise BadInput(f"{path}: expected an object")
        known = set(H100_8B) | set(FLOOR_KEYS)
        for k in given:
            if k not in known:
                raise BadInput(f"{path}: unknown key {k!r} (known: {', '.join(sorted(known))})")
        if any(k in given for k in FLOOR_KEYS):
            model.pop("shape")
        model.update(given)
    return model


def lower_convex_hull(points):
    """The greatest convex function under the points (x ascending): its vertices."""
    hull = []
    for p in sorted(points):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # Drop the middle vertex when it lies on or above the chord from x1 to p.
            if (y2 - y1) * (p[0] - x1) >= (p[1] - y1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


class Piecewise:
    """A piecewise-linear function through vertices, extended with the end slopes."""

    def __init__(self, vertices):
        self.v = vertices

    def __call__(self, x):
        v = self.v
        if len(v) == 1:
            return v[0][1]
        for k in range(1, len(v)):
            if x <= v[k][0] or k == len(v) - 1:
                (x1, y1), (x2, y2) = v[k - 1], v[k]
                return y1 + (y2 - y1) * (x - x1) / (x2 - x1)
        raise AssertionError

    def inverse(self, y):
        """The least x >= the first vertex with f(x) >= y (f is increasing there)."""
        v = self.v
        if y <= v[0][1] or len(v) == 1:
            return v[0][0]
        for k in range(1, len(v)):
            (x1, y1), (x2, y2) = v[k - 1], v[k]
            if y <= y2 or k == len(v) - 1:
                if y2 <= y1:
                    raise BadInput("the decode step costs must grow with the batch")
                return x1 + (y - y1) * (x2 - x1) / (y2 - y1)
        raise AssertionError


def step_model(model):
    """(N, c, w): step cost without KV reads as a function of rows, ms per key, prefill weight."""
    ctx = number("decode_context", model["decode_context"])
    dm = model["decode_ms"]
    if not isinstance(dm, dict) or len(dm) < 1:
        raise BadInput("decode_ms must map batch sizes to ms, e.g. {\"1\": 6.3, \"64\": 8.55}")
    measured = []
    for b, ms in dm.items():
        try:
            batch = int(b)
        except ValueError:
            raise BadInput(f"decode_ms: batch {b!r} is not an integer")
        if batch < 1:
            raise BadInput(f"decode_ms: batch {batch} must be >= 1")
        measured.append((float(batch), number(f"decode_ms[{b}]", ms)))
    measured.sort()
    at_ctx = Piecewise(measured)  # measured decode step at the base context, interpolated
    kp = model["kv_point"]
    kb = number("kv_point.batch", kp.get("batch"))
    kc = number("kv_point.context", kp.get("context"))
    kms = number("kv_point.ms", kp.get("ms"))
    if kc <= ctx:
        raise BadInput(f"kv_point.context ({kc:g}) must exceed decode_context ({ctx:g})")
    # Each decode row of the kv point reads kc - ctx more keys than at the base context; a
    # negative estimate would only loosen the bound, so it is clamped at 0.
    c = max(0.0, (kms - at_ctx(kb)) / (kb * (kc - ctx)))
    n = Piecewise(lower_convex_hull([(b, ms - c * ctx * b) for b, ms in measured]))
    pf = model["prefill"]
    pt = number("prefill.tokens", pf.get("tokens"))
    pms = number("prefill.ms", pf.get("ms"))
    w = n.inverse(pms) / pt
    return n, c, w, measured


def floor_quantities(model):
    if "shape" not in model:
        q = {}
        for k in FLOOR_KEYS:
            if k not in model:
                raise BadInput(f"without a shape the model must set {k}")
            q[k] = number(k, model[k], positive=k in ("weights_bytes", "kv_bytes_per_token"))
            if q[k] < 0:
                raise BadInput(f"{k} must be >= 0, not {model[k]!r}")
        return q
    s = model["shape"]
    for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
              "dtype_bytes"):
        number(f"shape.{k}", s.get(k))
    L, h, H, kvh, hd = s["layers"], s["hidden"], s["heads"], s["kv_heads"], s["head_dim"]
    layer_params = (h * H * hd + 2 * h * kvh * hd + H * hd * h + 3 * h * s["intermediate"] + 2 * h)
    head_params = h * s["vocab"] + h
    return {
        "weights_bytes": (L * layer_params + head_params) * s["dtype_bytes"],
        "kv_bytes_per_token": 2 * L * kvh * hd * s["dtype_bytes"],
        "flops_per_row": 2 * L * layer_params,
        "flops_per_sample": 2 * head_params,
        "flops_per_key": 4 * L * H * hd,
    }


def totals(rows, cap=None):
    """Workload sums: steps n_min, prefill rows, decode rows, decode keys, prefill causal keys."""
    out = [min(o, cap) if cap else o for _, o in rows]
    inp = [i for i, _ in rows]
    return {
        "requests": len(rows),
        "input_tokens": sum(inp),
        "output_tokens": sum(out),
        "n_min": max(out),
        "decode_rows": sum(o - 1 for o in out),
        "decode_keys": sum((o - 1) * i + (o - 1) * o // 2 for i, o in zip(inp, out)),
        "prefill_keys": sum(i * (i + 1) // 2 for i in inp),
    }


def measured_bound(t, n_fn, c, w, steps=None):
    """(ms, steps used): min over n >= n_min (or n = steps) of n N(R / n) + c K."""
    r = t["decode_rows"] + w * t["input_tokens"]

    def f(n):
        return n * n_fn(r / n)

    if steps is not None:
        n = steps
    else:
        # f is convex in n: walk up from n_min while it falls (doubling, then bisecting).
        n = t["n_min"]
        if f(n + 1) < f(n):
            lo, hi = n, n + 1
            while f(hi + 1) < f(hi):
                lo, hi = hi, hi * 2
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if f(mid + 1) < f(mid):
                    lo = mid
                else:
                    hi = mid
            n = hi
    return f(n) + c * t["decode_keys"], n


def floor_bound(t, q, bw_gbs, peak_tflops):
    bw = bw_gbs * 1e9
    peak = peak_tflops * 1e12
    memory_s = (t["n_min"] * q["weights_bytes"] +
                (t["decode_keys"] + t["decode_rows"] + t["input_tokens"]) * q["kv_bytes_per_token"]) / bw
    flops = ((t["decode_rows"] + t["input_tokens"]) * q["flops_per_row"] +
             t["output_tokens"] * q["flops_per_sample"] +
             (t["decode_keys"] + t["prefill_keys"]) * q["flops_per_key"])
    compute_s = flops / peak
    return max(memory_s, compute_s) * 1e3, memory_s * 1e3, compute_s * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", help="JSON-lines workload (bench/make_sharegpt_workload.py)")
    ap.add_argument("--model", help="JSON step-cost model (default: the H100 8B bf16 figures)")
    ap.add_argument("--caps", default="1024,512",
                    help="output caps to evaluate, comma-separated (default 1024,512; '' for none)")
    ap.add_argument("--steps", type=int,
                    help="also the least time a run of exactly this many steps could take "
                         "(e.g. a measured run's step count)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args()
    try:
        rows = read_workload(args.workload)
        model = load_model(args.model)
        n_fn, c, w, measured = step_model(model)
        q = floor_quantities(model)
        bw = number("bandwidth_gbs", model["bandwidth_gbs"])
        peak = number("peak_tflops", model["peak_tflops"])
        caps = [None]
        for s in args.caps.split(","):
            if s.strip():
                try:
                    caps.append(int(s))
                except ValueError:
                    raise BadInput(f"--caps: {s!r} is not an integer")
                if caps[-1] < 1:
                    raise BadInput(f"--caps: {caps[-1]} must be >= 1")
        if args.steps is not None and args.steps < totals(rows)["n_min"]:
            raise BadInput(f"--steps {args.steps} is fewer than the longest request's "
                           f"{totals(rows)['n_min']} output tokens: no run takes so few steps")
    except BadInput as e:
        sys.exit(f"sharegpt_bound: {e}")

    results = []
    for cap in caps:
        t = totals(rows, cap)
        ms, n = measured_bound(t, n_fn, c, w)
        free_ms, free_n = measured_bound(dict(t, n_min=1), n_fn, c, w)
        floor_ms, mem_ms, flop_ms = floor_bound(t, q, bw, peak)
        res = {
            "cap": cap, **t,
            "bound_ms": round(ms, 3), "bound_steps": n,
            "bound_output_tok_s": round(t["output_tokens"] / ms * 1e3, 1),
            "chain_ms": round(n * n_fn((t["decode_rows"] + w * t["input_tokens"]) / n), 3),
            "kv_ms": round(c * t["decode_keys"], 3),
            "no_chain_output_tok_s": round(t["output_tokens"] / free_ms * 1e3, 1),
            "floor_ms": round(floor_ms, 3), "floor_memory_ms": round(mem_ms, 3),
            "floor_compute_ms": round(flop_ms, 3),
            "floor_output_tok_s": round(t["output_tokens"] / floor_ms * 1e3, 1),
        }
        if args.steps is not None and cap is None:
            s_ms, _ = measured_bound(t, n_fn, c, w, steps=args.steps)
            res["steps_given"] = args.steps
            res["steps_bound_ms"] = round(s_ms, 3)
            res["steps_bound_output_tok_s"] = round(t["output_tokens"] / s_ms * 1e3, 1)
        results.append(res)

    model_out = {
        "ms_per_key": c, "prefill_row_weight": round(w, 4),
        "step_ms_without_kv": [[x, round(y, 4)] for x, y in n_fn.v],
        "weights_bytes": q["weights_bytes"], "kv_bytes_per_token": q["kv_bytes_per_token"],
    }
    if args.json:
        print(json.dumps({"workload": args.workload, "model": model_out, "results": results}))
        return
    t0 = results[0]
    print(f"workload {args.workload}: {t0['requests']} requests, {t0['input_tokens']} input and "
          f"{t0['output_tokens']} output tokens, longest output {t0['n_min']}")
    print(f"step model: N(rows) through {', '.join(f'{x:g}:{y:.3f}' for x, y in n_fn.v)} ms, "
          f"{c * 1e6:.1f} ns per key read, a prefill row weighs {w:.3f} of a decode row")
    print(f"floor: {q['weights_bytes'] / 1e9:.2f} GB of weights a step, "
          f"{q['kv_bytes_per_token'] / 1024:.0f} KiB of KV a token, {bw:g} GB/s, {peak:g} TFLOP/s")
    hdr = ("output cap", "steps >=", "bound s", "out tok/s <=", "chain s", "KV s",
           "no-chain tok/s", "floor s", "floor tok/s <=")
    print(" | ".join(hdr))
    for r in results:
        print(" | ".join([
            "none" if r["cap"] is None else str(r["cap"]), str(r["n_min"]),
            f"{r['bound_ms'] / 1e3:.2f}", f"{r['bound_output_tok_s']:,.0f}",
            f"{r['chain_ms'] / 1e3:.2f}", f"{r['kv_ms'] / 1e3:.2f}",
            f"{r['no_chain_output_tok_s']:,.0f}", f"{r['floor_ms'] / 1e3:.2f}",
            f"{r['floor_output_tok_s']:,.0f}"]))
    if args.steps is not None:
        r = results[0]
        print(f"a run of {r['steps_given']} steps takes at least {r['steps_bound_ms'] / 1e3:.2f} s: "
              f"<= {r['steps_bound_output_tok_s']:,.0f} output tok/s")


if __name__ == "__main__":
    main()
