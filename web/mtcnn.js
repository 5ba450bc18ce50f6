// MTCNN cascade in the browser: a line-by-line port of edge/face/detect_mtcnn.py.
// Float32 arithmetic of the numpy original is reproduced with Math.fround after every operation (one
// float32 op computed in double then rounded is exactly the float32 result), so boxes agree bit for bit
// when the nets' outputs do.

const f = Math.fround;
const STRIDE = 2;
const CELL = 12;
const MAX_BATCH = 256;

export function pyramidScales(height, width, minFaceSize, factor) {
  const m = 12.0 / minFaceSize;
  let minl = Math.min(height, width) * m;
  const scales = [];
  let scale = m;
  while (minl >= 12) {
    scales.push(scale);
    scale *= factor;
    minl *= factor;
  }
  return scales;
}

// Cumulative sums down the rows: Int32Array [(H + 1) * W * 3], first row zero (rgb is RGB, 3 per pixel).
export function rowIntegral(rgb, h, w) {
  const out = new Int32Array((h + 1) * w * 3);
  const row = w * 3;
  for (let r = 0; r < h; r++) {
    for (let k = 0; k < row; k++) out[(r + 1) * row + k] = out[r * row + k] + rgb[r * row + k];
  }
  return out;
}

// The source rows (columns) start:end of each output row of an area resize, as torch and OpenCV take them.
export function areaBounds(nIn, nOut) {
  const start = new Int32Array(nOut);
  const end = new Int32Array(nOut);
  for (let i = 0; i < nOut; i++) {
    start[i] = Math.floor((i * nIn) / nOut);
    end[i] = -Math.floor((-(i + 1) * nIn) / nOut);
  }
  return [start, end];
}

// torch's interpolate(mode="area") of rows r0:r1, cols c0:c1: float32 HWC [outH * outW * 3].
export function areaResizeWindow(integral, w, win, outH, outW) {
  const [r0, r1, c0, c1] = win;
  const [rs, re] = areaBounds(r1 - r0, outH);
  const [cs, ce] = areaBounds(c1 - c0, outW);
  const nc = c1 - c0;
  const row = w * 3;
  const out = new Float32Array(outH * outW * 3);
  const cols = new Float64Array((nc + 1) * 3);
  for (let i = 0; i < outH; i++) {
    const a = (r0 + re[i]) * row;
    const b = (r0 + rs[i]) * row;
    const n = re[i] - rs[i];
    for (let j = 0; j < nc; j++) {
      for (let k = 0; k < 3; k++) {
        const idx = (c0 + j) * 3 + k;
        cols[(j + 1) * 3 + k] = cols[j * 3 + k] + (integral[a + idx] - integral[b + idx]) / n;
      }
    }
    for (let j = 0; j < outW; j++) {
      const d = ce[j] - cs[j];
      for (let k = 0; k < 3; k++) {
        out[(i * outW + j) * 3 + k] = (cols[ce[j] * 3 + k] - cols[cs[j] * 3 + k]) / d;
      }
    }
  }
  return out;
}

// HWC float32 -> CHW (x - 127.5) * 0.0078125 written into dst at offset.
function normaliseInto(hwc, h, w, dst, offset) {
  const plane = h * w;
  for (let p = 0; p < plane; p++) {
    for (let k = 0; k < 3; k++) dst[offset + k * plane + p] = f(f(hwc[p * 3 + k] - 127.5) * 0.0078125);
  }
}

export function nms(boxes, threshold, useMin = false, plusOne = false) {
  // boxes: array of objects with b (Float32 x1,y1,x2,y2) and s (score). Returns kept indices.
  const n = boxes.length;
  if (n === 0) return [];
  const one = plusOne ? 1 : 0;
  const thr = f(threshold);
  const area = boxes.map(({ b }) => f(f(f(b[2] - b[0]) + one) * f(f(b[3] - b[1]) + one)));
  let order = [...Array(n).keys()].sort((i, j) => boxes[j].s - boxes[i].s || i - j);
  const keep = [];
  while (order.length > 0) {
    const i = order[0];
    keep.push(i);
    const bi = boxes[i].b;
    const rest = [];
    for (let q = 1; q < order.length; q++) {
      const bj = boxes[order[q]].b;
      const ww = Math.max(0, f(f(Math.min(bi[2], bj[2]) - Math.max(bi[0], bj[0])) + one));
      const hh = Math.max(0, f(f(Math.min(bi[3], bj[3]) - Math.max(bi[1], bj[1])) + one));
      const inter = f(ww * hh);
      const ratio = useMin
        ? f(inter / Math.min(area[i], area[order[q]]))
        : f(inter / f(f(area[i] + area[order[q]]) - inter));
      if (ratio <= thr) rest.push(order[q]);
    }
    order = rest;
  }
  return keep;
}

function regress(box, reg, plusOne) {
  const one = plusOne ? 1 : 0;
  const w = f(f(box[2] - box[0]) + one);
  const h = f(f(box[3] - box[1]) + one);
  return Float32Array.of(
    f(box[0] + f(reg[0] * w)),
    f(box[1] + f(reg[1] * h)),
    f(box[2] + f(reg[2] * w)),
    f(box[3] + f(reg[3] * h)),
  );
}

function square(box) {
  const w = f(box[2] - box[0]);
  const h = f(box[3] - box[1]);
  const side = Math.max(w, h);
  const x1 = f(f(box[0] + f(w * 0.5)) - f(side * 0.5));
  const y1 = f(f(box[1] + f(h * 0.5)) - f(side * 0.5));
  return Float32Array.of(x1, y1, f(x1 + side), f(y1 + side));
}

