// response_format in the WebSocket protocol: a constrained generate completes with `stop`
// and parses; a format that does not compile is an error frame before any token.
"use strict";
const path = require("path");
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, "node_modules", "ws"));
const ws = new WebSocket(process.env.WEFT_URL.replace("http", "ws") + "/ws");
const schema = { type: "object", properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 } },
                 required: ["ok", "n"] };
const text = {};
const frames = {};
ws.on("open", () => {
  ws.send(JSON.stringify({ type: "generate", id: "j", prompt: "Result:", max_tokens: 40, temperature: 1, seed: 4,
                           response_format: { type: "json_schema", json_schema: { schema } } }));
  ws.send(JSON.stringify({ type: "generate", id: "bad", prompt: "x",
                           response_format: { type: "json_schema", json_schema: { schema: { not: {} } } } }));
});
ws.on("message", (data) => {
  const f = JSON.parse(data);
  if (f.type === "token") text[f.id] = (text[f.id] || "") + f.text;
  else frames[f.id] = f;
  if (frames.j && frames.bad) finish();
});
function finish() {
  const failures = [];
  if (frames.j.finish_reason !== "stop") failures.push("j finished with " + frames.j.finish_reason);
  try {
    const v = JSON.parse(text.j);
    if (typeof v.ok !== "boolean" || !Number.isInteger(v.n)) failures.push("j: " + text.j);
  } catch (e) {
    failures.push("j is not JSON: " + text.j);
  }
  if (frames.bad.type !== "error" || !/^response_format: JSON Schema at '#': unsupported keyword 'not'/.test(frames.bad.message))
    failures.push("bad: " + JSON.stringify(frames.bad));
  if (text.bad) failures.push("bad produced tokens");
  for (const f of failures) console.log("FAIL " + f);
  if (!failures.length) console.log("websocket response_format checks passed: " + text.j);
  ws.close();
  process.exitCode = failures.length ? 1 : 0;
}
setTimeout(() => { console.log("FAIL timeout"); process.exit(1); }, 30000).unref();
