// Page logic: load the manifest, the runtime and the models; show the sections the site was built with (the
// others stay hidden); run the face pipeline on the sample photos, uploads and webcam frames; keep the gallery
// in IndexedDB (gallery.js). Every failure ends up in #error, never a blank page.

import * as ort from "./ort/ort.wasm.min.mjs";
import { FacePipeline, distance, loadFile } from "./face.js";
import { Gallery } from "./gallery.js";
import { TextGenerator, Tokenizer } from "./text.js";
import { SentenceEncoder, WordPieceTokenizer, rank } from "./search.js";

const $ = (id) => document.getElementById(id);
const state = { pipeline: null, rgb: null, h: 0, w: 0, faces: [], gallery: null, threshold: 0.6 };

function showError(message) {
  const el = $("error");
  el.textContent = message;
  el.hidden = false;
  $("faces").dataset.state = "error";
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

function threadsWanted(manifest) {
  const asked = Number(new URLSearchParams(location.search).get("threads"));
  const max = navigator.hardwareConcurrency || 1;
  const want = asked > 0 ? asked : Math.min(manifest.runtime.threads, max);
  return self.crossOriginIsolated ? want : 1;
}

async function init() {
  const res = await fetch("manifest.json");
  if (!res.ok) throw new Error(`manifest.json: HTTP ${res.status}; expected the manifest written by 'edge-deploy build'`);
  const manifest = await res.json();
  ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
  ort.env.wasm.numThreads = threadsWanted(manifest);
  ort.env.wasm.simd = true;
  $("face").hidden = !manifest.face;
  $("text").hidden = !manifest.text;
  $("search").hidden = !manifest.search;
  if (manifest.face) {
    state.threshold = manifest.face.same_person_threshold;
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
    state.pipeline = await FacePipeline.open(ort, manifest, "models/", options);
    const embedder = manifest.files.find((e) => e.role === "embedder").sha256;
    state.gallery = await Gallery.open(embedder, manifest.samples ? manifest.samples.gallery : []);
    showGallery();
  }
  const detector = manifest.face ? ` · face detector ${manifest.face.detector.kind}` : "";
  $("runtime").textContent =
    `onnxruntime-web ${manifest.runtime.onnxruntime_web} · wasm threads ${ort.env.wasm.numThreads} · ` +
    `cross-origin isolated: ${self.crossOriginIsolated} · precision ${manifest.runtime.precision}${detector}`;
  $("runtime").dataset.threads = String(ort.env.wasm.numThreads);
  state.manifest = manifest;
  if (manifest.text) $("text-status").textContent = manifest.text.message;
  $("text-ui").hidden = !manifest.text;
  if (manifest.search) $("search-status").textContent = manifest.search.message;
  if (manifest.search && manifest.search.example_query) $("query").value = manifest.search.example_query;
  $("search-ui").hidden = !manifest.search;
  $("photo").disabled = false;
  $("enroll").disabled = false;
  $("clear-gallery").disabled = false;
  $("restore-samples").disabled = false;
  $("restore-samples").hidden = !(manifest.samples && manifest.samples.gallery.length);
  if (manifest.samples) showSamples(manifest.samples.photos);
  if (navigator.mediaDevices && navigator.mediaDevices.getUserMedia) {
    $("webcam").hidden = false;
    $("webcam").disabled = false;
  }
}

// The sample photos as buttons: a click runs the face pipeline on the photo (its sha256 checked first).
function showSamples(photos) {
  const box = $("samples");
  box.replaceChildren(document.createTextNode("Sample photos:"));
  for (const photo of photos) {
    const button = document.createElement("button");
    button.type = "button";
    button.title = `${photo.caption}; ${photo.licence}`;
    button.dataset.file = photo.file;
    const img = document.createElement("img");
    img.src = photo.file;
    img.alt = photo.caption;
    button.append(img);
    button.addEventListener("click", guard(() => analyzeSample(photo)));
    box.append(button);
  }
  box.hidden = photos.length === 0;
}

async function analyzeSample(photo) {
  const entry = state.manifest.files.find((e) => e.path === photo.file);
  const blob = new Blob([await loadFile(entry, "")]);
  await analyze(blob, photo.file.split("/").pop());
}

function showGallery() {
  const entries = state.gallery.entries;
  $("gallery").textContent = entries.length ? entries.map((g) => g.name).join(", ") : "empty";
  $("gallery").dataset.state = "ready";
  $("gallery").dataset.count = String(entries.length);
  $("gallery-list").replaceChildren(
    ...entries.map((g) => {
      const li = document.createElement("li");
      li.title = g.origin || "";
      if (g.thumbnail) {
        const img = document.createElement("img");
        img.src = g.thumbnail;
        img.alt = g.name;
        li.append(img);
      }
      li.append(g.name);
      return li;
    }),
  );
}

async function decodeToRgb(source, name) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(source, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
  } catch (err) {
    throw new Error(`${name}: not an image the browser can decode (${err.message || err}); choose a JPEG or PNG photo`);
  }
  const canvas = $("view");
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(bitmap, 0, 0);
  const rgba = ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
  const rgb = new Uint8Array(bitmap.width * bitmap.height * 3);
  for (let i = 0, j = 0; i < rgba.length; i += 4, j += 3) {
    rgb[j] = rgba[i];
    rgb[j + 1] = rgba[i + 1];
    rgb[j + 2] = rgba[i + 2];
  }
  return { rgb, h: bitmap.height, w: bitmap.width, bitmap };
}

