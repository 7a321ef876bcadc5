#!/usr/bin/env python3
"""Summarises and compares step traces (docs/engine.md#step-trace).

`weft bench --step-trace FILE` writes one JSON line per step the engine ran and
`sched_sim_bench --step-trace FILE` one per step it simulated, in the same format: a header with
the scheduler's settings, then per step the sequences running and waiting, decode rows and the
keys they read, prefill rows, the requests admitted ([prompt_len, max_new_tokens], in order) and
the KV pages held.

  step_trace_summary.py TRACE                  what the run did: steps, mean batch, when the
                                               longest requests were admitted
  step_trace_summary.py TRACE --workload FILE  also: were requests admitted in the file's order?
  step_trace_summary.py ENGINE SIM             compare two traces of the same workload: settings,
                                               admission order, steps, the first step that
                                               differs; exit status 1 when the admission orders
                                               differ or the step counts differ by more than
                                               --tolerance (or the first differing step is shown
                                               with --exact and any step differs)
"""

import argparse
import json
import sys

SETTINGS = ("page_size", "kv_pages", "max_tokens_per_step", "max_running", "admission",
            "schedule_policy", "prefix_cache")
STEP_FIELDS = ("running", "waiting", "decode_rows", "decode_keys", "prefill_rows",
               "prefill_sequences", "preempted", "kv_pages_held", "admitted")


def fail(message):
    print("step_trace_summary: " + message, file=sys.stderr)
    sys.exit(2)


def read_trace(path):
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail("%s: cannot be read (%s)" % (path, e.strerror))
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            fail("%s:%d: not JSON" % (path, n))
    if not rows or rows[0].get("trace") != "weft-steps":
        fail("%s: not a step trace (its first line is not {\"trace\":\"weft-steps\",...})" % path)
    for n, r in enumerate(rows[1:], 2):
        missing = [k for k in STEP_FIELDS if k not in r]
        if missing:
            fail("%s:%d: a step without %s" % (path, n, ", ".join(missing)))
    return rows[0], rows[1:]


def read_workload(path):
    order = []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail("%s: cannot be read (%s)" % (path, e.strerror))
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            prompt = len(r["prompt_ids"]) if "prompt_ids" in r else int(r["input_len"])
            order.append([prompt, int(r["output_len"])])
        except (ValueError, KeyError, TypeError):
            fail("%s:%d: needs input_len (or prompt_ids) and output_len" % (path, n))
    return order


def admitted(steps):
    return [a for s in steps for a in s["admitted"]]


def summary(path, header, steps):
    order = admitted(steps)
    n = len(steps)
    print("%s (%s): %d steps, %d requests admitted; mean running %.1f, decode rows %.1f, "
          "prefill rows %.1f; peak KV pages %d of %d; %d preempted" % (
              path, header.get("source", "?"), n, len(order),
              sum(s["running"] for s in steps) / max(n, 1),
              sum(s["decode_rows"] for s in steps) / max(n, 1),
              sum(s["prefill_rows"] for s in steps) / max(n, 1),
              max((s["kv_pages_held"] for s in steps), default=0), header.get("kv_pages", 0),
              sum(s["preempted"] for s in steps)))
    at = {}
    for i, s in enumerate(steps):
        for a in s["admitted"]:
            at.setdefault(tuple(a), i)
    longest = sorted(at, key=lambda a: -a[1])[:5]
    print("  longest outputs admitted at steps: " +
          ", ".join("%d tokens at %d (done by %d)" % (a[1], at[a], at[a] + a[1]) for a in longest))
    print("  first outputs admitted: %s" % [a[1] for a in order[:12]])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("other", nargs="?", help="a second trace to compare with the first")
    p.add_argument("--workload", help="the workload file both ran: check the admission order")
    p.add_argument("--tolerance", type=int, default=0,
                   help="steps the two traces may differ by (default 0)")
    p.add_argument("--exact", action="store_true",
                   help="with two traces: every step must match (all fields but t_ms)")
    a = p.parse_args()
    ok = True
    header, steps = read_trace(a.trace)
    summary(a.trace, header, steps)
    traces = [(a.trace, header, steps)]
    if a.other:
        h2, s2 = read_trace(a.other)
        summary(a.other, h2, s2)
        traces.append((a.other, h2, s2))
        differ = [k for k in SETTINGS if header.get(k) != h2.get(k)]
        if differ:
            fail("the traces ran with different settings: " + ", ".join(
                "%s %s against %s" % (k, header.get(k), h2.get(k)) for k in differ))
        if admitted(steps) != admitted(s2):
            x, y = admitted(steps), admitted(s2)
            i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
            print("admission orders differ from request %d: %s against %s" % (
                i, x[i:i + 5], y[i:i + 5]))
            ok = False
        else:
            print("admission orders agree (%d requests)" % len(admitted(steps)))
        first = next((i for i, (u, v) in enumerate(zip(steps, s2))
                      if any(u[k] != v[k] for k in STEP_FIELDS)), None)
        if first is None and len(steps) == len(s2):
            print("every step agrees (%d steps)" % len(steps))
        else:
            if first is not None:
                u, v = steps[first], s2[first]
                print("first differing step %d: %s" % (first, "; ".join(
                    "%s %s against %s" % (k, u[k], v[k]) for k in STEP_FIELDS if u[k] != v[k])))
            if a.exact:
                ok = False
        print("steps: %d against %d" % (len(steps), len(s2)))
        if abs(len(steps) - len(s2)) > a.tolerance:
            ok = False
    if a.workload:
        order = read_workload(a.workload)
        for path, _, st in traces:
            got = admitted(st)
            if len(got) < len(order):  # --num-requests: the file's first requests
                order = order[:len(got)]
            if got == order:
                print("%s admitted the %d requests in the file's order" % (path, len(order)))
            else:
                i = next((i for i in range(min(len(got), len(order))) if got[i] != order[i]),
                         min(len(got), len(order)))
                print("%s admitted the requests out of the file's order from request %d: "
                      "outputs %s where the file has %s" % (
                          path, i, [g[1] for g in got[i:i + 8]], [o[1] for o in order[i:i + 8]]))
                ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
