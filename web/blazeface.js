// BlazeFace in the browser: a line-by-line port of edge/face/detect_blazeface.py and edge/face/tiles.py.
// Every setting (input side, anchors, score cut-off, NMS, tiling, the mouth estimate) comes from the site's
// manifest, which converters/package/web.py writes from the Python constants. Float32 arithmetic of numpy is
// reproduced with Math.fround after every operation, as in mtcnn.js.

import { areaBounds } from "./mtcnn.js";

const f = Math.fround;
const NUM_COORDS = 16;
const NUM_KEYPOINTS = 6;
const SCORE_CLIP = 100;

// Python's round(): halves to even.
function pyRound(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

// SsdAnchorsCalculator with fixed 1x1 anchors: Float32Array [numBoxes * 2] of (x, y) centres.
export function ssdAnchors(spec) {
  const out = [];
  const strides = spec.strides;
  let layer = 0;
  while (layer < strides.length) {
    let last = layer;
    let perCell = 0;
    while (last < strides.length && strides[last] === strides[layer]) {
      perCell += 1 + (spec.interpolated_scale_aspect_ratio > 0 ? 1 : 0);
      last += 1;
    }
    const cells = Math.ceil(spec.size / strides[layer]);
    for (let y = 0; y < cells; y++) {
      for (let x = 0; x < cells; x++) {
        for (let k = 0; k < perCell; k++) out.push(f(f(x + 0.5) / cells), f(f(y + 0.5) / cells));
      }
    }
    layer = last;
  }
  return Float32Array.from(out);
}

// edge/face/tiles.py tile_grid: [{x0, y0, x1, y1}], row by row; [] when the frame is too small to tile.
export function tileGrid(width, height, inputSide, tiling) {
  const longSide = Math.max(width, height);
  if (longSide < tiling.min_side) return [];
  const overlap = Math.ceil((tiling.net_face * longSide) / inputSide);
  const n = tiling.per_side;
  const side = Math.min(longSide, Math.ceil((longSide + (n - 1) * overlap) / n));
  const count = (length) =>
    length === longSide ? n : 1 + Math.max(0, Math.ceil((length - side) / (side - overlap)));
  const starts = (length, s, c) =>
    c === 1 ? [0] : Array.from({ length: c }, (_, i) => pyRound((i * (length - s)) / (c - 1)));
  const sx = Math.min(side, width);
  const sy = Math.min(side, height);
  const tiles = [];
  for (const y0 of starts(height, sy, count(height))) {
    for (const x0 of starts(width, sx, count(width))) tiles.push({ x0, y0, x1: x0 + sx, y1: y0 + sy });
  }
  return tiles;
}

// letterbox_window: rows r0:r1, columns c0:c1 area-resized (exact integer sums, the float32 nearest to each
// mean) into the centre of a size x size square, mapped to [-1, 1]; returns {tensor, scale, padX, padY}.
export function letterboxWindow(rgb, w, win, size) {
  const [r0, r1, c0, c1] = win;
  const h0 = r1 - r0;
  const w0 = c1 - c0;
  const scale = size / Math.max(h0, w0);
  const newH = Math.max(1, pyRound(h0 * scale));
  const newW = Math.max(1, pyRound(w0 * scale));
  const top = Math.floor((size - newH) / 2);
  const left = Math.floor((size - newW) / 2);
  const out = new Float32Array(size * size * 3).fill(-1);
  const [rs, re] = areaBounds(h0, newH);
  const [cs, ce] = areaBounds(w0, newW);
  const rowSums = new Float64Array((w0 + 1) * 3); // prefix sums over columns of the window's summed rows
  const two = f(2 / 255);
  for (let i = 0; i < newH; i++) {
    for (let j = 0; j < w0; j++) {
      for (let k = 0; k < 3; k++) {
        let s = 0;
        for (let r = rs[i]; r < re[i]; r++) s += rgb[((r0 + r) * w + c0 + j) * 3 + k];
        rowSums[(j + 1) * 3 + k] = rowSums[j * 3 + k] + s;
      }
    }
    const rows = re[i] - rs[i];
    for (let j = 0; j < newW; j++) {
      const count = rows * (ce[j] - cs[j]);
      const o = ((top + i) * size + left + j) * 3;
      for (let k = 0; k < 3; k++) {
        const mean = f((rowSums[ce[j] * 3 + k] - rowSums[cs[j] * 3 + k]) / count);
        out[o + k] = f(f(mean * two) - 1);
      }
    }
  }
  return { tensor: out, scale: newW / w0, padX: left, padY: top };
}

// edge.face.tiles.look_window: the square zoom times the box's longer side centred on it, clipped; rows r0:r1,
// columns c0:c1, or null when less than 2 pixels of it are inside the frame.
export function lookWindow(box, zoom, width, height) {
  const cx = f(f(box[0] + box[2]) / 2);
  const cy = f(f(box[1] + box[3]) / 2);
  const half = f(f(zoom * Math.max(f(box[2] - box[0]), f(box[3] - box[1]))) / 2);
  const [c0, r0] = [Math.max(0, Math.trunc(f(cx - half))), Math.max(0, Math.trunc(f(cy - half)))];
  const [c1, r1] = [Math.min(width, Math.ceil(f(cx + half))), Math.min(height, Math.ceil(f(cy + half)))];
  return c1 - c0 >= 2 && r1 - r0 >= 2 ? [r0, r1, c0, c1] : null;
}

function sigmoid(logit) {
  const x = Math.min(SCORE_CLIP, Math.max(-SCORE_CLIP, logit));
  return f(1 / (1 + Math.exp(-x)));
}

function iouOne(a, boxes) {
  const areaA = f(f(a[2] - a[0]) * f(a[3] - a[1]));
  return boxes.map((b) => {
    const w = Math.max(0, f(Math.min(a[2], b[2]) - Math.max(a[0], b[0])));
    const h = Math.max(0, f(Math.min(a[3], b[3]) - Math.max(a[1], b[1])));
    const inter = f(w * h);
    const union = f(f(areaA + f(f(b[2] - b[0]) * f(b[3] - b[1]))) - inter);
    return union > 0 ? f(inter / union) : 0;
  });
}

// MediaPipe's weighted NMS over candidates [{box, kp, score}]: best score first.
export function weightedNms(cands, threshold) {
  let order = [...cands.keys()].sort((i, j) => cands[j].score - cands[i].score || i - j);
  const thr = f(threshold);
  const out = [];
  while (order.length > 0) {
    const best = cands[order[0]];
    const ious = iouOne(best.box, order.map((i) => cands[i].box));
    const member = ious.map((v, q) => q === 0 || v > thr);
    const cluster = order.filter((_, q) => member[q]);
    let total = 0;
    for (const i of cluster) total += cands[i].score;
    const box = [0, 0, 0, 0];
    const kp = new Array(NUM_KEYPOINTS * 2).fill(0);
    for (const i of cluster) {
      const c = cands[i];
      for (let k = 0; k < 4; k++) box[k] += c.box[k] * c.score;
      for (let k = 0; k < kp.length; k++) kp[k] += c.kp[k] * c.score;
    }
    out.push({ box: box.map((v) => f(v / total)), kp: kp.map((v) => f(v / total)), score: best.score });
    order = order.filter((_, q) => !member[q]);
  }
  return out;
}

// BlazeFace's six keypoints -> the pipeline's five (eyes by x, nose tip, mouth corners estimated).
function fivePoints(kp, halfMouthRatio) {
  let [ax, ay, bx, by] = [kp[0], kp[1], kp[2], kp[3]];
  if (ax > bx) [ax, ay, bx, by] = [bx, by, ax, ay];
  const hx = f(f(bx - ax) * halfMouthRatio);
  const hy = f(f(by - ay) * halfMouthRatio);
  const [mx, my] = [kp[6], kp[7]];
  return [
    [ax, ay],
    [bx, by],
    [kp[4], kp[5]],
    [f(mx - hx), f(my - hy)],
    [f(mx + hx), f(my + hy)],
  ];
}

export class BlazeFace {
  // session: an onnxruntime-web session of the ONNX translation; spec: the manifest's face.detector.
  constructor(ort, session, spec) {
    this.ort = ort;
    this.session = session;
    this.spec = spec;
    this.anchors = ssdAnchors(spec);
    this.input = session.inputNames[0];
  }

  async runRaw(tensor) {
    const size = this.spec.size;
    const out = await this.session.run({ [this.input]: new this.ort.Tensor("float32", tensor, [1, size, size, 3]) });
    const n = this.spec.num_boxes;
    let boxes = null;
    let scores = null;
    for (const name of this.session.outputNames) {
      const dims = out[name].dims;
      if (dims.length === 3 && dims[1] === n && dims[2] === NUM_COORDS) boxes = out[name].data;
      if (dims.length === 3 && dims[1] === n && dims[2] === 1) scores = out[name].data;
    }
    if (!boxes || !scores) {
      throw new Error(`BlazeFace: outputs of other shapes than (1, ${n}, ${NUM_COORDS}) and (1, ${n}, 1)`);
    }
    return { boxes, scores };
  }

  // One network pass over a window: its anchors scoring at least minScore (default: the cut), in image pixels.
  async candidates(rgb, w, win, minScoreAt = this.spec.min_score) {
    const size = this.spec.size;
    const place = letterboxWindow(rgb, w, win, size);
    const { boxes, scores } = await this.runRaw(place.tensor);
    const inv = f(1 / place.scale);
    const minScore = f(minScoreAt);
    const [padX, padY, ox, oy] = [f(place.padX), f(place.padY), f(win[2]), f(win[0])];
    const toX = (v) => f(f(f(f(v * size) - padX) * inv) + ox);
    const toY = (v) => f(f(f(f(v * size) - padY) * inv) + oy);
    const out = [];
    for (let a = 0; a < this.spec.num_boxes; a++) {
      const score = sigmoid(scores[a]);
      if (score < minScore) continue;
      const raw = (k) => f(boxes[a * NUM_COORDS + k] / size);
      const [axc, ayc] = [this.anchors[a * 2], this.anchors[a * 2 + 1]];
      const cx = f(raw(0) + axc);
      const cy = f(raw(1) + ayc);
      const hw = f(raw(2) * 0.5);
      const hh = f(raw(3) * 0.5);
      const box = [toX(f(cx - hw)), toY(f(cy - hh)), toX(f(cx + hw)), toY(f(cy + hh))];
      const kp = [];
      for (let k = 0; k < NUM_KEYPOINTS; k++) {
        kp.push(toX(f(raw(4 + 2 * k) + axc)), toY(f(raw(5 + 2 * k) + ayc)));
      }
      out.push({ box, kp, score });
    }
    return out;
  }

  // rgb: Uint8Array [h * w * 3]. Returns [{box, score, landmarks: [[x, y] x5]}], best score first.
  // As edge.face.detect_blazeface.detect: the frame, its tiles, then the second looks (edge.face.tiles).
  async detect(rgb, h, w) {
    const spec = this.spec;
    const tiling = spec.tiling;
    const tiles = tiling ? tileGrid(w, h, spec.size, tiling) : [];
    const cut = f(spec.min_score);
    const floor = tiling && tiling.look_score !== undefined ? Math.min(cut, f(tiling.look_score)) : cut;
    let cands = await this.candidates(rgb, w, [0, h, 0, w], floor);
    for (const t of tiling && tiling.cued && !this.cuesTiles(cands, Math.max(w, h)) ? [] : tiles) {
      const inside = (c) =>
        (t.x0 === 0 || c.box[0] >= t.x0) &&
        (t.y0 === 0 || c.box[1] >= t.y0) &&
        (t.x1 >= w || c.box[2] <= t.x1) &&
        (t.y1 >= h || c.box[3] <= t.y1);
      cands = cands.concat((await this.candidates(rgb, w, [t.y0, t.y1, t.x0, t.x1], floor)).filter(inside));
    }
    let found = weightedNms(cands.filter((c) => c.score >= cut), spec.nms_iou);
    if (floor < cut) found = await this.secondLooks(rgb, h, w, weightedNms(cands, spec.nms_iou), found);
    return found.map((d) => ({
      box: d.box,
      score: d.score,
      landmarks: fivePoints(d.kp, f(spec.half_mouth_to_eyes)),
    }));
  }

  // edge.face.detect_blazeface._cues_tiles: a cued frame gets its tiles when the whole-frame pass found no face
  // at the cut, or one narrower than net_face pixels at the network's input (float32 arithmetic, as numpy's).
  cuesTiles(cands, longSide) {
    const cut = f(this.spec.min_score);
    const scale = f(this.spec.size / longSide);
    const sides = cands
      .filter((c) => c.score >= cut)
      .map((c) => f(Math.min(f(c.box[2] - c.box[0]), f(c.box[3] - c.box[1])) * scale));
    return sides.length === 0 || Math.min(...sides) < this.spec.tiling.net_face;
  }

  // The merged candidates under the cut that overlap no detection (at most max_looks, best first) each get
  // one pass on a window look_zoom times their side; what it finds at the cut overlapping them is kept.
  async secondLooks(rgb, h, w, merged, found) {
    const { nms_iou: thr, tiling } = this.spec;
    const clear = (c) => found.length === 0 || Math.max(...iouOne(c.box, found.map((d) => d.box))) <= f(thr);
    const weak = merged.filter((c) => c.score < f(this.spec.min_score) && clear(c)).slice(0, tiling.max_looks);
    let parts = found;
    for (const c of weak) {
      const win = lookWindow(c.box, tiling.look_zoom, w, h);
      if (win === null) continue;
      const near = weightedNms(await this.candidates(rgb, w, win), thr);
      const ious = iouOne(c.box, near.map((d) => d.box));
      parts = parts.concat(near.filter((_, i) => ious[i] > f(thr)));
    }
    return parts === found ? found : weightedNms(parts, thr);
  }
}