function nameOf(descriptor) {
  let best = { name: null, distance: Infinity };
  for (const g of state.gallery.entries) {
    const d = distance(descriptor, g.descriptor);
    if (d < best.distance) best = { name: g.name, distance: d };
  }
  return best.distance <= state.threshold ? best : { name: null, distance: best.distance };
}

function draw(bitmap, faces) {
  const ctx = $("view").getContext("2d");
  ctx.drawImage(bitmap, 0, 0);
  ctx.lineWidth = Math.max(2, bitmap.width / 400);
  ctx.font = `${Math.max(14, bitmap.width / 60)}px sans-serif`;
  for (const face of faces) {
    const [x1, y1, x2, y2] = face.box;
    ctx.strokeStyle = face.match.name ? "#00c070" : "#ffb000";
    ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
    ctx.fillStyle = ctx.strokeStyle;
    ctx.fillText(face.match.name || `unknown ${face.score.toFixed(2)}`, x1, Math.max(12, y1 - 4));
    for (const [px, py] of face.points5) ctx.fillRect(px - 2, py - 2, 4, 4);
  }
}

function report(result, timings) {
  const body = $("timings").querySelector("tbody");
  body.innerHTML = "";
  for (const [k, v] of Object.entries(timings)) {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${k.replace("_ms", "")}</td><td>${v.toFixed(1)}</td>`;
    body.appendChild(tr);
  }
  const list = $("faces");
  list.innerHTML = "";
  for (const face of result) {
    const li = document.createElement("li");
    li.className = face.match.name ? "known" : "unknown";
    const dist = Number.isFinite(face.match.distance) ? ` (distance ${face.match.distance.toFixed(3)})` : "";
    li.textContent = `${face.match.name || "unknown"} · score ${face.score.toFixed(3)}${dist}`;
    list.appendChild(li);
  }
  list.dataset.count = String(result.length);
  list.dataset.state = "done";
}

async function analyze(source, name) {
  clearError();
  $("faces").dataset.state = "running";
  const { rgb, h, w, bitmap } = await decodeToRgb(source, name);
  const { faces, timings } = await state.pipeline.analyze(rgb, h, w);
  Object.assign(state, { rgb, h, w, bitmap, imageName: name });
  state.faces = faces;
  for (const face of state.faces) face.match = face.descriptor ? nameOf(face.descriptor) : { name: null };
  window.edgeLastResult = { image: { name, width: w, height: h }, faces, timings };
  draw(bitmap, state.faces);
  report(state.faces, timings);
  $("status").textContent = `${name}: ${state.faces.length} face(s) in ${timings.total_ms.toFixed(0)} ms.`;
}

// A small square picture of a face from the photo on the canvas, as a data URL, for the gallery list.
function faceThumbnail(box) {
  const [x1, y1, x2, y2] = box;
  const side = Math.max(x2 - x1, y2 - y1) * 1.6;
  const thumb = document.createElement("canvas");
  thumb.width = thumb.height = 56;
  const cx = (x1 + x2) / 2;
  const cy = (y1 + y2) / 2;
  thumb.getContext("2d").drawImage(state.bitmap, cx - side / 2, cy - side / 2, side, side, 0, 0, 56, 56);
  return thumb.toDataURL("image/jpeg", 0.85);
}

async function enroll() {
  const name = $("name").value.trim();
  if (!name) return showError("Gallery: type a name first, then add the largest face of the current photo");
  if (state.faces.length === 0) return showError("Gallery: no face in the current photo to add");
  clearError();
  const area = (f) => (f.box[2] - f.box[0]) * (f.box[3] - f.box[1]);
  const face = state.faces.reduce((a, b) => (area(b) > area(a) ? b : a));
  await state.gallery.add(name, face.descriptor, faceThumbnail(face.box), `added from ${state.imageName}`);
  showGallery();
}

async function clearGallery() {
  clearError();
  await state.gallery.clear();
  showGallery();
}

async function restoreSamples() {
  clearError();
  await state.gallery.addSamples();
  showGallery();
}

async function startWebcam() {
  const video = $("video");
  video.srcObject = await navigator.mediaDevices.getUserMedia({ video: true });
  await video.play();
  video.hidden = false;
  $("snap").hidden = false;
}

function guard(fn) {
  return (...args) => fn(...args).catch((err) => showError(err.message || String(err)));
}

$("photo").addEventListener(
  "change",
  guard(async (ev) => {
    const file = ev.target.files[0];
    ev.target.value = ""; // so choosing the same file again fires "change" again
    if (file) await analyze(file, file.name);
  }),
);
$("enroll").addEventListener("click", guard(enroll));
$("clear-gallery").addEventListener("click", guard(clearGallery));
$("restore-samples").addEventListener("click", guard(restoreSamples));
$("webcam").addEventListener("click", guard(startWebcam));
$("snap").addEventListener(
  "click",
  guard(() => analyze($("video"), "webcam frame")),
);

const loadVerified = (entry) => loadFile(entry, "models/");
// The manifest's entry of a role, a JSON file of the site (sha256 checked), an onnxruntime-web session.
const siteFile = (role) => state.manifest.files.find((e) => e.role === role);
const fetchSiteJson = async (role) => JSON.parse(new TextDecoder().decode(await loadVerified(siteFile(role))));

async function openSiteModel(role) {
  const buf = await loadVerified(siteFile(role));
  try {
    return await ort.InferenceSession.create(new Uint8Array(buf), { executionProviders: ["wasm"] });
  } catch (err) {
    throw new Error(`${siteFile(role).file}: onnxruntime-web cannot load this model (${err.message || err})`);
  }
}

async function openText() {
  if (state.text) return state.text;
  const t = state.manifest.text;
  $("text-status").textContent = `Loading ${t.model} (${t.precision})…`;
  const tokenizer = new Tokenizer(await fetchSiteJson("text.tokenizer"));
  const spec = { ...(await fetchSiteJson("text.generation")), cache_shape: t.cache_shape };
  const session = await openSiteModel("text.decoder");
  state.text = new TextGenerator(ort, session, tokenizer, spec);
  $("text-status").textContent = t.message;
  return state.text;
}

async function generate() {
  clearError();
  const out = $("text-output");
  out.dataset.state = "running";
  out.textContent = "";
  const gen = await openText();
  const max = Number($("max-tokens").value) || 48;
  const result = await gen.generate($("prompt").value, max, (piece) => {
    out.textContent += piece;
  });
  out.textContent = result.text;
  $("text-stats").textContent =
    `${result.prompt_ids.length} prompt tokens · ${result.token_ids.length} new · ` +
    `time to first token ${result.ttft_ms.toFixed(0)} ms · ${result.tokens_per_s.toFixed(1)} tokens/s`;
  window.edgeLastText = result;
  out.dataset.state = "done";
}

// A button that runs `fn`; on failure `outputId`'s data-state says "error" and #error the message.
function runOnClick(buttonId, outputId, fn) {
  $(buttonId).addEventListener(
    "click",
    guard(async () => {
      try {
        await fn();
      } catch (err) {
        $(outputId).dataset.state = "error";
        throw err;
      }
    }),
  );
}

runOnClick("generate", "text-output", generate);

// --- search: embed the site's sentences once (in the page), then rank them against each query ---

async function openSearch() {
  if (state.search) return state.search;
  const info = state.manifest.search;
  $("search-status").textContent = `Loading ${info.model}…`;
  const tokenizer = new WordPieceTokenizer(await fetchSiteJson("search.tokenizer"));
  const sentences = await fetchSiteJson("search.corpus");
  const session = await openSiteModel("search.encoder");
  const encoder = new SentenceEncoder(ort, session, tokenizer, info.seq);
  const t0 = performance.now();
  const vectors = [];
  for (let i = 0; i < sentences.length; i++) {
    $("search-status").textContent = `Embedding the site's sentences in the page: ${i + 1} of ${sentences.length}…`;
    vectors.push((await encoder.embed(sentences[i])).vector);
  }
  const corpusMs = performance.now() - t0;
  state.search = { encoder, sentences, vectors, corpusMs };
  $("search-status").textContent = `${info.message} ${sentences.length} sentences embedded in ${corpusMs.toFixed(0)} ms.`;
  return state.search;
}

