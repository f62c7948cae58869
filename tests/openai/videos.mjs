// The official `openai` npm package against mediagate's /v1/videos
// (tests/it/openai_sdk.rs): create, poll, download, list. Prints one JSON object.
//
// node videos.mjs NODE_MODULES_DIR BASE_URL KEY OUT_PATH
import { createRequire } from "node:module";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";

const [modules, baseURL, apiKey, outPath] = process.argv.slice(2);
const require = createRequire(path.join(modules, "package.json"));
const OpenAI = require("openai").default;
// The package exports no `package.json`: read from its directory.
const pkg = JSON.parse(await readFile(path.join(modules, "node_modules/openai/package.json"), "utf8"));

const client = new OpenAI({ apiKey, baseURL, maxRetries: 0 });
let video = await client.videos.create({
  model: "deltaq3-pro",
  prompt: "a cat",
  seconds: "8",
  size: "1280x720",
});
const statuses = [video.status];
while (video.status === "queued" || video.status === "in_progress") {
  await new Promise((r) => setTimeout(r, 100));
  video = await client.videos.retrieve(video.id);
  statuses.push(video.status);
}
const content = await client.videos.downloadContent(video.id);
await writeFile(outPath, Buffer.from(await content.arrayBuffer()));
const listed = [];
for await (const v of client.videos.list({ limit: 2 })) {
  listed.push(v.id);
}
console.log(JSON.stringify({ video, statuses, listed, sdk_version: pkg.version }));
