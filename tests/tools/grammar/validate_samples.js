// Checks json_schema_suite's `sample` output with ajv (JSON Schema 2020-12, formats by
// ajv-formats) and reports the corpus's coverage: schemas compiled, refused by reason.
// Prints FAIL for every output that does not parse or validate, and when fewer schemas
// compiled than MIN_COMPILED (so coverage cannot silently regress).
// Usage: node validate_samples.js SCHEMA_DIR SAMPLES.jsonl MIN_COMPILED [--markdown]
// (WEFT_TEST_NODE: the folder whose node_modules has ajv and ajv-formats)
"use strict";
const fs = require("fs");
const path = require("path");
const nodeDir = process.env.WEFT_TEST_NODE ? path.join(process.env.WEFT_TEST_NODE, "node_modules") : "";
const load = (name) => require(nodeDir ? path.join(nodeDir, name) : name);
const Ajv2020 = load("ajv/dist/2020").default;
const addFormats = load("ajv-formats").default || load("ajv-formats");

const [schemaDir, samplesFile, minCompiled, ...flags] = process.argv.slice(2);
let failures = 0, compiled = 0, total = 0, outputs = 0, warned = 0;
const reasons = {};
const reason = (msg) => {
  let m;
  if ((m = /unsupported keyword '([^']+)'/.exec(msg))) return `keyword \`${m[1]}\``;
  if ((m = /unsupported format '([^']+)'/.exec(msg))) return `format \`${m[1]}\``;
  if (/is not local/.test(msg)) return "remote `$ref`";
  if (/oneOf allows exactly one/.test(msg)) return "`oneOf` branches that may overlap";
  if (/bounds that are not integers/.test(msg)) return "`number` bounds that are not integers";
  if (/beside .format.|beside .pattern./.test(msg)) return "`pattern`/`format` with lengths";
  if (/anchors are supported only/.test(msg)) return "`pattern` with `^` inside a group";
  return msg.replace(/^JSON Schema at '[^']*': /, "").slice(0, 80);
};
for (const line of fs.readFileSync(samplesFile, "utf8").split("\n").filter(Boolean)) {
  const r = JSON.parse(line);
  total++;
  if (r.warnings && r.warnings.length) warned++;
  if ("refused" in r) {
    const why = reason(r.refused);
    reasons[why] = (reasons[why] || 0) + 1;
    continue;
  }
  compiled++;
  const schema = JSON.parse(fs.readFileSync(path.join(schemaDir, r.schema), "utf8"));
  delete schema.$schema;  // the files are 2020-12 (collect.js translates them) whatever they say
  const ajv = new Ajv2020({ strict: false, allErrors: true, logger: false });
  addFormats(ajv);
  let validate;
  try {
    validate = ajv.compile(schema);
  } catch (e) {
    console.log(`FAIL ${r.schema}: ajv cannot compile it: ${e.message}`);
    failures++;
    continue;
  }
  for (const text of r.outputs) {
    outputs++;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      console.log(`FAIL ${r.schema}: output is not JSON: ${text}`);
      failures++;
      continue;
    }
    if (!validate(value)) {
      console.log(`FAIL ${r.schema}: ${text.slice(0, 300)} is invalid: ${ajv.errorsText(validate.errors)}`);
      failures++;
    }
  }
}
if (compiled < Number(minCompiled)) {
  console.log(`FAIL ${compiled} schemas compiled, fewer than the baseline's ${minCompiled}`);
  failures++;
}
if (flags.includes("--markdown")) {
  console.log(`| schemas | compiled | outputs checked by ajv | invalid outputs |`);
  console.log(`| --- | --- | --- | --- |`);
  console.log(`| ${total} | ${compiled} (${Math.round((100 * compiled) / total)}%) | ${outputs} | ${failures} |\n`);
  console.log(`| refused because of | schemas |`);
  console.log(`| --- | --- |`);
  for (const [why, n] of Object.entries(reasons).sort((a, b) => b[1] - a[1])) console.log(`| ${why} | ${n} |`);
}
console.log(`validate_samples: ${total} schemas, ${compiled} compiled (${warned} with warnings), ${outputs} outputs validated, ${failures} failures`);
process.exit(failures ? 1 : 0);