async function find() {
  clearError();
  const list = $("search-results");
  list.dataset.state = "running";
  const search = await openSearch();
  const query = $("query").value;
  const t0 = performance.now();
  const { ids, vector } = await search.encoder.embed(query);
  const queryMs = performance.now() - t0;
  const best = rank(vector, search.vectors, 5);
  list.replaceChildren(
    ...best.map(({ index, score }) => {
      const li = document.createElement("li");
      const s = document.createElement("span");
      s.className = "score";
      s.textContent = `${score.toFixed(3)} `;
      li.append(s, search.sentences[index]);
      return li;
    }),
  );
  $("search-stats").textContent = `query embedded in ${queryMs.toFixed(0)} ms (${ids.filter((i) => i !== search.encoder.tokenizer.pad).length} tokens)`;
  window.edgeLastSearch = { query, ids, vector: Array.from(vector), results: best, corpus: search.vectors.map((v) => Array.from(v)) };
  list.dataset.state = "done";
}

runOnClick("find", "search-results", find);

window.edgeReady = init()
  .then(async () => {
    $("status").textContent = "Ready: choose a photo.";
    // the first sample photo, recognised against the gallery before the page says it is ready: no upload
    // needed (?sample=none skips it)
    const photos = state.manifest.face && state.manifest.samples ? state.manifest.samples.photos : [];
    if (photos.length > 0 && new URLSearchParams(location.search).get("sample") !== "none") {
      await guard(() => analyzeSample(photos[0]))();
    }
    $("status").dataset.state = "ready";
  })
  .catch((err) => {
    $("status").textContent = "Failed to start.";
    $("status").dataset.state = "error";
    showError(err.message || String(err));
  });

// Timing hooks for benchmarks/browser_vs_native.py: the same models, inputs and threads as the native run.
async function timeRuns(n, fn) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return ms;
}

window.edgeBench = {
  threads: () => ort.env.wasm.numThreads,
  // The site's detector (BlazeFace or the MTCNN cascade) on the last photo chosen in the page.
  detect: (n) => timeRuns(n, () => state.pipeline.detector.detect(state.rgb, state.h, state.w)),
  // The whole frame on that photo: detect, align and describe every face (FacePipeline.analyze).
  frame: (n) => timeRuns(n, () => state.pipeline.analyze(state.rgb, state.h, state.w)),
  // One ONNX model from the site on a given float32 input (values from the caller, e.g. the native run's).
  async model(url, inputName, dims, values, n) {
    const session = await ort.InferenceSession.create(url, { executionProviders: ["wasm"] });
    const feeds = { [inputName]: new ort.Tensor("float32", Float32Array.from(values), dims) };
    await session.run(feeds); // first run apart: the benchmark reports steady state
    const ms = await timeRuns(n, () => session.run(feeds));
    await session.release();
    return ms;
  },
};
