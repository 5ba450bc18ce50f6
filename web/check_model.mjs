// Can the page's onnxruntime-web load these models? `edge-deploy convert model --target browser-wasm` asks
// before it converts (converters/byom/target_ops.py): the same wasm build the site ships (ort.wasm.min.mjs +
// ort-wasm-simd-threaded.wasm from web/node_modules), run in Node.js, 1 thread, graph optimisations off.
// Usage: node web/check_model.mjs DIST_DIR MODEL.onnx... ; prints one JSON line per model:
// {"file", "ok": true, "inputs", "outputs"} or {"file", "ok": false, "error"}.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const [dist, ...models] = process.argv.slice(2);
const base = pathToFileURL(dist.endsWith('/') ? dist : `${dist}/`).href;
const ort = await import(`${base}ort.wasm.min.mjs`);
ort.env.wasm.numThreads = 1;
ort.env.wasm.wasmPaths = base;
ort.env.logLevel = 'error';

for (const file of models) {
  let line;
  try {
    const session = await ort.InferenceSession.create(readFileSync(file), {
      executionProviders: ['wasm'],
      graphOptimizationLevel: 'disabled',
    });
    line = { file, ok: true, inputs: session.inputNames, outputs: session.outputNames };
    await session.release();
  } catch (err) {
    line = { file, ok: false, error: String(err && err.message ? err.message : err) };
  }
  console.log(JSON.stringify(line));
}
