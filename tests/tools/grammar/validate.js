// Checks grammar_corpus's output with ajv: every sample that finished with `stop` must parse
// as JSON and validate against its schema (JSON Schema 2020-12, formats by ajv-formats).
// Samples cut by max_tokens (`length`) are skipped: they are prefixes. Fails when an error
// sample or a stop sample that does not validate appears, or when too few samples stopped for
// the run to mean anything.
// Usage: node validate.js SCHEMA_DIR RESULTS.jsonl MIN_STOP_FRACTION   (WEFT_TEST_NODE: node_modules)
"use strict";
const fs = require("fs");
const path = require("path");
const nodeDir = process.env.WEFT_TEST_NODE ? path.join(process.env.WEFT_TEST_NODE, "node_modules") : "";
const load = (name) => require(nodeDir ? path.join(nodeDir, name) : name);
const Ajv2020 = load("ajv/dist/2020").default;
const addFormats = load("ajv-formats").default || load("ajv-formats");

const [schemaDir, resultsFile, minStop] = process.argv.slice(2);
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const validators = {};
for (const f of fs.readdirSync(schemaDir).filter((f) => f.endsWith(".json"))) {
  validators[f] = ajv.compile(JSON.parse(fs.readFileSync(path.join(schemaDir, f), "utf8")));
}
let failures = 0, stopped = 0, total = 0;
const perSchema = {};
for (const line of fs.readFileSync(resultsFile, "utf8").split("\n").filter(Boolean)) {
  const r = JSON.parse(line);
  total++;
  perSchema[r.schema] = perSchema[r.schema] || { stop: 0, total: 0 };
  perSchema[r.schema].total++;
  if (r.finish === "error") {
    console.log(`FAIL ${r.schema}#${r.sample}: finished with an error: ${r.error}`);
    failures++;
    continue;
  }
  if (r.finish !== "stop") continue;
  stopped++;
  perSchema[r.schema].stop++;
  let value;
  try {
    value = JSON.parse(r.text);
  } catch (e) {
    console.log(`FAIL ${r.schema}#${r.sample}: not JSON (${e.message}): ${JSON.stringify(r.text)}`);
    failures++;
    continue;
  }
  const validate = validators[r.schema];
  if (!validate(value)) {
    console.log(`FAIL ${r.schema}#${r.sample}: ${JSON.stringify(r.text)} does not validate: ` +
                ajv.errorsText(validate.errors));
    failures++;
  }
}
const never = Object.entries(perSchema).filter(([, s]) => s.stop === 0).map(([n]) => n);
console.log(`${total} samples, ${stopped} finished with stop and were validated; ` +
            `schemas never stopped: ${never.length ? never.join(", ") : "none"}`);
if (stopped < Number(minStop) * total) {
  console.log(`FAIL only ${stopped} of ${total} samples stopped (want ${minStop} at least)`);
  failures++;
}
console.log(`${failures} failure(s)`);
process.exit(failures ? 1 : 0);