function cropWindow(box, width, height) {
  const x = Math.max(Math.trunc(box[0]), 1);
  const y = Math.max(Math.trunc(box[1]), 1);
  const ex = Math.min(Math.trunc(box[2]), width);
  const ey = Math.min(Math.trunc(box[3]), height);
  return { win: [y - 1, ey, x - 1, ex], valid: ey > y - 1 && ex > x - 1 };
}

export class Mtcnn {
  // sessions: {pnet, rnet, onet} onnxruntime-web InferenceSessions; ort: the ort namespace.
  constructor(ort, sessions, { minFaceSize = 20, thresholds = [0.6, 0.7, 0.7], factor = 0.709 } = {}) {
    this.ort = ort;
    this.sessions = sessions;
    this.minFaceSize = minFaceSize;
    this.thresholds = thresholds.map(f);
    this.factor = factor;
  }

  async run(name, data, dims) {
    const session = this.sessions[name];
    const out = await session.run({ input: new this.ort.Tensor("float32", data, dims) });
    return session.outputNames.map((n) => out[n]);
  }

  async stage1(integral, h, w) {
    let found = [];
    for (const scale of pyramidScales(h, w, this.minFaceSize, this.factor)) {
      const hs = Math.trunc(h * scale + 1);
      const ws = Math.trunc(w * scale + 1);
      const level = areaResizeWindow(integral, w, [0, h, 0, w], hs, ws);
      const x = new Float32Array(3 * hs * ws);
      normaliseInto(level, hs, ws, x, 0);
      const [reg, prob] = await this.run("pnet", x, [1, 3, hs, ws]);
      const [, , mh, mw] = prob.dims;
      const s = f(scale);
      const boxes = [];
      for (let yy = 0; yy < mh; yy++) {
        for (let xx = 0; xx < mw; xx++) {
          const p = prob.data[mh * mw + yy * mw + xx];
          if (p >= this.thresholds[0]) {
            const r = [0, 1, 2, 3].map((k) => reg.data[k * mh * mw + yy * mw + xx]);
            boxes.push({
              b: Float32Array.of(
                Math.floor(f(f(STRIDE * xx + 1) / s)),
                Math.floor(f(f(STRIDE * yy + 1) / s)),
                Math.floor(f(f(STRIDE * xx + CELL) / s)),
                Math.floor(f(f(STRIDE * yy + CELL) / s)),
              ),
              s: p,
              r,
            });
          }
        }
      }
      found = found.concat(nms(boxes, 0.5).map((i) => boxes[i]));
    }
    const picked = nms(found, 0.7).map((i) => found[i]);
    return picked.map(({ b, s, r }) => ({ b: square(regress(b, r, false)), s }));
  }

  async netOnCrops(name, integral, h, w, boxes, side) {
    const valid = [];
    const wins = [];
    for (const box of boxes) {
      const { win, valid: ok } = cropWindow(box.b, w, h);
      if (ok) {
        valid.push(box);
        wins.push(win);
      }
    }
    const outs = [];
    const size = 3 * side * side;
    for (let start = 0; start < wins.length; start += MAX_BATCH) {
      const part = wins.slice(start, start + MAX_BATCH);
      const x = new Float32Array(part.length * size);
      part.forEach((win, i) => normaliseInto(areaResizeWindow(integral, w, win, side, side), side, side, x, i * size));
      outs.push(await this.run(name, x, [part.length, 3, side, side]));
    }
    return { valid, outs };
  }

  async stage2(integral, h, w, boxes) {
    const { valid, outs } = await this.netOnCrops("rnet", integral, h, w, boxes, 24);
    const kept = [];
    let n = 0;
    for (const [reg, prob] of outs) {
      for (let i = 0; i < prob.dims[0]; i++, n++) {
        const p = prob.data[i * 2 + 1];
        if (p > this.thresholds[1]) kept.push({ b: valid[n].b, s: p, r: reg.data.slice(i * 4, i * 4 + 4) });
      }
    }
    return nms(kept, 0.7).map((i) => ({ b: square(regress(kept[i].b, kept[i].r, true)), s: kept[i].s }));
  }

  async stage3(integral, h, w, boxes) {
    const { valid, outs } = await this.netOnCrops("onet", integral, h, w, boxes, 48);
    const kept = [];
    let n = 0;
    for (const [reg, marks, prob] of outs) {
      for (let i = 0; i < prob.dims[0]; i++, n++) {
        const p = prob.data[i * 2 + 1];
        if (!(p > this.thresholds[2])) continue;
        const b = valid[n].b;
        const bw = f(f(b[2] - b[0]) + 1);
        const bh = f(f(b[3] - b[1]) + 1);
        const m = marks.data.subarray(i * 10, i * 10 + 10);
        const points = [];
        for (let k = 0; k < 5; k++) points.push([f(f(f(bw * m[k]) + b[0]) - 1), f(f(f(bh * m[5 + k]) + b[1]) - 1)]);
        kept.push({ b: regress(b, reg.data.subarray(i * 4, i * 4 + 4), true), s: p, points });
      }
    }
    return nms(kept, 0.7, true, true).map((i) => kept[i]);
  }

  // rgb: Uint8Array/Uint8ClampedArray [h * w * 3]. Returns [{box: [x1,y1,x2,y2], score, landmarks: [[x,y] x5]}].
  async detect(rgb, h, w) {
    const integral = rowIntegral(rgb, h, w);
    let boxes = await this.stage1(integral, h, w);
    if (!boxes.some((bx) => cropWindow(bx.b, w, h).valid)) return [];
    boxes = await this.stage2(integral, h, w, boxes);
    if (!boxes.some((bx) => cropWindow(bx.b, w, h).valid)) return [];
    const faces = await this.stage3(integral, h, w, boxes);
    return faces.map(({ b, s, points }) => ({ box: Array.from(b), score: s, landmarks: points }));
  }
}
