// The face pipeline in the browser: the site's detector (BlazeFace or MTCNN, manifest.json face.detector) ->
// dlib 5-point landmarks -> dlib chip -> ResNet descriptor, as edge/face/models.py open_face_pipeline() does
// natively.

import { Mtcnn } from "./mtcnn.js";
import { BlazeFace } from "./blazeface.js";
import { MTCNN_TO_HOG_BOX, ShapePredictor, alignChipDlib5, hogLikeRect } from "./align.js";

const CHIP = 150;
const MTCNN_ROLES = ["detector.pnet", "detector.rnet", "detector.onet"];

async function fetchOk(url, what) {
  let res;
  try {
    res = await fetch(url);
  } catch (err) {
    throw new Error(`${url}: cannot fetch the ${what} (${err.message})`);
  }
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} fetching the ${what}`);
  return res;
}

async function sha256Hex(buffer) {
  const digest = await crypto.subtle.digest("SHA-256", buffer);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

// Load one model file listed in the manifest, checking its size and sha256 before use.
export async function loadFile(entry, base) {
  const buf = await (await fetchOk(base + entry.file, `${entry.role} model`)).arrayBuffer();
  const digest = await sha256Hex(buf);
  if (buf.byteLength !== entry.size || digest !== entry.sha256) {
    throw new Error(
      `${entry.file}: ${buf.byteLength} bytes with sha256 ${digest.slice(0, 12)}…; ` +
        `the manifest expects ${entry.size} bytes with sha256 ${entry.sha256.slice(0, 12)}… (file damaged or replaced)`,
    );
  }
  return buf;
}

async function loadShape5(entries, base) {
  const header = JSON.parse(new TextDecoder().decode(await loadFile(entries["landmarks.shape5.header"], base)));
  const bin = await loadFile(entries["landmarks.shape5"], base);
  const arr = (key) => {
    const { dtype, offset, length } = header.arrays[key];
    return dtype === "int32" ? new Int32Array(bin, offset, length) : new Float32Array(bin, offset, length);
  };
  return new ShapePredictor({
    initial: arr("initial_shape"),
    splitIdx: arr("split_idx"),
    splitThresh: arr("split_thresh"),
    leafValues: arr("leaf_values"),
    anchorIdx: arr("anchor_idx"),
    deltas: arr("deltas"),
    ...header.dims,
  });
}

export class FacePipeline {
  static async open(ort, manifest, base, sessionOptions) {
    const entries = Object.fromEntries(manifest.files.filter((e) => e.role).map((e) => [e.role, e]));
    const spec = manifest.face.detector;
    const sessions = {};
    for (const role of [...(spec.kind === "mtcnn" ? MTCNN_ROLES : [spec.role]), "embedder"]) {
      if (!entries[role]) throw new Error(`manifest.json: no file with role '${role}'; rebuild the site`);
      const buf = await loadFile(entries[role], base);
      try {
        sessions[role] = await ort.InferenceSession.create(new Uint8Array(buf), sessionOptions);
      } catch (err) {
        throw new Error(`${entries[role].file}: onnxruntime-web cannot load this model (${err.message || err})`);
      }
    }
    const shape = await loadShape5(entries, base);
    const detector =
      spec.kind === "mtcnn"
        ? new Mtcnn(ort, {
            pnet: sessions["detector.pnet"],
            rnet: sessions["detector.rnet"],
            onet: sessions["detector.onet"],
          })
        : new BlazeFace(ort, sessions[spec.role], spec);
    return new FacePipeline(ort, detector, shape, sessions.embedder, spec);
  }

  // spec: manifest.json face.detector (kind, min_score of the pipeline, hog_box_map, and BlazeFace's settings).
  constructor(ort, detector, shape, embedder, spec) {
    this.ort = ort;
    this.detector = detector;
    this.shape = shape;
    this.embedder = embedder;
    this.kind = spec.kind;
    this.minScore = spec.pipeline_min_score;
    this.boxMap = spec.hog_box_map || MTCNN_TO_HOG_BOX;
  }

  // rgb: Uint8Array [h * w * 3]. Returns {faces: [{box, score, landmarks, points5, descriptor}], timings}.
  async analyze(rgb, h, w) {
    const t0 = performance.now();
    // as open_face_pipeline (min_score = edge/face/models.py default_min_score: MTCNN's last stage passes a
    // fist or a metal bowl at 0.86; BlazeFace's own cut-off already applies)
    const dets = (await this.detector.detect(rgb, h, w)).filter((d) => d.score >= this.minScore);
    const t1 = performance.now();
    const chips = new Float32Array(dets.length * 3 * CHIP * CHIP);
    const plane = CHIP * CHIP;
    dets.forEach((d, i) => {
      d.points5 = this.shape.predict(rgb, h, w, hogLikeRect(d.box, this.boxMap));
      const chip = alignChipDlib5(rgb, h, w, d.points5);
      for (let p = 0; p < plane; p++) {
        for (let c = 0; c < 3; c++) chips[i * 3 * plane + c * plane + p] = chip[p * 3 + c];
      }
    });
    const t2 = performance.now();
    if (dets.length > 0) {
      const out = await this.embedder.run({ chip: new this.ort.Tensor("float32", chips, [dets.length, 3, CHIP, CHIP]) });
      const desc = out.descriptor.data;
      dets.forEach((d, i) => {
        d.descriptor = Array.from(desc.subarray(i * 128, i * 128 + 128));
      });
    }
    const t3 = performance.now();
    return { faces: dets, timings: { detect_ms: t1 - t0, align_ms: t2 - t1, embed_ms: t3 - t2, total_ms: t3 - t0 } };
  }
}

export function distance(a, b) {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) ** 2;
  return Math.sqrt(s);
}
