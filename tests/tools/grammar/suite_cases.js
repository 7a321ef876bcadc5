// The JSON Schema Test Suite, as json_schema_suite's cases, and its report.
//
//   node suite_cases.js cases DRAFT4_DIR EXTRA_DIR OUT.json
//     Translates the suite's draft 4 files (npm json-schema-test-suite holds drafts 3 and 4
//     only) into JSON Schema 2020-12: items as an array becomes prefixItems (additionalItems
//     becomes items), boolean exclusiveMinimum/Maximum become numbers, dependencies become
//     dependentRequired/dependentSchemas, id becomes $id; $refs into items/N follow. Files of
//     EXTRA_DIR (tests/tools/grammar/suite-2020-12: keywords draft 4 lacks, in the suite's
//     format, written for 2020-12) are added as they are. optional/zeroTerminatedFloats (1.0 is
//     an integer in 2020-12) and optional/bignum (JavaScript loses the digits) are left out.
//
//   node suite_cases.js report RESULTS.jsonl BASELINE.json [--markdown] [--write-baseline]
//     Counts per file (keyword): schemas compiled/refused, valid instances accepted, invalid
//     instances rejected. Prints FAIL for every invalid instance accepted (a soundness bug)
//     and for every count below the baseline; --write-baseline records the counts instead.
"use strict";
const fs = require("fs");
const path = require("path");

const schemaMaps = ["properties", "patternProperties", "definitions", "$defs", "dependentSchemas"];
const schemaLists = ["allOf", "anyOf", "oneOf", "prefixItems"];
const schemaValues = ["not", "additionalProperties", "items", "additionalItems", "contains",
  "if", "then", "else", "propertyNames"];

function translate(s) {
  if (typeof s !== "object" || s === null || Array.isArray(s)) return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) out[k] = v;
  if (Array.isArray(out.items)) {
    out.prefixItems = out.items;
    delete out.items;
    if ("additionalItems" in out) out.items = out.additionalItems;
  }
  delete out.additionalItems;
  for (const [bool, bound] of [["exclusiveMinimum", "minimum"], ["exclusiveMaximum", "maximum"]]) {
    if (typeof out[bool] === "boolean") {
      if (out[bool] && bound in out) {
        out[bool] = out[bound];
        delete out[bound];
      } else {
        delete out[bool];
      }
    }
  }
  if (out.dependencies) {
    for (const [k, v] of Object.entries(out.dependencies)) {
      const key = Array.isArray(v) ? "dependentRequired" : "dependentSchemas";
      out[key] = out[key] || {};
      out[key][k] = v;
    }
    delete out.dependencies;
  }
  if (typeof out.id === "string") {
    out.$id = out.id;
    delete out.id;
  }
  if (typeof out.$ref === "string") out.$ref = out.$ref.replace(/\/items\/(\d+)/g, "/prefixItems/$1");
  for (const k of schemaMaps) {
    if (out[k] && typeof out[k] === "object") {
      out[k] = Object.fromEntries(Object.entries(out[k]).map(([n, v]) => [n, translate(v)]));
    }
  }
  for (const k of schemaLists) if (Array.isArray(out[k])) out[k] = out[k].map(translate);
  for (const k of schemaValues) if (k in out) out[k] = translate(out[k]);
  return out;
}

function cases(draft4, extra, outFile) {
  const groups = [];
  const add = (file, list, tr) => {
    for (const g of list) {
      groups.push({ file, description: g.description, schema: tr(g.schema), tests: g.tests });
    }
  };
  const skip = new Set(["optional/zeroTerminatedFloats.json", "optional/bignum.json"]);
  for (const sub of ["", "optional/"]) {
    for (const f of fs.readdirSync(path.join(draft4, sub)).sort()) {
      if (!f.endsWith(".json") || skip.has(sub + f)) continue;
      add("draft4/" + sub + f, JSON.parse(fs.readFileSync(path.join(draft4, sub, f), "utf8")), translate);
    }
  }
  for (const f of fs.readdirSync(extra).sort()) {
    if (!f.endsWith(".json")) continue;
    add("2020-12/" + f, JSON.parse(fs.readFileSync(path.join(extra, f), "utf8")), (s) => s);
  }
  fs.writeFileSync(outFile, JSON.stringify(groups));
  console.log(`suite_cases: ${groups.length} schemas -> ${outFile}`);
}

function report(resultsFile, baselineFile, flags) {
  const rows = {};
  const row = (f) => (rows[f] = rows[f] || { schemas: 0, refused: 0, valid: 0, validAccepted: 0, invalid: 0, invalidRejected: 0 });
  const seen = new Set();
  let failures = 0;
  for (const line of fs.readFileSync(resultsFile, "utf8").split("\n").filter(Boolean)) {
    const r = JSON.parse(line);
    const key = r.file + "\u0000" + r.group;
    const x = row(r.file);
    if (!seen.has(key)) {
      seen.add(key);
      x.schemas++;
      if ("refused" in r) x.refused++;
    }
    if ("refused" in r) continue;
    if (r.valid) {
      x.valid++;
      if (r.accepted) x.validAccepted++;
    } else {
      x.invalid++;
      if (!r.accepted) x.invalidRejected++;
      else {
        failures++;
        console.log(`FAIL unsound: ${r.file} '${r.group}' / '${r.test}': ${r.data} is invalid but accepted by ${r.schema}`);
      }
    }
  }
  const files = Object.keys(rows).sort();
  const total = { schemas: 0, refused: 0, valid: 0, validAccepted: 0, invalid: 0, invalidRejected: 0 };
  for (const f of files) for (const k of Object.keys(total)) total[k] += rows[f][k];
  if (flags.includes("--markdown")) {
    const pct = (a, b) => (b ? `${a}/${b} (${Math.round((100 * a) / b)}%)` : "-");
    console.log("| file (keyword) | schemas compiled | valid accepted | invalid rejected |");
    console.log("| --- | --- | --- | --- |");
    for (const f of [...files, "total"]) {
      const x = f === "total" ? total : rows[f];
      const name = f === "total" ? "**total**" : f.replace(/\.json$/, "");
      console.log(`| ${name} | ${pct(x.schemas - x.refused, x.schemas)} | ${pct(x.validAccepted, x.valid)} | ${pct(x.invalidRejected, x.invalid)} |`);
    }
  }
  if (flags.includes("--write-baseline")) {
    const base = {};
    for (const f of files) base[f] = { compiled: rows[f].schemas - rows[f].refused, validAccepted: rows[f].validAccepted };
    fs.writeFileSync(baselineFile, JSON.stringify(base, null, 1) + "\n");
  } else {
    const base = JSON.parse(fs.readFileSync(baselineFile, "utf8"));
    for (const [f, b] of Object.entries(base)) {
      const x = rows[f] || { schemas: 0, refused: 0, validAccepted: 0 };
      if (x.schemas - x.refused < b.compiled) {
        failures++;
        console.log(`FAIL regression: ${f}: ${x.schemas - x.refused} schemas compiled, the baseline has ${b.compiled}`);
      }
      if (x.validAccepted < b.validAccepted) {
        failures++;
        console.log(`FAIL regression: ${f}: ${x.validAccepted} valid instances accepted, the baseline has ${b.validAccepted}`);
      }
    }
  }
  console.log(`suite_report: ${total.schemas} schemas, ${total.schemas - total.refused} compiled; valid accepted ${total.validAccepted}/${total.valid}; invalid rejected ${total.invalidRejected}/${total.invalid}; ${failures} failures`);
  process.exit(failures ? 1 : 0);
}

module.exports = { translate };
if (require.main !== module) return;
const [cmd, ...args] = process.argv.slice(2);
if (cmd === "cases") cases(args[0], args[1], args[2]);
else if (cmd === "report") report(args[0], args[1], args.slice(2));
else {
  console.error("usage: node suite_cases.js cases DRAFT4_DIR EXTRA_DIR OUT.json | report RESULTS.jsonl BASELINE.json [--markdown] [--write-baseline]");
  process.exit(2);
}
